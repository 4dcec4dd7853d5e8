"""``keysplit logs``: print the last lines of each task's log and stderr of a local run.

A run's task logs in one place, instead of three files a task to open one by one. A local run keeps, per task,
``<task>.log`` (what the component logged), ``<task>.stderr`` (what the process wrote outside its log:
tracebacks) and ``<task>.handshake.json`` in ``<state folder>/logs/RUN_ID/``. This prints the last lines of each
task's log and stderr, tasks in component order, an empty stderr said in one word.
"""

from __future__ import annotations

import argparse
import re
from collections import deque
from pathlib import Path

from keysplit.cli import command_summary
from keysplit.commands.common import positive_int
from keysplit.errors import KeysplitError

NAME, HELP = command_summary(__doc__)
#: ``component-taskid``, the stem of every task's files.
TASK = re.compile(r"(?P<component>.+)-(?P<task>\d+)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(NAME, help=HELP, description=__doc__.split("\n\n", 1)[1].strip(),
                       epilog="examples:\n  keysplit logs latest\n  keysplit logs local-kg --task counter --lines 20",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run_id", metavar="RUN_ID", help="the run (`latest`: the run whose logs changed last)")
    p.add_argument("--lines", "-n", type=positive_int, default=5, metavar="N",
                   help="the last N lines of each file (default 5)")
    p.add_argument("--task", metavar="NAME", help="only the tasks of this component (router, counter, ...) or "
                   "this task (counter-3)")
    p.set_defaults(func=run)


def run_folder(run_id: str) -> Path:
    """The log folder of ``run_id`` (``latest``: the most recently written one); a one-line error if none."""
    from keysplit.home import keysplit_home
    from keysplit.runs.records import check_run_id

    logs = keysplit_home() / "logs"
    if run_id == "latest" and not (logs / run_id).is_dir():
        folders = [f for f in logs.iterdir() if f.is_dir()] if logs.is_dir() else []
        if not folders:
            raise KeysplitError(f"no run has logs in {logs}")
        return max(folders, key=lambda f: f.stat().st_mtime)
    folder = logs / check_run_id(run_id)
    if not folder.is_dir():
        raise KeysplitError(f"run {run_id} has no logs in {logs} (a cluster run's are in Storm's worker logs)")
    return folder


def tail(path: Path, lines: int) -> list[str]:
    """The last ``lines`` lines of ``path``, read in one pass without holding the file."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        return [line.rstrip("\n") for line in deque(fh, maxlen=lines)]


def order(stem: str) -> tuple[str, int]:
    match = TASK.fullmatch(stem)
    return (match["component"], int(match["task"])) if match else (stem, 0)


def run(args: argparse.Namespace) -> int:
    folder = run_folder(args.run_id)
    stems = sorted({p.name.split(".", 1)[0] for p in folder.iterdir() if p.suffix in (".log", ".stderr")}, key=order)
    if args.task:
        chosen = [s for s in stems if s == args.task or order(s)[0] == args.task]
        if not chosen:
            raise KeysplitError(f"run {folder.name} has no task {args.task!r} (components: "
                                f"{', '.join(sorted({order(s)[0] for s in stems})) or 'none'})")
        stems = chosen
    print(f"logs of run {folder.name} in {folder}")
    for stem in stems:
        print(f"\n== {stem}")
        for suffix in (".log", ".stderr"):
            path = folder / f"{stem}{suffix}"
            if not path.exists():
                continue
            last = tail(path, args.lines)
            if not last:
                print(f"{suffix[1:]}: empty")
                continue
            print(f"{suffix[1:]} ({path.name}, last {len(last)} line(s)):")
            for line in last:
                print(f"  {line}")
    return 0
