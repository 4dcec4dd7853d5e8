"""The pages paste: every ``sh``/``bash`` block of the README and the user guides runs, in order, as a user
following them would, in an empty scratch folder, and each example shows the effect it is there to show.

The README, then getting started and the guides in the order of the site's navigation, share one folder (a
guide may use a file or a run an earlier page made, as a reader who followed them has it); a command a reader
already ran there (getting started repeats the README's first commands) is not run again. Every command must
succeed (exit 0), nothing is written into the repository, and nothing a page wrote is replaced by a later page
without its ``--force``. ``make`` lines are the repository's own targets (``make test`` is this
suite), so they are not run here; a block that needs what this machine has not (a Storm cluster, a remote
Spark master) is fenced ``text``, not ``sh``, and is only parsed (``tests/cli/test_docs_commands.py``).

Effects: where a page runs the same topology with ``kg`` and with ``pkg`` (same dataset, same knobs), PKG
must count more words a second than KG: the hot key's counter bounds KG, and the pages choose a CPU delay and
words a line for which it does. That is the claim each such page makes in its prose.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNABLE = re.compile(r"^```(sh|bash)\s*$")
FENCE = re.compile(r"^\s*```")
#: The pages a new user follows, in order: the README first (read before the site).
README = [ROOT / "README.md"]
GUIDES = [ROOT / "docs" / page for page in (
    "getting-started.md", "guides/your-topology.md", "guides/datasets.md", "guides/simulate.md", "guides/local.md",
    "guides/replay.md", "guides/compare.md", "guides/calibrate.md", "guides/advise.md")]
THROUGHPUT = re.compile(r"^throughput: ([\d,]+) words/s", re.MULTILINE)
HEREDOC = re.compile(r"<<-?'?(\w+)'?\s*$")
#: A toolkit run's table of the tuples each task of a router's downstream got (keysplit run FILE).
TASK_LOADS = re.compile(r"^task +tuples +share %\n-+ +-+ +-+\n((?:\d+ +\d+ +[\d.]+\n)+)", re.MULTILINE)


def shell_commands(page: Path) -> list[tuple[str, str]]:
    """(``page:line``, command) for every command of the page's ``sh``/``bash`` blocks, continuations joined, a
    here-document (``cat > FILE <<'EOF'`` ... ``EOF``) kept whole with its lines."""
    found: list[tuple[str, str]] = []
    runnable = inside = False
    pending, start = "", 0
    heredoc: list[str] = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if heredoc:
            heredoc.append(line)
            if line.strip() == heredoc[0]:
                found.append((f"{page.relative_to(ROOT)}:{start}", "\n".join(heredoc[1:])))
                heredoc = []
            continue
        if FENCE.match(line):
            inside = not inside
            runnable = inside and bool(RUNNABLE.match(line.strip()))
            continue
        if not runnable:
            continue
        text = line.strip()
        if not pending:
            start = number
        text = f"{pending} {text}".strip() if pending else text
        if text.endswith("\\"):
            pending = text[:-1]
            continue
        pending = ""
        here = HEREDOC.search(text)
        if here:  # the lines up to the delimiter belong to this command
            heredoc = [here.group(1), text]
            continue
        if text and not text.startswith("#") and not text.startswith("make "):
            found.append((f"{page.relative_to(ROOT)}:{start}", text))
    return found


def test_the_guides_have_commands_to_paste():
    commands = [c for page in README + GUIDES for _, c in shell_commands(page)]
    assert len(commands) > 25
    # what a reader cannot paste: option syntax, placeholders, files no page writes
    assert not [c for c in commands if re.search(r"\[--|\.\.\.|RUN_ID|\bDIR\b|book\.txt", c)]


def run_pages(pages: list[Path], scratch: Path) -> dict[str, str]:
    """Run the pages' commands in ``scratch``; the output of each, by ``page:line``."""
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "KEYSPLIT_CEILING": str(scratch.parent)}
    env.pop("KEYSPLIT_HOME", None)  # the state folder is the scratch folder's .keysplit, as a user's would be
    outputs: dict[str, str] = {}
    ran = set()
    for page in pages:
        for where, command in shell_commands(page):
            if command in ran:
                continue
            ran.add(command)
            result = subprocess.run(["bash", "-c", command], cwd=scratch, env=env, capture_output=True, text=True,
                                    timeout=900, check=False)
            assert result.returncode == 0, (f"{where}: `{command}` failed ({result.returncode}):\n"
                                            f"{(result.stdout + result.stderr)[-2000:]}")
            outputs[f"{where} {command}"] = result.stdout + result.stderr
    return outputs


def topology_runs(outputs: dict[str, str]) -> dict[tuple[str, str], int]:
    """words/s of each ``keysplit run wordcount`` that printed its throughput, by (knobs but the grouping,
    grouping)."""
    runs = {}
    for key, out in outputs.items():
        command = key.split(" ", 1)[1]
        if "keysplit run wordcount" not in command or not THROUGHPUT.search(out):
            continue
        words, rest, grouping = shlex.split(command, comments=True), [], ""
        for option, value in zip(["", *words], words):
            if option in ("-g", "--grouping"):
                grouping = value
            elif value not in ("-g", "--grouping", "--run-id") and option != "--run-id":
                rest.append(value)
        runs[(" ".join(rest), grouping)] = int(THROUGHPUT.search(out).group(1).replace(",", ""))
    return runs


def check_effects(outputs: dict[str, str]) -> int:
    """PKG faster than KG wherever a page runs both with the same knobs; how many such pairs there were."""
    runs = topology_runs(outputs)
    pairs = [(knobs, runs[(knobs, "kg")], runs[(knobs, "pkg")]) for knobs, g in runs if g == "kg"
             and (knobs, "pkg") in runs]
    for knobs, kg, pkg in pairs:
        assert pkg > kg, f"`{knobs}`: pkg counted {pkg:,} words/s, kg {kg:,}: the page's example shows no effect"
    return len(pairs)


def entries(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_the_pages_paste_in_an_empty_folder_and_show_their_effect(tmp_path):
    scratch = tmp_path / "reader"
    scratch.mkdir()
    before = entries(ROOT)
    outputs = run_pages(README + GUIDES, scratch)
    assert entries(ROOT) == before, "a page wrote into the repository"
    assert check_effects(outputs) >= 2  # the README's pair at 1 ms and the local guide's at 2 ms
    assert check_toolkit_loads(outputs) == 1  # your-topology.md: its run's loads are its simulate's


def check_toolkit_loads(outputs: dict[str, str]) -> int:
    """Where a page runs a topology file and then simulates the same dataset with ``--json``, the loads the run
    printed for its router are the simulator's, task for task; how many such pairs there were."""
    import json

    pairs = 0
    runs = [out for key, out in outputs.items() if re.search(r"keysplit run \S+\.py .*--dataset", key)]
    sims = [out for key, out in outputs.items() if "keysplit simulate" in key and "--json" in key]
    for run_out, sim_out in zip(runs, sims):
        table = TASK_LOADS.search(run_out)
        assert table, f"no loads table in the run's output:\n{run_out[-1500:]}"
        loads = [int(line.split()[1]) for line in table.group(1).splitlines()]
        assert loads == json.loads(sim_out)["runs"][0]["loads"], (loads, sim_out[-500:])
        pairs += 1
    return pairs
