"""Replay speed: messages per second through kg, sg and pkg once Spark is up, at local[1] and local[2].

    .venv/bin/python benchmarks/replay.py [--messages 4000000] [--sources 4] [--workers 10]

Each master runs in its own process (a JVM's core count is fixed at start-up) and reports, separately:
Spark start-up, the one-off ingest (read, number and deal the dataset into S sub-streams, exact counts), and
per grouping the replay proper (routing with keysplit.fast's kernel inside mapPartitions, I(t), memory,
Lindley queues; ``messages_per_second`` of the summary). The baseline, measured in the same process, is
``keysplit simulate``'s fast engine on the same dataset (one core, no Spark). The machine is shared: expect
noise, compare the ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

GROUPINGS = ["kg", "sg", "pkg"]


def child(args: argparse.Namespace) -> dict:
    from keysplit.datasets import open_dataset
    from keysplit.simulate import simulate
    from spark_replay.job import ReplayOptions, run_replay
    from spark_replay.session import get_session

    t0 = time.perf_counter()
    spark, _ = get_session(args.master)
    spark.sparkContext.parallelize(range(4), 2).count()  # the executors' Python workers are up
    startup = time.perf_counter() - t0
    # Warm-up on a tiny dataset: Python workers started, numba kernel loaded from its cache.
    run_replay(spark, ReplayOptions(dataset="zipf:messages=20000", groupings=GROUPINGS, workers=args.workers,
                                    sources=args.sources, out=os.path.join(args.dir, "warm")))
    tag = "".join(c for c in args.master if c.isalnum())
    opts = ReplayOptions(dataset=args.dataset, groupings=GROUPINGS, workers=args.workers, sources=args.sources,
                         cpu_delay_ms=args.cpu_delay, out=os.path.join(args.dir, tag))
    summary = run_replay(spark, opts)
    baseline = {}
    ds = open_dataset(args.dataset)
    for spec in GROUPINGS:
        baseline[spec] = simulate(ds, spec, args.workers, args.sources, engine="fast",
                                  messages_hint=summary["dataset"]["messages"]).messages_per_second
    spark.stop()
    return {
        "master": args.master,
        "startup_s": startup,
        "ingest_s": summary["replay"]["ingest_seconds"],
        "messages": summary["dataset"]["messages"],
        "replay": {r["grouping"]: r["messages_per_second"] for r in summary["runs"]},
        "seconds": {r["grouping"]: r["seconds"] for r in summary["runs"]},
        "simulate_fast": baseline,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--messages", type=int, default=4_000_000)
    p.add_argument("--sources", type=int, default=4)
    p.add_argument("--workers", type=int, default=10)
    p.add_argument("--cpu-delay", type=float, default=1.0)
    p.add_argument("--masters", default="local[1],local[2]")
    p.add_argument("--master", help=argparse.SUPPRESS)  # child mode
    p.add_argument("--dataset", help=argparse.SUPPRESS)
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.master:
        print(json.dumps(child(args)))
        return 0
    from keysplit.datasets import open_dataset, write_dataset

    work = tempfile.mkdtemp(prefix="keysplit-bench-replay-")
    t0 = time.perf_counter()
    spec, _ = write_dataset(open_dataset(f"zipf:z=1.2,keys=100000,messages={args.messages},seed=7"),
                            os.path.join(work, "zipf.csv"))
    print(f"dataset: {args.messages:,} messages (zipf z=1.2, 100k keys) written in {time.perf_counter() - t0:.1f} s; "
          f"W={args.workers}, S={args.sources}, cpu delay {args.cpu_delay:g} ms")
    results = []
    for master in args.masters.split(","):
        out = subprocess.run(
            [sys.executable, __file__, "--master", master, "--dataset", spec, "--dir", work,
             "--sources", str(args.sources), "--workers", str(args.workers), "--cpu-delay", str(args.cpu_delay)],
            capture_output=True, text=True, check=True,
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print(f"messages replayed: {results[0]['messages']:,}")
    print(f"{'master':<10} {'start-up s':>10} {'ingest s':>9} " + " ".join(f"{g + ' msg/s':>14}" for g in GROUPINGS)
          + " " + " ".join(f"{'sim ' + g:>12}" for g in GROUPINGS))
    for r in results:
        print(f"{r['master']:<10} {r['startup_s']:>10.1f} {r['ingest_s']:>9.1f} "
              + " ".join(f"{r['replay'][g]:>14,.0f}" for g in GROUPINGS)
              + " " + " ".join(f"{r['simulate_fast'][g]:>12,.0f}" for g in GROUPINGS))
    if len(results) >= 2:
        a, b = results[0], results[-1]
        print(f"speed-up {b['master']} / {a['master']}: "
              + ", ".join(f"{g} {b['replay'][g] / a['replay'][g]:.2f}x" for g in GROUPINGS))
    for r in results:
        total = r["ingest_s"] + sum(r["seconds"].values())
        print(f"{r['master']}: end to end (ingest once + {len(GROUPINGS)} groupings): "
              f"{len(GROUPINGS) * r['messages'] / total:,.0f} grouping-messages/s")
    for r in results:
        print(f"{r['master']}: replay / simulate-fast (same process; simulate also parses the file): "
              + ", ".join(f"{g} {r['replay'][g] / r['simulate_fast'][g]:.2f}x" for g in GROUPINGS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
