"""Replay at growing sizes: time, routing msg/s and the peak memory of the driver, the JVM and the Python workers.

    .venv/bin/python benchmarks/replay.py [--sizes 2000000,10000000,40000000] [--master local[2]]

Each size runs in its own driver process (so that peaks do not carry over) on a Zipf dataset (z=1.2, 100k
keys) written once as CSV, through kg, pkg (partitioned, one routing task per source) and pkg:load=global
(shared state: one routing task over the merged stream). A sampler thread reads, twice a second, the peak
resident size (``VmHWM``) of every process below the driver: the JVM, and the Python workers Spark starts
(``pyspark.daemon`` and its forks); "python workers" is the largest single worker. The routing task streams its
chunks, so that number should not grow with the dataset. The machine is shared: expect noise in the times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time

GROUPINGS = ["kg", "pkg", "pkg:load=global"]


def descendants(root: int) -> list[int]:
    parents: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        parents.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def peak_kib(pid: int) -> tuple[str, int]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as fh:
            hwm = next((int(line.split()[1]) for line in fh if line.startswith("VmHWM:")), 0)
    except OSError:
        return "", 0
    return cmd, hwm


class Sampler(threading.Thread):
    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.jvm = 0
        self.python = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            for pid in descendants(os.getpid()):
                cmd, hwm = peak_kib(pid)
                if "java" in cmd.split(" ", 1)[0]:
                    self.jvm = max(self.jvm, hwm)
                elif "python" in cmd:
                    self.python = max(self.python, hwm)
            self.stopped.wait(0.5)


def child(args: argparse.Namespace) -> dict:
    from spark_replay.job import ReplayOptions, run_replay
    from spark_replay.session import get_session, stop_session

    sampler = Sampler()
    sampler.start()
    spark, _ = get_session(args.master)
    t0 = time.perf_counter()
    summary = run_replay(spark, ReplayOptions(dataset=args.dataset, groupings=GROUPINGS, workers=args.workers,
                                              sources=args.sources, out=args.dir))
    total = time.perf_counter() - t0
    time.sleep(1.0)  # one more sample
    sampler.stopped.set()
    sampler.join()
    stop_session(spark)
    return {
        "messages": summary["dataset"]["messages"],
        "total_s": total,
        "ingest_s": summary["replay"]["ingest_seconds"],
        "routing": {r["grouping"]: r["messages_per_second"] for r in summary["runs"]},
        "driver_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "jvm_mib": sampler.jvm / 1024,
        "python_worker_mib": sampler.python / 1024,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="2000000,10000000,40000000")
    p.add_argument("--sources", type=int, default=4)
    p.add_argument("--workers", type=int, default=10)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--dataset", help=argparse.SUPPRESS)  # child mode
    p.add_argument("--dir", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.dataset:
        print(json.dumps(child(args)))
        return 0
    work = tempfile.mkdtemp(prefix="keysplit-bench-replay-")
    print(f"master {args.master}, W={args.workers}, S={args.sources}, groupings {', '.join(GROUPINGS)}")
    print(f"{'messages':>11} {'total s':>8} {'ingest s':>9} " + " ".join(f"{g + ' msg/s':>22}" for g in GROUPINGS)
          + f" {'driver MiB':>10} {'JVM MiB':>8} {'py worker MiB':>13}", flush=True)
    try:
        for size in (int(x) for x in args.sizes.split(",")):
            run_size(args, work, size)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def run_size(args: argparse.Namespace, work: str, size: int) -> None:
    from keysplit.datasets import open_dataset, write_dataset

    spec, _ = write_dataset(open_dataset(f"zipf:z=1.2,keys=100000,messages={size},seed=7"),
                            os.path.join(work, f"zipf{size}.csv"))
    out = subprocess.run(
        [sys.executable, __file__, "--master", args.master, "--dataset", spec, "--dir", os.path.join(work, "out"),
         "--sources", str(args.sources), "--workers", str(args.workers)],
        capture_output=True, text=True, check=True,
    )
    r = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"{r['messages']:>11,} {r['total_s']:>8.1f} {r['ingest_s']:>9.1f} "
          + " ".join(f"{r['routing'][g]:>22,.0f}" for g in GROUPINGS)
          + f" {r['driver_mib']:>10.0f} {r['jvm_mib']:>8.0f} {r['python_worker_mib']:>13.0f}", flush=True)
    os.remove(spec.split(":", 1)[1].split(",")[0])


if __name__ == "__main__":
    sys.exit(main())
