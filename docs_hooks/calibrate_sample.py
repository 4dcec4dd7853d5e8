"""The calibration guide's sample output (docs/guides/calibrate.md), printed again from the profile it shows.

    .venv/bin/python docs_hooks/calibrate_sample.py --from .keysplit/calibrations/here.json   # take a new profile
    .venv/bin/python docs_hooks/calibrate_sample.py                  # print the sample from the committed profile

The guide's sample is what ``keysplit calibrate --run kg-1,cal-sg --name here`` printed after the guide's two runs
(in the folder of Getting started, with its ``zipf.txt``); the profile it wrote is committed as
``docs/img/calibrate/here.json``. The fitted and measured costs and the runs' measured numbers are in that file;
the model's columns are computed again here (the topology model is deterministic: the guide's corpus, written from
its generator spec, routed as each run's routers route it, with the profile's costs), so they are what
``keysplit calibrate`` would print today with those costs. ``tests/cli/test_docs_figures.py`` checks that the
page shows exactly this, and that every run is within the calibration's targets of the model.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROFILE = ROOT / "docs" / "img" / "calibrate" / "here.json"
#: The corpus of Getting started (its first command), where the guide's runs read it: ``zipf.txt``.
CORPUS = ("zipf:z=1.1,keys=5000,messages=20000,seed=42", "zipf.txt")
#: Where ``keysplit calibrate --name here`` says it wrote the profile, run in the guide's folder.
WROTE = os.path.join(".keysplit", "calibrations", "here.json")


def reproduced(profile: dict) -> list[dict]:
    """The profile's ``fit`` computed again: each of its runs, as it measured, next to the model's words/s, p50
    and p99 with the profile's costs (``keysplit.topology_model.profile.reproduction``)."""
    from keysplit.cli import main
    from keysplit.datasets import open_dataset
    from keysplit.topology_model.profile import arrays_of_run, reproduction

    measured = {row["run_id"]: row["measured"] for row in profile["fit"]}
    spec, path = CORPUS
    cwd = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                assert main(["datasets", "generate", spec, "--out", path, "--words-per-line", "10"]) == 0
            lines = [keys for _, keys in open_dataset(f"text:{path}").records() if keys]
            runs = []
            for record in profile["runs"]:
                if record["dataset"] != f"text:{path}":
                    raise AssertionError(f"{record['run_id']} read {record['dataset']}, not the guide's text:{path}")
                m = measured[record["run_id"]]
                # what a run's summary holds beyond the profile's record: its latency, its feed's size
                runs.append(record | {"words_per_second": m["words_per_second"],
                                      "latency_ms": {"p50": m["p50_ms"], "p99": m["p99_ms"]},
                                      "messages": sum(map(len, lines)), "lines": len(lines)})
            return reproduction(runs, [arrays_of_run(r) for r in runs], profile)
        finally:
            os.chdir(cwd)


def sample(path: Path = PROFILE) -> str:
    """What ``keysplit calibrate`` prints for the profile at ``path`` with the model as it is today."""
    from keysplit.commands.calibrate import print_profile

    profile = json.loads(path.read_text(encoding="utf-8"))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_profile(profile | {"fit": reproduced(profile)}, WROTE)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="profile", metavar="FILE", help="take this profile (what calibrate wrote) first")
    args = p.parse_args(argv)
    if args.profile:
        PROFILE.parent.mkdir(parents=True, exist_ok=True)
        PROFILE.write_text(Path(args.profile).read_text(encoding="utf-8"), encoding="utf-8")
    sys.stdout.write(sample())
    return 0


if __name__ == "__main__":
    sys.exit(main())
