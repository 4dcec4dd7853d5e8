"""The fast path: a numba kernel that makes exactly the reference decisions of kg, sg, pkg (all variants) and
salt.

The reference simulator (:func:`keysplit.simulator.simulate`) calls ``Grouping.choose`` once per message, in
Python. Here the work splits into what depends on a key and what depends on a message:

- **per distinct key, once**: the key's name, its d candidate workers H_1(k) .. H_d(k)
  (:func:`keysplit.hashing.candidates`, the same mmh3 seeds and ``distinct`` rule as
  ``KeyGrouping``/``PartialKeyGrouping``/``Salting``) and,
  under ``split="key"``, its source (:func:`keysplit.stream.source_of`). Keys become dense integer ids:
  a generator's own index arrays are remapped directly (only distinct keys are ever named), a file's keys
  go through one dict in a single pass over its records. The keys new in a chunk are hashed together by
  :mod:`keysplit.simulator.hashing_batch` (numba's MurmurHash3, equal to mmh3 key for key), not one mmh3 call per key.
- **per message, in the kernel** (:func:`_route_chunk`): the source's decision, with the reference's
  tie-breaking (PKG §3: the least loaded candidate, ties to the earliest candidate, as in
  ``PartialKeyGrouping.choose``), the true load vector L_i(t), the imbalance checkpoints I(t_j) (PKG §2),
  the distinct (worker, key) pairs of dist_cost (DKG eq. 8), and periodic probing with the exact timing of
  ``PartialKeyGrouping._maybe_probe`` (probe when ``now >= next_probe``, then advance ``next_probe`` by T
  until it passes ``now``; ``now`` is the record's timestamp or ``seq / rate``), and salt's per-source
  SplitMix64 draw (``keysplit.groupings.salt``, the same uint64 arithmetic).

Local loads are float64 in the kernel: integer counts are exact in a double (below 2^53) and, after a
``probe_scale=share`` probe, the reference holds the same doubles ``L_i * (1/S)`` plus whole increments.
Checkpoint values are finished in Python with the reference's expression, so every ``RunResult`` field
except ``messages_per_second`` is identical to the reference run (``tests/simulator/test_fast.py`` proves it).

Groupings other than kg, sg, pkg and salt (and subclasses of them, which may change the decision) have no fast
path: :func:`fast_simulate` returns ``None`` for them and the caller falls back to the reference.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from keysplit.datasets import Dataset
from keysplit.errors import SpecError
from keysplit.groupings import build_grouping
from keysplit.groupings.basic import KeyGrouping, ShuffleGrouping
from keysplit.groupings.pkg import PartialKeyGrouping
from keysplit.groupings.salt import Salting, salt_state
from keysplit.metrics import ImbalanceSeries, default_checkpoint, dist_cost, imbalance_fraction, load_stddev
from keysplit.simulator.encoded_text import message_count, scanner
from keysplit.simulator.hashing_batch import warm as warm_hashing
from keysplit.simulator.keyids import (
    IdChunk,
    KeyTable,
    generator_chunks,
    names_table,
    record_chunks,
    text_chunks,
    uses_generator_indices,
)
from keysplit.simulator.result import RunResult
from keysplit.simulator.routing_kernel import (
    KG,
    PKG_GLOBAL,
    PKG_LOCAL,
    SALT,
    SG,
    SRC_ARRAY,
    SRC_KEY,
    SRC_ROUND_ROBIN,
    _route_chunk,
)
from keysplit.stream import DEFAULT_RATE, SPLITS

__all__ = ["FastSpec", "IdChunk", "KeyTable", "RouteState", "fast_route", "fast_simulate", "fast_spec", "names_table",
           "simulate_ids", "warmup"]

_compile_seconds: float | None = None

@dataclass(frozen=True)
class FastSpec:
    """What the kernel needs to know about a grouping spec: its rule and parameters."""

    mode: int
    d: int
    probe: float | None
    probe_mul: float
    describe: str
    distinct: bool = False  #: the candidates are distinct workers (``hashing.distinct_choices``)
    seed: int = 0  #: salt's seed


def fast_spec(spec: str, workers: int, sources: int) -> FastSpec | None:
    """The kernel's reading of ``spec``, or None when it has no fast path.

    The spec is built by the registry exactly as the reference does, so a bad spec raises the same
    SpecError; only the exact classes KeyGrouping, ShuffleGrouping, PartialKeyGrouping and Salting qualify.
    """
    g = build_grouping(spec, workers, sources)[0]
    kind = type(g)
    if kind is KeyGrouping:
        return FastSpec(KG, 1, None, 1.0, g.describe())
    if kind is ShuffleGrouping:
        return FastSpec(SG, 1, None, 1.0, g.describe())
    if kind is PartialKeyGrouping:
        mode = PKG_GLOBAL if g.params["load"] == "global" else PKG_LOCAL
        # set_loads multiplies each true load by this scale (a Python float, as here).
        mul = 1.0 / sources if g.params["probe_scale"] == "share" else 1.0
        return FastSpec(mode, g.d, g.probe_interval, mul, g.describe(), g.distinct)
    if kind is Salting:
        return FastSpec(SALT, g.k, None, 1.0, g.describe(), g.distinct, g.seed)
    return None


_EMPTY_I32 = np.zeros(0, dtype=np.int32)
_EMPTY_F64 = np.zeros(0, dtype=np.float64)


def warmup() -> float:
    """Make the kernels ready: nothing to do for the ahead-of-time build (:mod:`.compiled`), else numba
    compiles them or loads them from its on-disk cache; returns the seconds that took, once per process (0.0
    afterwards). Kept out of every ``messages_per_second``."""
    global _compile_seconds
    if _compile_seconds is not None:
        return 0.0
    started = time.perf_counter()
    RouteState(FastSpec(PKG_LOCAL, 2, 1.0, 1.0, "pkg"), 2, 1, "shuffle", 1.0, 1).run(IdChunk(np.zeros(1, np.int32)))
    warm_hashing()
    _compile_seconds = time.perf_counter() - started
    return _compile_seconds


def compile_seconds() -> float | None:
    """Seconds this process spent compiling or cache-loading the kernel (None before the first run)."""
    return _compile_seconds


class RouteState:
    """One run's routing state, carried by the kernel from one chunk to the next: true loads, each source's
    local estimate (row 0 is the shared vector under load=global), round-robin positions, next probe times,
    distinct (worker, key) pairs and the checkpoints reached."""

    def __init__(
        self, fs: FastSpec, workers: int, sources: int, split: str, rate: float, checkpoint: int,
        table: KeyTable | None = None,
    ) -> None:
        self.fs, self.workers, self.sources, self.split, self.rate = fs, workers, sources, split, float(rate)
        self.checkpoint = checkpoint
        self.table = table if table is not None else KeyTable(fs.d, workers, sources, split, fs.distinct)
        self.loads = np.zeros(workers, dtype=np.int64)
        self.distinct = np.zeros(workers, dtype=np.int64)
        self.local = np.zeros((sources, workers), dtype=np.float64)
        self.sg_next = np.array([s % workers for s in range(sources)], dtype=np.int64)  # ShuffleGrouping.prepare
        probe = fs.probe if fs.probe is not None else float("inf")
        self.next_probe = np.full(sources, probe, dtype=np.float64)  # PartialKeyGrouping.__init__
        self.salt = np.array([salt_state(fs.seed, s) for s in range(sources)], dtype=np.uint64)  # Salting.validate
        self.next_cp = checkpoint
        self.cp_t: list[int] = []
        self.cp_max: list[int] = []
        self.messages = 0
        self.src_next = 0  # round-robin over records (generators: one record per message)

    def fresh(self) -> RouteState:
        """A new run over the same keys (the chunks already encoded stay valid): state reset, table kept."""
        self.table.seen[:] = 0
        self.table.count[:] = 0
        return RouteState(self.fs, self.workers, self.sources, self.split, self.rate, self.checkpoint, self.table)

    def chunks(self, dataset: Dataset) -> Iterator[IdChunk]:
        """The dataset's messages as key-id chunks, naming new keys in this run's table."""
        if uses_generator_indices(dataset):
            return generator_chunks(dataset, self.table)  # type: ignore[arg-type]
        if scanner(dataset) is not None:
            return text_chunks(dataset, self.table, self.sources, self.split, self.rate,  # type: ignore[arg-type]
                               self.fs.probe is not None)
        return record_chunks(dataset, self.table, self.sources, self.split, self.rate, self.fs.probe is not None)

    def run(self, chunk: IdChunk) -> np.ndarray:
        """One kernel call over ``chunk`` (the next messages of the stream); returns their workers."""
        n = len(chunk.kid)
        out = np.empty(n, dtype=np.int32)
        cp_max = np.empty(n // self.checkpoint + 2, dtype=np.int64)
        if chunk.src is not None:
            src_mode, src = SRC_ARRAY, chunk.src
        else:
            src_mode, src = (SRC_KEY if self.split == "key" else SRC_ROUND_ROBIN), _EMPTY_I32
        fs, table = self.fs, self.table
        next_cp, ncp, self.src_next = _route_chunk(
            fs.mode, chunk.kid, src, src_mode, self.src_next,
            chunk.now if chunk.now is not None else _EMPTY_F64, chunk.now is not None, self.messages, self.rate,
            table.cand, table.ksrc, fs.d, self.workers, self.sources,
            self.local, self.sg_next, self.next_probe, fs.probe if fs.probe is not None else 0.0, fs.probe_mul,
            fs.probe is not None,
            self.loads, table.seen, self.distinct, self.checkpoint, self.next_cp, cp_max, out, self.salt,
            table.count,
        )
        first = self.next_cp
        self.cp_t.extend(range(first, first + ncp * self.checkpoint, self.checkpoint))
        self.cp_max.extend(cp_max[:ncp].tolist())
        self.next_cp = next_cp
        self.messages += n
        return out


def _checked_spec(spec: str, workers: int, sources: int, split: str, rate: float) -> FastSpec | None:
    """The reference's argument checks (same errors), then the kernel's reading of ``spec``."""
    if split not in SPLITS:
        raise SpecError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if rate <= 0:
        raise SpecError(f"rate must be positive, got {rate}")
    return fast_spec(spec, workers, sources)


def fast_route(
    dataset: Dataset,
    spec: str,
    workers: int,
    sources: int = 1,
    *,
    rate: float = DEFAULT_RATE,
    split: str = "shuffle",
) -> np.ndarray | None:
    """Every message's worker, in stream order (the fast twin of ``hosting.route``); None if unsupported."""
    fs = _checked_spec(spec, workers, sources, split, rate)
    if fs is None:
        return None
    warmup()
    st = RouteState(fs, workers, sources, split, rate, checkpoint=1 << 62)
    parts = [st.run(chunk) for chunk in st.chunks(dataset)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def fast_simulate(
    dataset: Dataset,
    spec: str,
    workers: int,
    sources: int = 1,
    *,
    rate: float = DEFAULT_RATE,
    split: str = "shuffle",
    checkpoint: int | None = None,
    messages_hint: int | None = None,
    progress: Callable[[int], None] | None = None,
) -> RunResult | None:
    """``simulate`` for kg, sg, pkg (every variant) and salt, decision for decision; None for other specs.

    ``messages_per_second`` covers the whole run (drawing or reading the dataset, naming keys, routing,
    metrics) but not the kernel's one-time compilation, which :func:`compile_seconds` reports.

    >>> from keysplit.datasets import open_dataset
    >>> from keysplit.simulator import simulate
    >>> ds = open_dataset("zipf:z=1.0,keys=100,messages=2000,seed=1")
    >>> fast, ref = fast_simulate(ds, "pkg", 4, 2), simulate(ds, "pkg", 4, 2, engine="reference")
    >>> (fast.loads, fast.avg_imbalance_fraction) == (ref.loads, ref.avg_imbalance_fraction)
    True
    >>> fast_simulate(ds, "potc", 4, 2) is None
    True
    """
    fs = _checked_spec(spec, workers, sources, split, rate)
    if fs is None:
        return None
    if checkpoint is None:
        if messages_hint is not None:
            m = messages_hint
        elif uses_generator_indices(dataset):
            m = dataset.params["messages"]  # type: ignore[attr-defined]
        else:
            m = message_count(dataset)
        checkpoint = default_checkpoint(m)
    ImbalanceSeries(checkpoint)  # the reference's own check of the spacing
    warmup()
    st = RouteState(fs, workers, sources, split, rate, checkpoint)
    started = time.perf_counter()
    for chunk in st.chunks(dataset):
        st.run(chunk)
        if progress is not None and st.cp_t:
            progress(st.cp_t[-1])
    return run_result(st, time.perf_counter() - started)


def simulate_ids(
    spec: str, table: KeyTable, kid: np.ndarray, src: np.ndarray, workers: int, sources: int, checkpoint: int,
) -> tuple[RunResult, np.ndarray]:
    """``spec`` over messages already encoded as key ids with their sources (``table`` from
    :func:`names_table`); the RunResult and every message's worker. Raises SpecError without a fast path."""
    fs = _checked_spec(spec, workers, sources, "shuffle", DEFAULT_RATE)
    if fs is None or fs.probe is not None or fs.d > table.d or (fs.d > 1 and fs.distinct != table.distinct):
        raise SpecError(f"no fast path over encoded keys for {spec!r}")
    warmup()
    table.seen[:] = 0
    table.count[:] = 0
    st = RouteState(fs, workers, sources, "shuffle", DEFAULT_RATE, checkpoint, table)
    started = time.perf_counter()
    out = st.run(IdChunk(kid, src))
    return run_result(st, time.perf_counter() - started), out


def run_result(st: RouteState, elapsed: float) -> RunResult:
    """The RunResult of a finished run, with the reference's expressions for every metric."""
    fs, workers = st.fs, st.workers
    series = ImbalanceSeries(st.checkpoint)
    for t, mx in zip(st.cp_t, st.cp_max):
        series.times.append(t)
        series.values.append(mx - t / workers)  # imbalance(): max(L) - sum(L)/len(L), and sum(L) = t
    loads = st.loads.tolist()
    distinct_per_worker = st.distinct.tolist()
    n = st.messages
    return RunResult(
        grouping=fs.describe,
        workers=workers,
        sources=st.sources,
        avg_imbalance_fraction=series.avg_fraction,
        final_imbalance_fraction=imbalance_fraction(loads),
        load_stddev=load_stddev(loads),
        dist_cost=dist_cost(distinct_per_worker, st.table.size),
        loads=loads,
        messages_per_second=n / elapsed if elapsed > 0 else 0.0,
        messages=n,
        keys=st.table.size,
        top_key_messages=int(st.table.count[: st.table.size].max(initial=0)),
        distinct_per_worker=distinct_per_worker,
        series_t=series.times,
        series_imbalance=series.values,
    )
