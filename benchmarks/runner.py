"""Throughput of the local multi-lang runner (``keysplit.local.LocalCluster``) with no work in the components.

Topologies (real streamparse components from ``tests/local_components/bench.py``, one subprocess each):

- ``spout -> bolt -> bolt``, acked: every spout tuple's tree (2 edges) is tracked by the acker and acked
  back to the spout; ``topology.max.spout.pending`` bounds the trees in flight. This is the number that
  must stay far above the rates of a real comparison (where workers sleep ``cpu_delay_ms`` per tuple).
- the same with ``topology.acker.executors = 0`` (spout tuples acked at emit, nothing tracked);
- ``spout -> fanout x2 -> sink x4``, acked: each spout tuple becomes 5 tuples, fields-grouped over 4 sinks
  (the word-count shape; its rate is given in spout tuples, each carrying 6 edges);
- baseline: the spout alone (no consumers), i.e. the rate at which one pystorm spout process can answer
  ``next``/``ack`` at all on this machine, measured in the same process.

Reported per run: spout tuples per second (acked), the ratio to the baseline, the runner's own CPU use
(seconds of runner CPU per second of wall time, and microseconds per tuple) and the component processes'
CPU per second. A runner CPU share well below 1 means the runner is not the bottleneck.

    .venv/bin/python benchmarks/runner.py [--tuples 30000] [--max-pending 1000] [--repeat 1]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from local_components.bench import CountingSpout, FanoutBolt, PassBolt, SinkBolt  # noqa: E402
from streamparse import Grouping, Topology  # noqa: E402

from keysplit.local import LocalCluster  # noqa: E402


class Chain(Topology):
    """spout -> pass -> sink."""

    spout = CountingSpout.spec()
    passer = PassBolt.spec(inputs=[spout])
    sink = SinkBolt.spec(inputs=[passer])


class Fanout(Topology):
    """spout -> fanout x2 (5 tuples per input) -> sink x4 (fields grouping): the word-count shape."""

    spout = CountingSpout.spec()
    fanout = FanoutBolt.spec(inputs=[spout], par=2)
    sink = SinkBolt.spec(inputs={fanout: Grouping.fields("j", "i")}, par=4)


class SpoutOnly(Topology):
    """The spout alone: the baseline rate of one multi-lang spout process."""

    spout = CountingSpout.spec()


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(topology: type, n: int, conf: dict) -> dict[str, float]:
    """Run ``n`` spout tuples to completion; return rate and CPU figures."""
    children_before = _children_cpu()
    cluster = LocalCluster(topology, {"bench.n": n, **conf}, cwd=str(ROOT), env={"PYTHONPATH": str(ROOT / "tests")})
    with cluster:
        wall0, cpu0 = time.perf_counter(), time.process_time()
        done = cluster.run_until(lambda: cluster.stats()["spout"]["acked"] >= n, timeout=600, poll=0.05)
        wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
        if not done:
            raise SystemExit(f"{topology.__name__}: only {cluster.stats()['spout']['acked']} of {n} acked")
    children = _children_cpu() - children_before  # includes start-up and shutdown of the components
    return {"rate": n / wall, "runner_cpu_share": cpu / wall, "runner_us_per_tuple": cpu / n * 1e6,
            "children_cpu_per_sec": children / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=30000)
    parser.add_argument("--max-pending", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    pending = {"topology.max.spout.pending": args.max_pending}
    runs = [
        ("baseline: spout alone", SpoutOnly, pending),
        ("spout->bolt->bolt, acked", Chain, pending),
        ("spout->bolt->bolt, no ackers", Chain, {"topology.acker.executors": 0}),
        ("spout->fanout x2->sink x4, acked", Fanout, pending),
    ]
    print(f"{args.tuples} spout tuples per run, max.spout.pending={args.max_pending}; machine load is shared, "
          "so absolute numbers are noisy: compare the ratios")
    print(f"{'run':32} {'tuples/s':>9} {'vs base':>8} {'runner cpu/s':>12} {'runner us/tup':>13} {'comps cpu/s':>11}")
    for _ in range(args.repeat):
        base = None
        for name, topology, conf in runs:
            r = measure(topology, args.tuples, conf)
            base = base or r["rate"]
            print(f"{name:32} {r['rate']:9.0f} {r['rate'] / base:8.2f} {r['runner_cpu_share']:12.2f} "
                  f"{r['runner_us_per_tuple']:13.1f} {r['children_cpu_per_sec']:11.2f}", flush=True)


if __name__ == "__main__":
    main()
