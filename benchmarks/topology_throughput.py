"""Throughput of the whole word-count topology on the local runner, with batched routing and with one tuple per
word (``--batch 1``), at CPU delays D = 0, 0.5, 1 and 2 ms, next to the workers' limit W / D: no topology counts
faster than its W counters can sleep, so W * 1000 / D words/s is the bound a run reaches when the workers, not the
plumbing (router, runner, protocol), limit it.

Each cell is one ``keysplit run wordcount --json`` subprocess over the same seeded Zipf text as
``topology_effect.py`` (Redis spout -> S routers -> W counters -> A aggregators -> top-k, every line's tuple tree
acked, exactly-once totals), the two modes of a grouping and delay run back to back so that a load change on a
shared machine hits both alike. Throughput is words / (last ack - first emit), as every run reports it, so the
flush wait at the end (one to two periods) is part of it: the longer the run, the closer to the rate it sustains.

- D > 0: ``--lines`` lines (default 30,000, 10 words each), max pending ``--max-pending`` (5,000: Little's law,
  max pending x words per line / latency, stays above W / D at these delays);
- D = 0, the ceiling: ``--ceiling-lines`` lines (default 100,000, so the final flush wait is a few % of the run) and
  max pending ``--ceiling-max-pending`` (60,000: the runner, not Little's law, must bind; lines complete about
  2.3 s after their emit with no delay, so 20,000 lines in flight capped a run near 20,000 x 10 / 2.3 = 87,000
  words/s, below what the plumbing does since 26 Nov 2026);
- low load (``--light-rate`` words/s open loop at ``--light-delay`` ms, ``--light-lines`` lines, shuffle grouping):
  complete latency with batches and with one tuple per word. A batch waits at most ``batch_ms`` for more words,
  and a line waits for the counters' and aggregators' flush ticks anyway, so its latency grows by the batch delay at
  most (on average: a word that misses a tick by being held waits a whole period, with probability batch_ms / T).

    .venv/bin/python benchmarks/topology_throughput.py [--groupings kg,sg,pkg] [--delays 0,0.5,1,2] \\
        [--batch N --batch-ms MS] [--lines 20000] [--ceiling-lines 100000] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from topology_effect import add_topology_args, dataset_file, run_once


def load() -> str:
    """The machine's load averages (1, 5, 15 min), as `uptime` prints them."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_topology_args(p, max_pending=5000, lines=30000)
    p.add_argument("--delays", default="0,0.5,1,2", help="CPU delays in ms per word (default 0,0.5,1,2)")
    p.add_argument("--ceiling-lines", type=int, default=100_000, help="lines of the D = 0 runs (default 100000)")
    p.add_argument("--ceiling-max-pending", type=int, default=60_000, help="max pending of the D = 0 runs")
    p.add_argument("--message-timeout", type=int, default=120,
                   help="topology.message.timeout.secs (default 120: kg's hot counter holds lines long at 2 ms)")
    p.add_argument("--light-rate", type=float, default=1000.0, help="words/s of the low-load runs (0: none)")
    p.add_argument("--light-delay", type=float, default=1.0, help="CPU delay of the low-load runs, ms")
    p.add_argument("--light-lines", type=int, default=3000, help="lines of the low-load runs")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    batched = ["--batch", str(args.batch), "--batch-ms", f"{args.batch_ms:g}"]
    single = ["--batch", "1"]
    modes = (("batched", batched), ("single", single))
    started = time.time()
    loads = [load()]
    rows = []
    for delay in (float(d) for d in args.delays.split(",") if d):
        ceiling = delay == 0
        lines = args.ceiling_lines if ceiling else args.lines
        path = dataset_file(args, lines=lines)
        pending = args.ceiling_max_pending if ceiling else args.max_pending
        for grouping in args.groupings.split(","):
            row = {"grouping": grouping, "cpu_delay_ms": delay, "lines": lines, "max_pending": pending,
                   "limit_words_per_second": args.workers * 1000.0 / delay if delay else None}
            for mode, options in modes:
                extra = [*options, "--message-timeout", str(args.message_timeout)]
                s = run_once(grouping, delay, path, args, max_pending=pending, extra=extra)
                row[mode] = {k: s.get(k) for k in ("run_id", "words_per_second", "latency_ms", "duration_s",
                                                   "words_per_tuple", "replayed", "totals")}
                if not args.json:
                    share = f" ({s['words_per_second'] / row['limit_words_per_second']:.0%} of W/D)" if delay else ""
                    print(f"D={delay:g} ms {grouping:>4} {mode:>7}: {s['words_per_second']:8.0f} words/s{share}, "
                          f"{s['words_per_tuple']:.1f} words a tuple, latency mean {s['latency_ms']['mean']:.0f} ms "
                          f"(load {load()})", file=sys.stderr, flush=True)
            rows.append(row)
            loads.append(load())
    light = None
    if args.light_rate:
        path = dataset_file(args, lines=args.light_lines)
        light = {"rate": args.light_rate, "cpu_delay_ms": args.light_delay, "lines": args.light_lines}
        for mode, options in modes:
            s = run_once("sg", args.light_delay, path, args, max_pending=args.max_pending,
                         extra=[*options, "--rate", f"{args.light_rate:g}"])
            light[mode] = {k: s.get(k) for k in ("run_id", "words_per_second", "latency_ms", "words_per_tuple")}
        loads.append(load())
    result = {"workers": args.workers, "sources": args.sources, "aggregators": args.aggregators,
              "flush_secs": args.flush, "batch": args.batch, "batch_ms": args.batch_ms, "rows": rows, "light": light,
              "load_averages": loads, "cores": os.cpu_count(), "wall_s": time.time() - started}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"\nwhole topology, S={args.sources} W={args.workers} A={args.aggregators}, flush {args.flush:g} s; "
          f"batches of up to {args.batch} words or {args.batch_ms:g} ms against --batch 1; {os.cpu_count()} cores; "
          f"load average (1, 5, 15 min) {loads[0]} at the start, {loads[-1]} at the end\n")
    print("| CPU delay (ms) | W / D (words/s) | grouping | batched words/s | % of W/D | words a tuple | "
          "--batch 1 words/s | % of W/D | batched / --batch 1 |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        b, o, limit = r["batched"], r["single"], r["limit_words_per_second"]
        pct_b = f"{b['words_per_second'] / limit:.0%}" if limit else "-"
        pct_o = f"{o['words_per_second'] / limit:.0%}" if limit else "-"
        print(f"| {r['cpu_delay_ms']:g} | {f'{limit:,.0f}' if limit else '-'} | {r['grouping']} | "
              f"{b['words_per_second']:,.0f} | {pct_b} | {b['words_per_tuple']:.1f} | "
              f"{o['words_per_second']:,.0f} | {pct_o} | "
              f"{b['words_per_second'] / o['words_per_second']:.2f} |")
    if light:
        print(f"\nlow load: sg, open loop at {light['rate']:g} words/s, CPU delay {light['cpu_delay_ms']:g} ms, "
              f"{light['lines']} lines\n")
        print("| mode | words/s | words a tuple | latency mean (ms) | p50 | p99 |")
        print("|---|---:|---:|---:|---:|---:|")
        for mode in ("batched", "single"):
            m = light[mode]
            lat = m["latency_ms"]
            print(f"| {'batched' if mode == 'batched' else '--batch 1'} | {m['words_per_second']:,.0f} | "
                  f"{m['words_per_tuple']:.1f} | {lat['mean']:,.0f} | {lat['p50']:,.0f} | {lat['p99']:,.0f} |")
        diff = light["batched"]["latency_ms"]["mean"] - light["single"]["latency_ms"]["mean"]
        print(f"\nmean latency, batched - --batch 1: {diff:+.0f} ms (the batch delay: {args.batch_ms:g} ms)")
    print(f"\n{result['wall_s'] / 60:.0f} min of wall time")
    return 0


if __name__ == "__main__":
    sys.exit(main())
