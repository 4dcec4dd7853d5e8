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
from keysplit.errors import SpecError
from keysplit.groupings.hosting import prepare_groupings
from keysplit.stream import DEFAULT_RATE, SPLITS, event_time, source_of


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
    # The simulator's routing loop (keysplit.groupings.hosting.route), keeping each message's event time as its arrival.
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
    """``python -m keysplit.execution ARGS`` is ``keysplit execution ARGS``."""
    import sys

    from keysplit.cli import main as cli_main

    return cli_main(["execution", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
