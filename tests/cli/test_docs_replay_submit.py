"""The replay guide's `spark-submit` line pastes where the page says (the folder of zipf.txt, keysplit's virtual
environment active: no path into the repository) and replays with the knobs of the `keysplit replay` line above
it, so that `keysplit compare` takes the pair."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from keysplit.cli import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "replay.md"
KNOBS = ("dataset", "groupings", "workers", "sources", "aggregators", "cpu_delay", "max_pending", "flush", "batch")


def test_the_spark_submit_line_needs_no_repository_path_and_has_the_knobs_of_the_replay_above():
    text = PAGE.read_text()
    [submit] = [line for line in text.splitlines() if "spark-submit --master" in line]
    replay = next(line for line in text.splitlines() if line.startswith("keysplit replay "))
    assert ".venv/" not in submit and "spark_replay/" not in submit  # nothing relative to the repository
    entry, _, args = submit.partition("print(m.__file__)')\" ")
    assert "import spark_replay.__main__" in entry and args.startswith("--dataset ")
    parser = build_parser(["replay"])
    submitted = parser.parse_args(["replay", *shlex.split(args)])
    above = parser.parse_args(shlex.split(replay)[1:])
    for knob in KNOBS:
        assert getattr(submitted, knob) == getattr(above, knob), knob
    assert re.search(r"--out \S+$", submit) and submitted.out != above.out
