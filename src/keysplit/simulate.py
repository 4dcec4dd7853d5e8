"""The in-process simulator: S sources x W workers, the reference semantics of every experiment.

Records are dealt to sources the way spouts and shuffle grouping do in the topology: round-robin
(``split="shuffle"``) or by the hash of the record's first key (``split="key"``, the PKG paper's
skew-at-sources experiment, Fig. 8). Each source owns its Grouping instance and routes each key of its
records. Event time is the record's timestamp, or ``sequence / rate`` where the sequence counts messages
(keys) from 0 over the whole stream. The replay (``spark_replay``) implements exactly these rules.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import mmh3

from keysplit.datasets import Dataset
from keysplit.errors import KeysplitError, SpecError
from keysplit.groupings import REGISTRY, BaseGrouping, build_grouping
from keysplit.hashing import BASE_SEED
from keysplit.metrics import (
    ImbalanceSeries,
    default_checkpoint,
    dist_cost,
    imbalance_fraction,
    load_stddev,
)

DEFAULT_RATE = 10_000.0
SPLITS = ("shuffle", "key")
#: ``simulate(engine=...)``: the numba fast path when it applies (auto), always, or never.
ENGINES = ("auto", "fast", "reference")
#: Seed of the hash that deals records to sources under ``split="key"`` (distinct from routing seeds).
SPLIT_SEED = BASE_SEED + 500


def source_of(index: int, first_key: str, sources: int, split: str) -> int:
    """The source (spout-side task) that record number ``index`` goes to."""
    if split == "shuffle":
        return index % sources
    return mmh3.hash(first_key, SPLIT_SEED, False) % sources


def event_time(ts: float | None, sequence: int, rate: float) -> float:
    """``now`` for a message: its record's timestamp, else its sequence number over the rate."""
    return ts if ts is not None else sequence / rate


@dataclass
class Resize:
    """Change the worker count to ``workers`` just before message number ``at`` (0-based)."""

    at: int
    workers: int


class WorkerChanges:
    """``resizes`` applied to ``groupings``: each change takes effect just before message ``at``. The replay
    calls ``before`` per source, before the source's first message at or after ``at``; a source's instance only
    acts on its own messages, so applying a change that lazily makes the same decisions."""

    def __init__(self, groupings: Sequence[BaseGrouping], resizes: Sequence[Resize], workers: int) -> None:
        self.groupings = groupings
        self.pending = sorted(resizes, key=lambda r: r.at)
        self.current = workers  #: the worker count in effect

    def before(self, seq: int) -> None:
        """Apply every change due before message ``seq``."""
        while self.pending and self.pending[0].at <= seq:
            self.current = self.pending.pop(0).workers
            for g in self.groupings:
                g.resize(self.current)  # type: ignore[attr-defined]


def supports_resize(spec: str, workers: int = 2) -> bool:
    """Whether the grouping implements ``resize(workers)`` (a worker change mid-stream)."""
    return callable(getattr(build_grouping(spec, workers)[0], "resize", None))


def resizable_groupings() -> list[str]:
    """The registered groupings that support ``--resize``."""
    return [name for name in REGISTRY if supports_resize(name)]


def check_resizes(specs: Sequence[str], workers: int, resizes: Sequence[Resize], messages: int | None = None) -> None:
    """Refuse, in one line each, what ``--resize`` cannot do: a grouping without resize support, two changes
    at one message, or a change at or after the stream's last message (it would silently never happen)."""
    if not resizes:
        return
    for spec in specs:
        if not supports_resize(spec, workers):
            raise SpecError(f"{spec} cannot change its worker count mid-stream; --resize works with: "
                            + ", ".join(resizable_groupings()))
    ats = [r.at for r in resizes]
    if len(set(ats)) != len(ats):
        raise SpecError(f"--resize: two changes at the same message ({', '.join(map(str, sorted(ats)))})")
    if messages is not None and max(ats) >= messages:
        raise SpecError(f"--resize at message {max(ats):,} is past the stream's last message ({messages:,} messages)")


