"""Where a busy machine multiplies the test suite's time: two runs' per-test times side by side.

Record a run's times with ``KEYSPLIT_TEST_TIMES=FILE`` (tests/conftest.py writes each test's wall time and CPU
time, this process's and its waited-for children's, i.e. the runs' task processes), once on a quiet machine and
once on a busy one, then compare::

    KEYSPLIT_TEST_TIMES=/tmp/quiet.json make test
    stress --cpu 4 & KEYSPLIT_TEST_TIMES=/tmp/busy.json make test; kill %1
    .venv/bin/python benchmarks/suite_time.py /tmp/quiet.json /tmp/busy.json

On a machine shared with k busy processes, a test that only computes takes about (k + n) / n times as long on n
cores; its CPU time stays. A test whose wall time grows far more than that is waiting on something the load
stretches (a timeout that fires, a replay it causes, a fixed poll), and one whose CPU time grows does more work
under load (retries, replays). The script prints both, per test and per test file, biggest extra time first.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


def load(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        sys.exit(f"suite_time: cannot read {path}: {exc}")


def by_file(tests: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    files: dict[str, dict[str, float]] = defaultdict(lambda: {"wall_s": 0.0, "cpu_s": 0.0})
    for nodeid, t in tests.items():
        f = files[nodeid.split("::")[0]]
        f["wall_s"] += t["wall_s"]
        f["cpu_s"] += t["cpu_s"]
    return dict(files)


def compare(quiet: dict[str, dict[str, float]], busy: dict[str, dict[str, float]]) -> list[dict]:
    rows = []
    for name in quiet.keys() & busy.keys():
        q, b = quiet[name], busy[name]
        rows.append({"name": name, "quiet_wall_s": q["wall_s"], "busy_wall_s": b["wall_s"],
                     "extra_s": b["wall_s"] - q["wall_s"], "wall_ratio": b["wall_s"] / max(q["wall_s"], 1e-3),
                     "cpu_ratio": b["cpu_s"] / max(q["cpu_s"], 1e-3),
                     "quiet_cpu_share": q["cpu_s"] / max(q["wall_s"], 1e-3)})
    return sorted(rows, key=lambda r: -r["extra_s"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("quiet", help="times recorded on a quiet machine (KEYSPLIT_TEST_TIMES)")
    p.add_argument("busy", help="times recorded on a busy machine")
    p.add_argument("--top", type=int, default=20, help="rows per table (default 20)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    quiet, busy = load(args.quiet), load(args.busy)
    tests = compare(quiet["tests"], busy["tests"])
    files = compare(by_file(quiet["tests"]), by_file(busy["tests"]))
    total = {k: sum(t["wall_s"] for t in run["tests"].values()) for k, run in (("quiet", quiet), ("busy", busy))}
    out = {"quiet_total_s": total["quiet"], "busy_total_s": total["busy"],
           "ratio": total["busy"] / max(total["quiet"], 1e-3),
           "load_at_end": {"quiet": quiet.get("load_at_end"), "busy": busy.get("load_at_end")},
           "files": files[:args.top], "tests": tests[:args.top]}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"suite: {total['quiet'] / 60:.1f} min quiet, {total['busy'] / 60:.1f} min busy "
          f"({out['ratio']:.2f}x; load at the end {quiet.get('load_at_end')} and {busy.get('load_at_end')})")
    for title, rows in (("test files", files), ("tests", tests)):
        print(f"\n{title}, biggest extra time first:")
        print(f"{'quiet s':>9} {'busy s':>9} {'extra s':>9} {'wall x':>7} {'cpu x':>6} {'cpu/wall':>8}  name")
        for r in rows[:args.top]:
            print(f"{r['quiet_wall_s']:9.1f} {r['busy_wall_s']:9.1f} {r['extra_s']:9.1f} {r['wall_ratio']:7.2f} "
                  f"{r['cpu_ratio']:6.2f} {r['quiet_cpu_share']:8.2f}  {r['name']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
