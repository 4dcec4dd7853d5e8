"""The summarise step: one grouping's routed stream measured (:func:`replay_grouping`: routing tasks, one shuffle,
reduce tasks, each partition's part in :mod:`spark_replay.aggregates`) and turned into its entry of
``summary.json`` (the ``simulate --json`` fields, the topology model's or Lindley's estimate), and the imbalance
series of every grouping as ``timeseries.parquet``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from keysplit.metrics import ImbalanceSeries, dist_cost, imbalance, imbalance_fraction, load_stddev
from keysplit.stream import Resize
from spark_replay import aggregates, routing, storage
from spark_replay.ingest import Ingested
from spark_replay.model_task import model_estimate
from spark_replay.queueing import throughput_estimate
from spark_replay.routing import router

if TYPE_CHECKING:
    from spark_replay.options import ReplayOptions


@dataclass
class GroupingResult:
    summary: dict
    series_t: list[int]
    series_imbalance: list[float]
    series_loads: list[list[int]]


def replay_grouping(spark: Any, ing: Ingested, spec: str, mode: str, opts: ReplayOptions, every: int,
                    frequencies: Any, estimate: Future | None = None, hashed: bool = True,
                    started: float | None = None) -> GroupingResult:
    """Route every sub-stream with ``spec`` and measure it (loads, I(t), memory, queueing); ``estimate`` is the
    topology model's (:func:`model_estimate`, running in a thread since ``started``), awaited here, with the
    measurements when its task took them. ``hashed``: keys are told apart by their fingerprints
    (:func:`spark_replay.routing.router`)."""
    W, S = opts.workers, opts.sources
    changes = sorted(opts.resizes, key=lambda r: r.at)
    n_workers = max([W] + [r.workers for r in changes])  # every worker that ever exists
    rows = ing.messages // every
    service = opts.cpu_delay_ms / 1000.0

    order = ing.order
    groups = max(2, spark.sparkContext.defaultParallelism)  # reduce tasks; worker w's queue is in task w % groups
    stream, sources, routed_pieces = router(ing, spec, mode, opts, frequencies, hashed)
    rate, rising = opts.rate, ing.rising_times
    lindley = opts.arrivals == "lindley" and service > 0  # else the topology model estimates, below
    queue_service = service if lindley else 0.0

    def route(index: int, items: Iterator) -> Iterator:
        source = 0 if mode == routing.GLOBAL else index
        routed = enumerate(routed_pieces(index, items))
        return aggregates.tag_pieces(routed, source, n_workers, every, rows, rate, lindley, groups)

    def finish(group: int, items: Iterator) -> list:
        return [aggregates.finish_partition(items, group, len(order), sources, n_workers, queue_service, rising)]

    # the grouping's seconds count from its first job's start; every grouping's first job starts together (their
    # model estimates are submitted at once), so with several groupings the seconds say when each was done
    t0 = time.perf_counter() if started is None else started
    summary_estimate, partial = estimate.result() if estimate is not None else (None, None)
    if partial is None:  # not measured by the model's task: routing tasks, one shuffle, reduce tasks
        partial = (
            stream.mapPartitionsWithIndex(route)
            .partitionBy(groups, aggregates.shuffle_partition)
            .mapPartitionsWithIndex(finish)
            .reduce(lambda a, b: a.merge(b))
        )
    matrix, loads_arr, fast = partial.agg
    distinct, keys, hist = partial.distinct, partial.keys, partial.hist
    if not lindley:  # every latency is 0 here (the topology model's estimate replaces them below): bounded steps
        for start in range(0, ing.messages, 1 << 20):
            hist.add(np.zeros(min(1 << 20, ing.messages - start)))
    if estimate is None and opts.arrivals != "lindley":
        summary_estimate, _ = model_estimate(ing, spec, mode, opts, frequencies, hashed)
    elapsed = time.perf_counter() - t0

    loads = [int(x) for x in loads_arr.tolist()]
    series = ImbalanceSeries(every)
    series_loads = []
    for j in range(rows):
        t = (j + 1) * every
        present = workers_at(t, W, changes)
        row = [int(x) for x in matrix[j].tolist()][:present]
        series.record(t, row)
        series_loads.append(row)
    per_worker = [int(x) for x in distinct.tolist()]
    m = ing.messages
    summary = {
        "grouping": routing.describe(spec, W, S),
        "workers": workers_at(m, W, changes),
        "sources": S,
        "avg_imbalance_fraction": series.avg_fraction,
        "final_imbalance_fraction": imbalance_fraction(loads),
        "load_stddev": load_stddev(loads),
        "dist_cost": dist_cost(per_worker, keys),
        "loads": loads,
        "messages_per_second": m / elapsed if elapsed > 0 else 0.0,
        "messages": m,
        "distinct_per_worker": per_worker,
        "final_imbalance": imbalance(loads),
        "throughput_estimate": throughput_estimate(m, loads, service),
        "latency_mean_ms": hist.mean * 1000.0,
        "latency_p50_ms": hist.percentile(50) * 1000.0,
        "latency_p95_ms": hist.percentile(95) * 1000.0,
        "latency_p99_ms": hist.percentile(99) * 1000.0,
        "latency_max_ms": hist.high * 1000.0 if hist.count else 0.0,
        "cpu_delay_ms": opts.cpu_delay_ms,
        "rate": opts.rate,
        "split": opts.split,
        "mode": "global (one partition: decisions depend on every source)" if mode == routing.GLOBAL
        else f"partitioned ({S} partition(s), one per source)",
        "fast_path": bool(fast),
        "seconds": elapsed,
    }
    if summary_estimate is not None:  # the topology model's throughput (words/s) and complete latency of a line
        summary.update(summary_estimate, model="topology")
    else:
        summary["model"] = "lindley"
    return GroupingResult(summary, series.times, series.values, series_loads)


def workers_at(t: int, workers: int, changes: list[Resize]) -> int:
    """The worker count at checkpoint ``t`` (after t messages): the changes before message t-1 took effect,
    as in the simulator, which records a checkpoint before applying a change due at the same message.

    >>> changes = [Resize(100, 12), Resize(200, 8)]
    >>> workers_at(100, 10, changes), workers_at(101, 10, changes)
    (10, 12)
    """
    for change in changes:
        if change.at < t:
            workers = change.workers
    return workers


def write_timeseries(spark: Any, path: str, results: list[GroupingResult]) -> None:
    """I(t) and the loads at every checkpoint, one row per (grouping, checkpoint), as Parquet."""
    names, ts, values, fractions, loads = [], [], [], [], []
    for r in results:
        for t, v, row in zip(r.series_t, r.series_imbalance, r.series_loads):
            names.append(r.summary["grouping"])
            ts.append(t)
            values.append(v)
            fractions.append(v / t)
            loads.append(row)
    storage.write_table(spark, path, {"grouping": names, "t": ts, "imbalance": values,
                                      "imbalance_fraction": fractions, "loads": loads},
                        "grouping string, t long, imbalance double, imbalance_fraction double, loads array<long>")