def check_checkpoint(checkpoint: int | None, messages: int) -> None:
    """Refuse a checkpoint spacing past the stream's end: no I(t) would be recorded and the average
    imbalance would silently read 0."""
    if checkpoint is not None and checkpoint > messages:
        raise SpecError(f"--checkpoint {checkpoint} exceeds the dataset's {messages:,} messages")


@dataclass
class RunResult:
    grouping: str
    workers: int
    sources: int
    avg_imbalance_fraction: float
    final_imbalance_fraction: float
    load_stddev: float
    dist_cost: float
    loads: list[int]
    messages_per_second: float
    messages: int = 0
    keys: int = 0  #: distinct keys routed
    top_key_messages: int = 0  #: messages of the most frequent key (p1 = top_key_messages / messages)
    distinct_per_worker: list[int] = field(default_factory=list)
    series_t: list[int] = field(default_factory=list, repr=False)
    series_imbalance: list[float] = field(default_factory=list, repr=False)
    #: what the grouping reports about itself via an optional ``stats()`` (e.g. gedik's rebuilds, migration)
    grouping_stats: dict = field(default_factory=dict)

    def summary(self) -> dict:
        """The fields of ``keysplit simulate --json`` (scripts depend on these names)."""
        keep = ("grouping", "workers", "sources", "avg_imbalance_fraction", "final_imbalance_fraction",
                "load_stddev", "dist_cost", "loads", "messages_per_second")
        full = asdict(self)
        out = {k: full[k] for k in keep}
        if self.grouping_stats:
            out["grouping_stats"] = dict(self.grouping_stats)
        return out


def count_keys(dataset: Dataset) -> Counter:
    """Exact key frequencies of the whole dataset (Off-Greedy's full pass, and the ground truth)."""
    counts: Counter = Counter()
    for _, keys in dataset.records():
        counts.update(keys)
    return counts


def prepare_groupings(
    spec: str,
    workers: int,
    sources: int,
    dataset: Dataset | None = None,
    true_loads: Callable[[], Sequence[int]] | None = None,
    capacities: Sequence[float] | None = None,
    *,
    frequencies: Mapping[str, int] | Callable[[], Mapping[str, int]] | None = None,
) -> list[BaseGrouping]:
    """Build one grouping per source and connect the optional hooks to the host's model: offline groupings
    get ``frequencies`` (a mapping, or a function called only when one needs them; by default the exact
    counts of ``dataset``), probing groupings read ``true_loads``, FISH gets ``capacities``. The simulator,
    the replay and the Storm router all prepare their groupings here."""
    groupings = build_grouping(spec, workers, sources)
    if any(g.needs_full_pass for g in groupings):
        if callable(frequencies):
            frequencies = frequencies()
        elif frequencies is None:
            if dataset is None:
                raise KeysplitError(f"grouping {spec!r} needs the dataset's key frequencies first")
            frequencies = count_keys(dataset)
        for g in groupings:
            g.fit(frequencies)  # type: ignore[attr-defined]
    for g in groupings:
        if true_loads is not None and hasattr(g, "attach_probe"):
            g.attach_probe(true_loads)
        if capacities is not None and hasattr(g, "set_capacities"):
            g.set_capacities(list(capacities))
    return groupings


def route(
    dataset: Dataset,
    groupings: Sequence[BaseGrouping],
    *,
    rate: float = DEFAULT_RATE,
    split: str = "shuffle",
) -> Iterator[tuple[int, int, str, int]]:
    """Route every message; yields ``(sequence, source, key, worker)`` in stream order."""
    sources = len(groupings)
    seq = 0
    for index, (ts, keys) in enumerate(dataset.records()):
        if not keys:
            continue
        s = source_of(index, keys[0], sources, split)
        g = groupings[s]
        for key in keys:
            yield seq, s, key, g.choose(key, ts if ts is not None else seq / rate)
            seq += 1


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

    ``engine``: ``reference`` runs the Python loop below; ``fast`` runs ``keysplit.fast`` (kg, sg, pkg and
    its variants, salt; the same decisions, proven by tests/test_fast.py) or raises; ``auto`` (default) takes the
    fast path when it supports the spec and no capacities or resizes are asked for.
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
            from keysplit.fast import fast_simulate

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
        grouping_stats=groupings[0].stats() if hasattr(groupings[0], "stats") else {},
    )
