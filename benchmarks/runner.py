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

``--in-process`` measures the runner alone, without subprocesses or the event loop's waits: the messages the
same components would write (pystorm's ``emit``, ``ack`` and ``sync``) are fed through a pipe to the runner's
message handling (:meth:`Executor.on_readable`), bolt by bolt, and only that handling is timed. Machine load
moves it much less than the end-to-end runs, so it is the number to compare before and after a change to the
runner's per-tuple path (microseconds of runner CPU per spout tuple and per delivered tuple).

    .venv/bin/python benchmarks/runner.py [--tuples 30000] [--max-pending 1000] [--repeat 1] [--in-process]
"""

from __future__ import annotations

import argparse
import json
import os
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


def _feed(cluster: LocalCluster, task: object, messages: list[dict]) -> float:
    """Write ``messages`` as ``task`` would and let the runner handle them; the runner CPU seconds it took."""
    data = "".join(json.dumps(m) + "\nend\n" for m in messages).encode()
    executor = cluster._executor
    spent = 0.0
    for start in range(0, len(data), 60000):  # less than a pipe holds, so the write never blocks
        os.write(task.wfd, data[start:start + 60000])  # type: ignore[attr-defined]
        cpu0 = time.process_time()
        executor.on_readable(task)
        spent += time.process_time() - cpu0
    return spent


def measure_in_process(topology: type, n: int, conf: dict, batch: int = 1000) -> dict[str, float]:
    """Handle ``n`` spout tuples through ``topology``'s runner with the components' messages scripted (see the
    module's docstring); runner CPU microseconds per spout tuple and per delivered tuple."""
    cluster = LocalCluster(topology, {"bench.n": n, **conf}, cwd=str(ROOT), env={"PYTHONPATH": str(ROOT / "tests")})
    pipes = []
    try:
        for task in cluster.tasks.values():  # no process: a pipe stands for its stdout, the runner reads it
            task.rfd, task.wfd = os.pipe()  # type: ignore[attr-defined]
            os.set_blocking(task.rfd, False)
            pipes += [task.rfd, task.wfd]
            task.alive = task.ready = task.answered = True
        spouts = [t for t in cluster.tasks.values() if t.is_spout]
        bolts = sorted((t for t in cluster.tasks.values() if not t.is_spout), key=lambda t: t.task_id)
        fanout = 5 if topology is Fanout else None
        spent, delivered, emitted = 0.0, 0, 0
        while emitted < n:
            msgs = []
            for i in range(emitted, min(n, emitted + batch)):
                msgs += [{"command": "emit", "tuple": [i], "id": i, "need_task_ids": False}, {"command": "sync"}]
            emitted = min(n, emitted + batch)
            spent += _feed(cluster, spouts[0], msgs)
            while any(t.queue for t in bolts):
                for task in bolts:
                    inputs = [json.loads(q[:-5]) for q in task.queue]
                    task.queue.clear()
                    delivered += len(inputs)
                    msgs = []
                    for tup in inputs:
                        if task.name == "passer":
                            msgs.append({"command": "emit", "anchors": [tup["id"]], "tuple": tup["tuple"],
                                         "need_task_ids": False})
                        elif task.name == "fanout":
                            msgs += [{"command": "emit", "anchors": [tup["id"]], "tuple": [tup["tuple"][0], j],
                                      "need_task_ids": False} for j in range(fanout or 0)]
                        msgs.append({"command": "ack", "id": tup["id"]})
                    if msgs:
                        spent += _feed(cluster, task, msgs)
            for task in spouts:
                task.urgent.clear()
        acked = sum(t.acked for t in spouts)
        if conf.get("topology.acker.executors") != 0 and acked != n:
            raise SystemExit(f"{topology.__name__}: {acked} of {n} spout tuples acked in-process")
    finally:
        for fd in pipes:
            os.close(fd)
        for task in cluster.tasks.values():
            task.alive = False
        cluster.shutdown()
    return {"us_per_spout_tuple": spent / n * 1e6, "us_per_tuple": spent / (n + delivered) * 1e6,
            "tuples": n + delivered}


def main_in_process(args: argparse.Namespace) -> None:
    pending = {"topology.max.spout.pending": args.max_pending}
    runs = [
        ("spout->bolt->bolt, acked", Chain, pending),
        ("spout->bolt->bolt, no ackers", Chain, {"topology.acker.executors": 0}),
        ("spout->fanout x2->sink x4, acked", Fanout, pending),
    ]
    print(f"{args.tuples} spout tuples per run, in process (no subprocesses): runner CPU only")
    print(f"{'run':32} {'us/spout tuple':>14} {'us/tuple':>9} {'tuples':>8}")
    for _ in range(args.repeat):
        for name, topology, conf in runs:
            r = measure_in_process(topology, args.tuples, conf)
            print(f"{name:32} {r['us_per_spout_tuple']:14.2f} {r['us_per_tuple']:9.2f} {r['tuples']:8.0f}",
                  flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tuples", type=int, default=30000)
    parser.add_argument("--max-pending", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--in-process", action="store_true",
                        help="time the runner's message handling alone, with scripted components")
    args = parser.parse_args()
    if args.in_process:
        main_in_process(args)
        return
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
