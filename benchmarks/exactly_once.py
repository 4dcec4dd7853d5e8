"""The cost of exactly-once totals: words/s of ``keysplit run`` with ``--delivery exactly-once`` against the
at-least-once path on the same data and settings, and the peak Redis memory of the de-duplication state.

Baseline: ``--delivery at-least-once`` (Storm's plain acking, aggregators ``HINCRBY``), measured in the same
process, alternating with the exactly-once runs (``--repeat`` pairs per CPU delay; the medians are compared),
so the machine's noise falls on both. Target (docs/design/exactly-once.md): cost of at most 15% at CPU delay 0 and 1 ms.

Memory: the peak of ``dedup_peak_bytes`` (sampled every 0.2 s by the runner) for the stream and for a stream
``--longer`` times as long with the same settings: bounded by the lines in flight, it must not grow with the
stream.

    .venv/bin/python benchmarks/exactly_once.py [--delays 0,1] [--lines 20000] [--repeat 2] [--longer 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from topology_effect import KEYSPLIT, ROOT, add_topology_args, dataset_file


def run_once(delivery: str, delay: float, path: Path, args: argparse.Namespace) -> dict:
    """One ``keysplit run wordcount --json``; returns its summary."""
    cmd = [KEYSPLIT, "run", "wordcount", "--grouping", args.groupings.split(",")[0], "--dataset", f"text:{path}",
           "-S", str(args.sources), "-W", str(args.workers), "-A", str(args.aggregators),
           "--cpu-delay", f"{delay:g}", "--flush", f"{args.flush:g}", "--max-pending", str(args.max_pending),
           "--timeout", str(args.timeout), "--delivery", delivery, "--json"]
    if args.redis:
        cmd += ["--redis", args.redis]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--delays", default="0,1", help="CPU delays in ms per word (default 0,1)")
    p.add_argument("--repeat", type=int, default=2, help="at-least-once / exactly-once pairs per delay (default 2)")
    p.add_argument("--longer", type=int, default=3, help="the memory check's second stream is this many times "
                   "longer (default 3; 0 skips it)")
    add_topology_args(p, max_pending=2000)
    p.set_defaults(lines=20000, groupings="pkg")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    path = dataset_file(args)
    rows = []
    for delay in (float(d) for d in args.delays.split(",")):
        rates: dict[str, list[float]] = {"at-least-once": [], "exactly-once": []}
        peaks, marks = [], []
        for i in range(args.repeat):
            order = ("at-least-once", "exactly-once") if i % 2 == 0 else ("exactly-once", "at-least-once")
            for delivery in order:
                started = time.time()
                s = run_once(delivery, delay, path, args)
                if s["totals"] != "exact":
                    raise SystemExit(f"run {s['run_id']} ({delivery}) ended with totals {s['totals']}")
                rates[delivery].append(s["words_per_second"])
                if delivery == "exactly-once":
                    peaks.append(s["dedup_peak_bytes"])
                    marks.append(s["dedup_peak_marks"])
                if not args.json:
                    print(f"D={delay:g} ms {delivery:>13}: {s['words_per_second']:8.0f} words/s "
                          f"(run {s['run_id']}, {time.time() - started:.0f} s wall)", flush=True)
        base, exact = statistics.median(rates["at-least-once"]), statistics.median(rates["exactly-once"])
        rows.append({"cpu_delay_ms": delay, "at_least_once_words_per_second": base,
                     "exactly_once_words_per_second": exact, "cost": 1.0 - exact / base,
                     "dedup_peak_bytes": max(peaks), "dedup_peak_marks": max(marks), "runs": rates})
    memory = None
    if args.longer > 1:
        longer = argparse.Namespace(**{**vars(args), "lines": args.lines * args.longer})
        s = run_once("exactly-once", 0.0, dataset_file(longer), longer)
        memory = {"lines": args.lines, "peak_bytes": rows[0]["dedup_peak_bytes"] if rows else None,
                  "peak_marks": rows[0]["dedup_peak_marks"] if rows else None,
                  "longer_lines": longer.lines, "longer_peak_bytes": s["dedup_peak_bytes"],
                  "longer_peak_marks": s["dedup_peak_marks"]}
    title = (f"keysplit run wordcount -g {args.groupings.split(',')[0]}: {path.name}, S={args.sources} "
             f"W={args.workers} A={args.aggregators}, flush {args.flush:g} s, max pending {args.max_pending}")
    result = {"title": title, "rows": rows, "memory": memory}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"\n{title}\n")
    print("| CPU delay (ms) | at-least-once words/s | exactly-once words/s | cost | peak dedup memory | peak marks |")
    print("|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['cpu_delay_ms']:g} | {r['at_least_once_words_per_second']:.0f} | "
              f"{r['exactly_once_words_per_second']:.0f} | {100 * r['cost']:.1f}% | "
              f"{r['dedup_peak_bytes'] / 1024:.0f} KiB | {r['dedup_peak_marks']:,} |")
    if memory:
        print(f"\npeak dedup memory: {memory['peak_bytes'] / 1024:.0f} KiB ({memory['peak_marks']:,} marks) over "
              f"{memory['lines']:,} lines, {memory['longer_peak_bytes'] / 1024:.0f} KiB "
              f"({memory['longer_peak_marks']:,} marks) over {memory['longer_lines']:,} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
