"""The fast path: a numba kernel that makes exactly the reference decisions of kg, sg, pkg (all variants) and
salt.

The reference simulator (:func:`keysplit.simulate.simulate`) calls ``Grouping.choose`` once per message, in
Python. Here the work splits into what depends on a key and what depends on a message:

- **per distinct key, once**: the key's name, its d candidate workers H_1(k) .. H_d(k)
  (:func:`keysplit.hashing.candidates`, the same mmh3 seeds and ``distinct`` rule as
  ``KeyGrouping``/``PartialKeyGrouping``/``Salting``) and,
  under ``split="key"``, its source (:func:`keysplit.simulate.source_of`). Keys become dense integer ids:
  a generator's own index arrays are remapped directly (only distinct keys are ever named), a file's keys
  go through one dict in a single pass over its records. The keys new in a chunk are hashed together by
  :mod:`keysplit.hashing_batch` (numba's MurmurHash3, equal to mmh3 key for key), not one mmh3 call per key.
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
except ``messages_per_second`` is identical to the reference run (``tests/test_fast.py`` proves it).

Groupings other than kg, sg, pkg and salt (and subclasses of them, which may change the decision) have no fast
path: :func:`fast_simulate` returns ``None`` for them and the caller falls back to the reference.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from keysplit.compiled import kernel
from keysplit.datasets import Dataset
from keysplit.datasets import generators as _generators
from keysplit.errors import SpecError
from keysplit.groupings import build_grouping
from keysplit.groupings.basic import KeyGrouping, ShuffleGrouping
from keysplit.groupings.pkg import PartialKeyGrouping
from keysplit.groupings.salt import GOLDEN, MIX1, MIX2, Salting, salt_state
from keysplit.hashing_batch import bucket_many, candidate_rows
from keysplit.hashing_batch import warm as warm_hashing
from keysplit.metrics import ImbalanceSeries, default_checkpoint, dist_cost, imbalance_fraction, load_stddev
from keysplit.simulate import DEFAULT_RATE, SPLIT_SEED, SPLITS, RunResult

# Decision rules of the kernel.
KG, SG, PKG_LOCAL, PKG_GLOBAL, SALT = 0, 1, 2, 3, 4
_GOLDEN, _MIX1, _MIX2 = np.uint64(GOLDEN), np.uint64(MIX1), np.uint64(MIX2)
# Where a message's source comes from: an explicit array, round-robin over records, or the key's split hash.
SRC_ARRAY, SRC_ROUND_ROBIN, SRC_KEY = 0, 1, 2

#: Messages per kernel call on the records path (generators use their own chunk size).
CHUNK = 1 << 16
#: Generator indices below this are remapped through a flat table; larger ones through a dict.
INDEX_TABLE_LIMIT = 1 << 24

_compile_seconds: float | None = None


@kernel(
    "UniTuple(i8, 3)(i8, i4[:], i4[:], i8, i8, f8[:], b1, i8, f8, i4[:, :], i4[:], i8, i8, i8, f8[:, :], i8[:], f8[:],"
    " f8, f8, b1, i8[:], u8[:, :], i8[:], i8, i8, i8[:], i4[:], u8[:], i8[:])"
)
def _route_chunk(
    mode, kid, src, src_mode, src_next, now, use_now, seq0, rate,
    cand, ksrc, d, workers, sources,
    local, sg_next, next_probe, probe_interval, probe_mul, do_probe,
    loads, seen, distinct, checkpoint, next_cp, cp_max, out, salt, kcount,
):  # pragma: no cover - compiled; exercised through fast_simulate
    """Route ``kid`` (dense key ids) message by message; returns ``(next_cp, checkpoints, src_next)``.

    Mutates the run's state in place: ``loads`` (true L_i), ``local`` (per-source estimates, row 0 shared
    under load=global), ``sg_next`` (round-robin positions), ``next_probe``, ``seen`` (bitset of
    (key, worker) pairs), ``distinct`` (distinct keys per worker) and ``salt`` (each source's SplitMix64
    state, uint64); ``kcount[k]`` counts key k's messages. ``out[i]`` is message i's worker;
    ``cp_max[j]`` is max_i L_i(t_j) at the j-th checkpoint reached in this chunk.
    """
    n = kid.shape[0]
    ncp = 0
    s = 0
    for i in range(n):
        k = kid[i]
        if src_mode == 0:
            s = src[i]
        elif src_mode == 1:
            s = src_next
            src_next += 1
            if src_next == sources:
                src_next = 0
        else:
            s = ksrc[k]
        if mode == 0:  # KG: hash(key) mod W
            w = cand[k, 0]
        elif mode == 1:  # SG: round-robin per source
            w = sg_next[s]
            sg_next[s] = w + 1 if w + 1 < workers else 0
        elif mode == 4:  # salt: candidate splitmix64() mod K, as Salting.choose (uint64 wraps like & MASK64)
            z = salt[s] + _GOLDEN
            salt[s] = z
            z = (z ^ (z >> np.uint64(30))) * _MIX1
            z = (z ^ (z >> np.uint64(27))) * _MIX2
            z = z ^ (z >> np.uint64(31))
            w = cand[k, np.int64(z % np.uint64(d))]
        else:  # PKG: P_t(k) = argmin over the d candidates of the (local or global) load
            row = s if mode == 2 else 0
            if do_probe:
                t = now[i] if use_now else (seq0 + i) / rate
                if t >= next_probe[s]:  # PartialKeyGrouping._maybe_probe
                    for j in range(workers):
                        local[s, j] = loads[j] * probe_mul
                    # pkg.next_probe_after, operation for operation
                    nxt = next_probe[s]
                    nxt += np.floor((t - nxt) / probe_interval) * probe_interval
                    while nxt <= t:
                        stepped = nxt + probe_interval
                        if stepped == nxt:  # interval below the float resolution at t
                            nxt = np.nextafter(t, np.inf)
                            break
                        nxt = stepped
                    next_probe[s] = nxt
            w = cand[k, 0]
            best = local[row, w]
            for j in range(1, d):
                c = cand[k, j]
                if local[row, c] < best:
                    w = c
                    best = local[row, c]
            local[row, w] += 1.0
        loads[w] += 1
        kcount[k] += 1
        word = w >> 6
        bit = np.uint64(1) << np.uint64(w & 63)
        if (seen[k, word] & bit) == 0:
            seen[k, word] |= bit
            distinct[w] += 1
        out[i] = w
        if seq0 + i + 1 == next_cp:
            mx = loads[0]
            for j in range(1, workers):
                if loads[j] > mx:
                    mx = loads[j]
            cp_max[ncp] = mx
            ncp += 1
            next_cp += checkpoint
    return next_cp, ncp, src_next


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


class KeyTable:
    """Dense ids for distinct keys, with what the kernel reads per key: candidates, split source, seen bits."""

    def __init__(self, d: int, workers: int, sources: int, split: str, distinct: bool = False) -> None:
        self.d, self.workers, self.sources, self.split = d, workers, sources, split
        self.distinct = distinct
        self.ids: dict[str, int] = {}
        self.size = 0  #: named keys (ids below size have their candidates)
        self.pending: list[str] = []  #: keys with an id, named at the next flush()
        self.words = (workers + 63) // 64
        self._grow(1024)

    def _grow(self, capacity: int) -> None:
        old = self.size
        cand = np.zeros((capacity, self.d), dtype=np.int32)
        ksrc = np.zeros(capacity, dtype=np.int32)
        seen = np.zeros((capacity, self.words), dtype=np.uint64)
        count = np.zeros(capacity, dtype=np.int64)
        if old:
            cand[:old], ksrc[:old], seen[:old] = self.cand[:old], self.ksrc[:old], self.seen[:old]
            count[:old] = self.count[:old]
        self.cand, self.ksrc, self.seen, self.count = cand, ksrc, seen, count

    def id_of(self, name: str) -> int:
        """The id of ``name``. A new name gets the next id at once and its candidates and source at the next
        :meth:`flush`, so the keys met in a chunk are named together (one numba call, not one mmh3 call per
        key and seed)."""
        kid = self.ids.get(name)
        if kid is None:
            kid = self.ids[name] = self.size + len(self.pending)
            self.pending.append(name)
        return kid

    def ids_of(self, names: list[str]) -> list[int]:
        """:meth:`id_of` of every name (one loop, for the many new keys of a generator's chunk)."""
        ids, pending, size = self.ids, self.pending, self.size
        out = []
        for name in names:
            kid = ids.get(name)
            if kid is None:
                kid = ids[name] = size + len(pending)
                pending.append(name)
            out.append(kid)
        return out

    def add(self, name: str) -> int:
        """The id of ``name``, named at once (one key; callers with many keys use :meth:`ids_of` and
        :meth:`flush`)."""
        kid = self.id_of(name)
        self.flush()
        return kid

    def flush(self) -> None:
        """Name the keys met since the last flush: their d candidates (``hashing.candidates``) and, under
        ``split="key"``, their source (``simulate.source_of``), computed in one batch by ``hashing_batch``."""
        if not self.pending:
            return
        first, end = self.size, self.size + len(self.pending)
        if end > len(self.cand):
            self._grow(max(end, 2 * len(self.cand)))
        self.cand[first:end] = candidate_rows(self.pending, self.d, self.workers, self.distinct)
        if self.split == "key":
            self.ksrc[first:end] = bucket_many(self.pending, self.sources, SPLIT_SEED)
        self.pending = []
        self.size = end


class IndexMap:
    """Generator key index -> dense key id; each distinct index is named once with ``key_name`` (two indices
    with one name share the name's id)."""

    def __init__(self, table: KeyTable, key_name: Callable[[int], str]) -> None:
        self.table = table
        self.key_name = key_name
        self.flat = np.full(0, -1, dtype=np.int32)
        self.big: dict[int, int] = {}

    def _name(self, indices: list[int]) -> list[int]:
        """Ids for indices never seen before, their names' candidates computed in one batch."""
        key_name = self.key_name
        kids = self.table.ids_of([key_name(i) for i in indices])
        self.table.flush()
        return kids

    def _extend(self, index: int) -> None:
        grown = np.full(max(index + 1, 2 * len(self.flat)), -1, dtype=np.int32)
        grown[: len(self.flat)] = self.flat
        self.flat = grown

    def ids(self, indices: np.ndarray) -> np.ndarray:
        if indices.size == 0:
            return np.zeros(0, dtype=np.int32)
        lo, hi = int(indices.min()), int(indices.max())
        if lo >= 0 and hi < INDEX_TABLE_LIMIT:
            if hi >= len(self.flat):
                self._extend(hi)
            out = self.flat[indices]
            if out.min() < 0:
                new = np.unique(indices[out < 0])
                self.flat[new] = self._name(new.tolist())
                out = self.flat[indices]
            return out
        # Some indices are negative or huge: those go through a dict, the rest through the flat table.
        uniq, inverse = np.unique(indices, return_inverse=True)
        u = uniq.tolist()
        dense = [self._known(i) for i in u]
        missing = [j for j, kid in enumerate(dense) if kid < 0]
        for j, kid in zip(missing, self._name([u[j] for j in missing])):
            dense[j] = kid
            self._store(u[j], kid)
        return np.array(dense, dtype=np.int32)[inverse.reshape(-1)]

    def _known(self, index: int) -> int:
        if 0 <= index < INDEX_TABLE_LIMIT:
            return int(self.flat[index]) if index < len(self.flat) else -1
        return self.big.get(index, -1)

    def _store(self, index: int, kid: int) -> None:
        if 0 <= index < INDEX_TABLE_LIMIT:
            if index >= len(self.flat):
                self._extend(index)
            self.flat[index] = kid
        else:
            self.big[index] = kid


@dataclass
class Chunk:
    """Messages for one kernel call: key ids, and (records path) sources and event times."""

    kid: np.ndarray
    src: np.ndarray | None = None
    now: np.ndarray | None = None


def uses_generator_indices(dataset: Dataset) -> bool:
    """Generators whose ``records`` are the stock chunked sampler: their index arrays can be used directly."""
    return isinstance(dataset, _generators.Generator) and type(dataset).records is _generators.Generator.records


def generator_chunks(dataset: _generators.Generator, table: KeyTable) -> Iterator[Chunk]:
    """The key ids of a generator's messages, drawn exactly as ``Generator.records`` draws them."""
    keymap = IndexMap(table, dataset.key_name)
    for indices in dataset.index_chunks():
        yield Chunk(keymap.ids(indices))


def record_chunks(
    dataset: Dataset, table: KeyTable, sources: int, split: str, rate: float, need_now: bool
) -> Iterator[Chunk]:
    """One pass over ``dataset.records()``: key ids, each message's source and (if needed) its event time,
    following ``simulate.route`` record for record (empty records count in the index but carry nothing).
    A record's source is ``index % sources`` or, under ``split="key"``, its first key's: it is filled in when
    the chunk is cut, after the chunk's new keys are named."""
    id_of, ids = table.id_of, table.ids
    kids: list[int] = []
    firsts: list[int] = []  # per record: its index (shuffle) or its first key's id (key)
    counts: list[int] = []  # per record: its messages
    nows: list[float] = []
    seq = 0
    by_key = split == "key"
    for index, (ts, keys) in enumerate(dataset.records()):
        if not keys:
            continue
        start = len(kids)
        for key in keys:
            kid = ids.get(key)
            kids.append(id_of(key) if kid is None else kid)
            if need_now:
                nows.append(ts if ts is not None else seq / rate)
            seq += 1
        firsts.append(kids[start] if by_key else index)
        counts.append(len(keys))
        if len(kids) >= CHUNK:
            yield _chunk(table, kids, firsts, counts, nows, need_now, by_key)
            kids, firsts, counts, nows = [], [], [], []
    if kids:
        yield _chunk(table, kids, firsts, counts, nows, need_now, by_key)


def _chunk(
    table: KeyTable, kids: list[int], firsts: list[int], counts: list[int], nows: list[float], need_now: bool,
    by_key: bool,
) -> Chunk:
    table.flush()
    per_record = np.array(firsts, dtype=np.int64)
    src = table.ksrc[per_record] if by_key else per_record % table.sources
    return Chunk(
        np.array(kids, dtype=np.int32),
        np.repeat(src, counts).astype(np.int32),
        np.array(nows, dtype=np.float64) if need_now else None,
    )


_EMPTY_I32 = np.zeros(0, dtype=np.int32)
_EMPTY_F64 = np.zeros(0, dtype=np.float64)


def warmup() -> float:
    """Make the kernels ready: nothing to do for the ahead-of-time build (:mod:`keysplit.compiled`), else numba
    compiles them or loads them from its on-disk cache; returns the seconds that took, once per process (0.0
    afterwards). Kept out of every ``messages_per_second``."""
    global _compile_seconds
    if _compile_seconds is not None:
        return 0.0
    started = time.perf_counter()
    RouteState(FastSpec(PKG_LOCAL, 2, 1.0, 1.0, "pkg"), 2, 1, "shuffle", 1.0, 1).run(Chunk(np.zeros(1, np.int32)))
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

    def chunks(self, dataset: Dataset) -> Iterator[Chunk]:
        """The dataset's messages as key-id chunks, naming new keys in this run's table."""
        if uses_generator_indices(dataset):
            return generator_chunks(dataset, self.table)  # type: ignore[arg-type]
        return record_chunks(dataset, self.table, self.sources, self.split, self.rate, self.fs.probe is not None)

    def run(self, chunk: Chunk) -> np.ndarray:
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
    """Every message's worker, in stream order (the fast twin of ``simulate.route``); None if unsupported."""
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
    """``simulate.simulate`` for kg, sg, pkg (every variant) and salt, decision for decision; None for other specs.

    ``messages_per_second`` covers the whole run (drawing or reading the dataset, naming keys, routing,
    metrics) but not the kernel's one-time compilation, which :func:`compile_seconds` reports.

    >>> from keysplit.datasets import open_dataset
    >>> from keysplit.simulate import simulate
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
            m = sum(len(k) for _, k in dataset.records())
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


def names_table(names: list[str], d: int, workers: int, distinct: bool) -> KeyTable:
    """A key table for already-encoded keys (id i is ``names[i]``) with ``d`` candidate columns: it serves
    every spec of at most d choices with this ``distinct``, since fewer choices are a prefix of more."""
    table = KeyTable(d, workers, 1, "shuffle", distinct)
    table._grow(max(len(names), 1))
    table.cand[: len(names)] = candidate_rows(names, d, workers, distinct)
    table.ids = {}  # not needed: the caller routes ids, never names
    table.size = len(names)
    return table


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
    out = st.run(Chunk(kid, src))
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
