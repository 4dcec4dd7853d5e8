"""Throughput of the whole word-count topology on the local runner with no CPU delay: the ceiling every
`keysplit run` comparison must stay below (a comparison is only about groupings when its workers, not the
runner, are the bottleneck).

Each grouping is one ``keysplit run wordcount --cpu-delay 0 --json`` subprocess over the same seeded Zipf
text as ``topology_effect.py``: Redis spout -> S routers -> W counters -> A aggregators -> top-k, every
line's tuple tree acked. Baseline, measured in this process: the in-process simulator (``simulate``) routing
the same words with the same grouping (no processes, no protocol), so ``runner / simulator`` is the cost of
running the real topology. Also printed: the worker capacity W * 1000 / D of a CPU delay D, i.e. the delay
above which the workers, not the runner, limit a comparison.

A run's throughput is at most min(W * 1000 / D, runner ceiling, max_pending * words per line / latency): the
last term is Little's law, since a line is acked only after its counts are flushed and merged (latency >= ~1-2
flush periods). The default ``--max-pending 5000`` keeps that term above the runner's ceiling here.

    .venv/bin/python benchmarks/topology_throughput.py [--lines 6000] [--groupings kg,sg,pkg] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from topology_effect import add_topology_args, dataset_file, run_once

from keysplit.datasets import open_dataset
from keysplit.simulator import simulate


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_topology_args(p, max_pending=5000)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    path = dataset_file(args)
    dataset = open_dataset(f"text:{path}")
    dataset.stats()  # warm the file cache so the first baseline is not a cold read
    rows = []
    for grouping in args.groupings.split(","):
        started = time.perf_counter()
        sim = simulate(dataset, grouping, args.workers, args.sources)
        sim_rate = sim.messages / (time.perf_counter() - started)
        s = run_once(grouping, 0.0, path, args)
        rows.append({
            "grouping": grouping, "run_id": s["run_id"], "words": s["messages"],
            "runner_words_per_second": s["words_per_second"], "runner_lines_per_second": s["lines_per_second"],
            "simulator_words_per_second": sim_rate, "runner_vs_simulator": s["words_per_second"] / sim_rate,
            "latency_ms": s["latency_ms"], "duration_s": s["duration_s"],
            "saturating_delay_ms": args.workers * 1000.0 / s["words_per_second"],
        })
    if args.json:
        json.dump({"dataset": f"text:{path}", "rows": rows}, sys.stdout, indent=2)
        print()
        return 0
    print(f"whole topology, no CPU delay: text:{path.name}, S={args.sources} W={args.workers} "
          f"A={args.aggregators}, max pending {args.max_pending}\n")
    print("| grouping | runner words/s | lines/s | simulator words/s (baseline) | runner / simulator | "
          "mean latency (ms) | workers saturate above D (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['grouping']} | {r['runner_words_per_second']:.0f} | {r['runner_lines_per_second']:.0f} | "
              f"{r['simulator_words_per_second']:.0f} | {r['runner_vs_simulator']:.4f} | "
              f"{r['latency_ms']['mean']:.0f} | {r['saturating_delay_ms']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
