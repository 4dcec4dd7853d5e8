"""Execution time of a routed stream on workers of given speeds: the FISH paper's simulation metric (§6.1).

FISH evaluates load balance in simulation by "the processing time of loads": how long the workers take to
get through the stream they were sent. The model here is the smallest one that says that:

- worker w is one FIFO server that serves ``capacities[w]`` tuples per second (service time 1/c_w);
- message n arrives at its event time, as in the simulator (``sequence / rate`` or its record's timestamp),
  routed by the grouping with the simulator's rules (``source_of``, ``event_time``);
- a message finishes at ``max(arrival, previous finish on its worker) + 1/c_w`` (Lindley's recursion);
- ``execution_time`` is when the last message finishes (the paper's execution time; throughput is
  ``messages / execution_time``), and latency is finish minus arrival (mean and 99th percentile).

Groupings that take capacities (FISH) get them through ``set_capacities``, as in the simulator. Heterogeneous
workers (the paper's Fig. 16: half the workers twice as fast) are where a grouping that balances tuple
counts loses to one that balances waiting times.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from keysplit.datasets import Dataset
from keysplit.errors import KeysplitError, SpecError
from keysplit.simulate import DEFAULT_RATE, SPLITS, event_time, prepare_groupings, source_of


@dataclass
class ExecutionResult:
    grouping: str
    workers: int
    messages: int
    execution_time: float  # seconds until the last message is processed
    stream_time: float  # event time of the last arrival
    mean_latency: float
    p99_latency: float
    loads: list[int]

    @property
    def throughput(self) -> float:
        return self.messages / self.execution_time if self.execution_time > 0 else 0.0


def half_fast(workers: int, total: float, ratio: float = 2.0) -> list[float]:
    """Capacities where the first half of the workers are ``ratio`` times faster than the rest (Fig. 16),
    scaled so they add up to ``total`` tuples per second."""
    fast = workers // 2
    unit = total / (fast * ratio + (workers - fast))
    return [unit * ratio] * fast + [unit] * (workers - fast)


def execution(
    dataset: Dataset,
    spec: str,
    workers: int,
    capacities: Sequence[float],
    sources: int = 1,
    *,
    rate: float = DEFAULT_RATE,
    split: str = "shuffle",
) -> ExecutionResult:
    """Route ``dataset`` with ``spec`` and serve it on workers of the given ``capacities`` (tuples/s)."""
    if split not in SPLITS:
        raise SpecError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if len(capacities) != workers or any(not c > 0 for c in capacities):
        raise SpecError(f"execution: need {workers} positive capacities, got {len(capacities)}")
    loads = [0] * workers
    groupings = prepare_groupings(spec, workers, sources, dataset, lambda: loads[:], capacities)
    service = [1.0 / c for c in capacities]
    finish = [0.0] * workers
    latencies: list[float] = []
    arrival = 0.0
    seq = 0
    # The simulator's routing loop (simulate.route), keeping each message's event time as its arrival.
    for index, (ts, keys) in enumerate(dataset.records()):
        if not keys:
            continue
        g = groupings[source_of(index, keys[0], sources, split)]
        for key in keys:
            arrival = event_time(ts, seq, rate)
            w = g.choose(key, arrival)
            start = finish[w] if finish[w] > arrival else arrival
            done = finish[w] = start + service[w]
            latencies.append(done - arrival)
            loads[w] += 1
            seq += 1
    lat = np.asarray(latencies)
    return ExecutionResult(
        grouping=groupings[0].describe(),
        workers=workers,
        messages=len(latencies),
        execution_time=max(finish),
        stream_time=arrival,
        mean_latency=float(lat.mean()) if len(lat) else 0.0,
        p99_latency=float(np.percentile(lat, 99)) if len(lat) else 0.0,
        loads=loads,
    )


def parse_capacities(text: str, workers: int, rate: float) -> list[float]:
    """``half-fast`` (Fig. 16: half the workers twice as fast, adding up to ``rate``), ``equal`` (adding up to
    ``rate``), one number for every worker, or one number per worker."""
    if text == "half-fast":
        return half_fast(workers, rate)
    if text == "equal":
        return [rate / workers] * workers
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise SpecError(f"capacities {text!r}: expected half-fast, equal, or numbers separated by commas") from None
    values = values * workers if len(values) == 1 else values
    if len(values) != workers or any(not (v > 0 and math.isfinite(v)) for v in values):
        raise SpecError(f"capacities {text!r}: need 1 or {workers} positive, finite values")
    return values


def main(argv: list[str] | None = None) -> int:
    """``python -m keysplit.execution``: execution time and latency per grouping on workers of given speeds."""
    import argparse
    import sys

    from keysplit.commands.common import int_list, positive_float, positive_int, print_table, spec_list
    from keysplit.datasets import open_dataset, require_records

    p = argparse.ArgumentParser(prog="python -m keysplit.execution", description=__doc__.splitlines()[0])
    p.add_argument("--dataset", required=True, metavar="SPEC")
    p.add_argument("--workers", "-W", type=int_list, default=[16], metavar="W[,W...]")
    p.add_argument("--sources", "-S", type=positive_int, default=5)
    p.add_argument("--groupings", "-g", type=spec_list, default=["fish", "fish:assign=load", "pkg", "sg"])
    p.add_argument("--capacities", default="half-fast",
                   help="half-fast (default; Fig. 16), equal, C or C1,...,CW tuples/s")
    p.add_argument("--rate", type=positive_float, default=DEFAULT_RATE, help="messages per second of event time")
    args = p.parse_args(argv)
    try:
        dataset = open_dataset(args.dataset)
        require_records(dataset)  # an empty stream would print a table of zeros
        rows = []
        for w in args.workers:
            caps = parse_capacities(args.capacities, w, args.rate)
            for spec in args.groupings:
                r = execution(dataset, spec, w, caps, args.sources, rate=args.rate)
                rows.append({"grouping": r.grouping, "W": w, "exec": r.execution_time, "stream": r.stream_time,
                             "mean": r.mean_latency, "p99": r.p99_latency})
    except KeysplitError as exc:  # a bad spec, and also a missing, empty or wrongly shaped dataset file
        print(f"keysplit: error: {exc}", file=sys.stderr)
        return 2
    print(f"dataset {dataset.spec}; capacities {args.capacities} (total {args.rate:g} tuples/s where derived); "
          f"{args.sources} sources")
    print_table(rows, [("grouping", "grouping", str), ("W", "W", str),
                       ("execution time s", "exec", lambda v: f"{v:.2f}"),
                       ("stream ends s", "stream", lambda v: f"{v:.2f}"),
                       ("mean latency s", "mean", lambda v: f"{v:.3f}"),
                       ("p99 latency s", "p99", lambda v: f"{v:.3f}")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
