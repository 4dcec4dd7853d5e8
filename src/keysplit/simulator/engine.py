"""The in-process simulator: S sources x W workers, the reference semantics of every experiment.

It follows the stream's rules (:mod:`keysplit.stream`: dealing records to sources, event time, resizes) and
hosts its groupings as every host does (:mod:`keysplit.groupings.hosting`); the replay (``spark_replay``) and
the Storm router implement exactly these rules. ``engine="fast"`` hands kg, sg, pkg and salt to the numba
kernel of :mod:`keysplit.simulator.fast`, which makes the same decisions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from keysplit.datasets import Dataset
from keysplit.errors import SpecError
from keysplit.groupings.base import Reporting
from keysplit.groupings.hosting import WorkerChanges, check_resizes, prepare_groupings, route
from keysplit.metrics import (
    ImbalanceSeries,
    default_checkpoint,
    dist_cost,
    imbalance_fraction,
    load_stddev,
)
from keysplit.simulator.result import RunResult
from keysplit.stream import DEFAULT_RATE, SPLITS, Resize

#: ``simulate(engine=...)``: the numba fast path when it applies (auto), always, or never.
ENGINES = ("auto", "fast", "reference")


def simulate(
    dataset: Dataset,
    spec: str,
    workers: int,
    sources: int = 1,
    *,
    rate: float = DEFAULT_RATE,
    split: str = "shuffle",
    checkpoint: int | None = None,
    messages_hint: int | None = None,
    capacities: Sequence[float] | None = None,
    resizes: Sequence[Resize] = (),
    progress: Callable[[int], None] | None = None,
    engine: str = "auto",
) -> RunResult:
    """Run one grouping over the dataset and measure it.

    ``checkpoint`` defaults to m/1000 messages; pass ``messages_hint`` (m) when it is known, otherwise the
    dataset is counted first. ``resizes`` change the worker count mid-stream (groupings that support it
    implement ``resize(workers)``); the final load vector has every worker that ever existed, so a removed
    worker's load stays in it, while each checkpoint's I(t) is over the workers present at that time.

    ``engine``: ``reference`` runs the Python loop below; ``fast`` runs ``keysplit.simulator.fast`` (kg, sg, pkg and
    its variants, salt; the same decisions, proven by tests/simulator/test_fast.py) or raises; ``auto`` (default) takes
    the fast path when it supports the spec and no capacities or resizes are asked for.
    """
    if split not in SPLITS:
        raise SpecError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if rate <= 0:
        raise SpecError(f"rate must be positive, got {rate}")
    if engine not in ENGINES:
        raise SpecError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    if engine != "reference":
        fast = None
        if capacities is None and not resizes:
            from keysplit.simulator.fast import fast_simulate

            fast = fast_simulate(dataset, spec, workers, sources, rate=rate, split=split, checkpoint=checkpoint,
                                 messages_hint=messages_hint, progress=progress)
        if fast is not None:
            return fast
        if engine == "fast":
            raise SpecError(f"no fast path for {spec!r} (kg, sg, pkg and salt only, without capacities or resizes); "
                            "use engine reference or auto")
    if checkpoint is None:
        m = messages_hint if messages_hint is not None else sum(len(k) for _, k in dataset.records())
        checkpoint = default_checkpoint(m)
    check_resizes([spec], workers, resizes)
    max_workers = max([workers] + [r.workers for r in resizes])
    loads = [0] * max_workers
    groupings = prepare_groupings(spec, workers, sources, dataset, lambda: loads[:changes.current], capacities)
    changes = WorkerChanges(groupings, resizes, workers)
    worker_keys: list[set[str]] = [set() for _ in range(max_workers)]
    key_counts: dict[str, int] = {}
    series = ImbalanceSeries(checkpoint)
    next_checkpoint = checkpoint
    started = time.perf_counter()
    n = 0
    for seq, _s, key, w in route(dataset, groupings, rate=rate, split=split):
        loads[w] += 1
        worker_keys[w].add(key)
        key_counts[key] = key_counts.get(key, 0) + 1
        n = seq + 1
        if n == next_checkpoint:
            series.record(n, loads[:changes.current])
            next_checkpoint += checkpoint
            if progress is not None:
                progress(n)
        changes.before(n)  # the changes due before the next message
    elapsed = time.perf_counter() - started
    distinct = len(set().union(*worker_keys))
    return RunResult(
        grouping=groupings[0].describe(),
        workers=changes.current,
        sources=sources,
        avg_imbalance_fraction=series.avg_fraction,
        # over every worker that ever existed: a removed worker's load is work it did
        final_imbalance_fraction=imbalance_fraction(loads),
        load_stddev=load_stddev(loads),
        dist_cost=dist_cost([len(s) for s in worker_keys], distinct),
        loads=loads,
        messages_per_second=n / elapsed if elapsed > 0 else 0.0,
        messages=n,
        keys=distinct,
        top_key_messages=max(key_counts.values(), default=0),
        distinct_per_worker=[len(s) for s in worker_keys],
        series_t=series.times,
        series_imbalance=series.values,
        grouping_stats=groupings[0].stats() if isinstance(groupings[0], Reporting) else {},
    )
