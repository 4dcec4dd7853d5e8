"""The routing step: every piece of a source's sub-stream through the library's groupings, inside a Spark partition.

A source's grouping is ``build_grouping(spec, W, S)[s]`` with the simulator's hooks
(``keysplit.groupings.hosting.prepare_groupings``): ``fit`` with the exact key frequencies for offline groupings, the
per-worker capacities for those that take them, and a probe of the true loads. Groupings whose decisions
depend on the other sources -- a shared ("global oracle") load vector, or a probe of the true loads -- cannot
be split by source: they run in ONE partition over the merged stream in sequence order (:data:`GLOBAL`),
exactly as the simulator interleaves them. Everything else runs one partition per source (:data:`PARTITIONED`).

Three routers, one per way of deciding:

- :class:`FastRouter`: kg, sg and pkg (every variant: d choices, local or global load, probing) through
  ``keysplit.simulator.fast``'s numba kernel, which makes exactly the reference decisions
  (``tests/simulator/test_fast.py`` proves it against ``choose``). Its ``RouteState`` holds every source's state
  (round-robin position, local load row, next probe) and each message carries its source, so a partitioned
  source ``s`` fed only its own messages touches only row ``s`` (what ``build_grouping(spec, W, S)[s]`` holds),
  and the merged stream of a global grouping is routed exactly like the simulator's loop;
- :class:`SourceRouter`: one source's own grouping, its reference ``choose``;
- :class:`MergedRouter`: every source's grouping over the merged stream, the probe reading the true loads.

Event times are always passed explicitly (``SubStream.now``), so a probe fires at the reference's moments. The
replay's own tests prove the whole pipeline equal to ``simulate(..., engine="reference")``.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from keysplit.groupings import BaseGrouping, build_grouping
from keysplit.groupings.hosting import WorkerChanges, prepare_groupings
from keysplit.simulator import fast
from keysplit.simulator.tokenize import HashIds
from keysplit.stream import Resize
from spark_replay.ingest import Ingested, SubStream
from spark_replay.ordered import in_order

if TYPE_CHECKING:
    from spark_replay.options import ReplayOptions

PARTITIONED = "partitioned"
GLOBAL = "global"

_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, range,
              types.FunctionType, types.MethodType, types.BuiltinFunctionType)


@dataclass(frozen=True)
class RoutingParams:
    """What a routing task needs to build its grouping, pickled into every task: the grouping, the topology's
    sizes, the event time rate, the routing mode and what the grouping's hooks take."""

    spec: str
    workers: int
    sources: int
    rate: float
    mode: str  # PARTITIONED or GLOBAL
    split: str
    fast: bool = True  # kg/sg/pkg through keysplit.simulator.fast's kernel
    capacities: tuple[float, ...] | None = None
    resizes: tuple[Resize, ...] = ()  # sorted by message
    frequencies: Mapping[str, int] | None = None  # exact key counts, for the offline groupings (set in the task)

    @property
    def every_worker(self) -> int:
        """Every worker that ever exists (the largest count a resize reaches)."""
        return max([self.workers] + [r.workers for r in self.resizes])


def shares_state(instances: Sequence[BaseGrouping]) -> bool:
    """True when two sources' instances hold the same mutable object (e.g. PKG G's shared load vector)."""
    seen: dict[int, int] = {}
    for n, g in enumerate(instances):
        for value in vars(g).values():
            if isinstance(value, _IMMUTABLE):
                continue
            owner = seen.setdefault(id(value), n)
            if owner != n:
                return True
    return False


def needs_probe(g: BaseGrouping) -> bool:
    """A grouping that reads the workers' true loads as it goes (``attach_probe`` with an interval set)."""
    return hasattr(g, "attach_probe") and g.probe_interval is not None


def routing_mode(spec: str, workers: int, sources: int) -> str:
    """:data:`GLOBAL` (one partition, merged stream) or :data:`PARTITIONED` (one partition per source)."""
    instances = build_grouping(spec, workers, sources)
    if shares_state(instances) or any(needs_probe(g) for g in instances):
        return GLOBAL
    return PARTITIONED


def describe(spec: str, workers: int, sources: int) -> str:
    """The canonical spec, as ``RunResult.grouping``."""
    return build_grouping(spec, workers, sources)[0].describe()


def has_fast_path(spec: str, workers: int, sources: int) -> bool:
    """True when ``keysplit.simulator.fast`` routes ``spec`` (kg, sg, pkg and its variants)."""
    return fast.fast_spec(spec, workers, sources) is not None


def build_groupings(p: RoutingParams) -> list[BaseGrouping]:
    """``keysplit.groupings.hosting.prepare_groupings`` without the dataset: the frequencies come from the replay's
    counts."""
    return prepare_groupings(p.spec, p.workers, p.sources, capacities=p.capacities, frequencies=p.frequencies or {})


class FastRouter:
    """One partition's kernel state, fed its pieces one after another in sequence order."""

    def __init__(self, fs: fast.FastSpec, p: RoutingParams) -> None:
        fast.warmup()
        self.rate = p.rate
        self.state = fast.RouteState(fs, p.workers, p.sources, p.split, p.rate, checkpoint=1 << 62)
        self.by_hash = HashIds()  # used for every piece of a replay or for none (the ingest decides)

    def route(self, sub: SubStream) -> np.ndarray:
        """The worker of every message of ``sub`` (the next piece of one source's stream, or of the merged one)."""
        n = len(sub)
        if n == 0:
            return np.zeros(0, dtype=np.int32)
        table = self.state.table
        if sub.key_hash is not None:  # fingerprints checked collision-free: ids without a dict lookup per key
            before = self.by_hash.size
            remap = self.by_hash.ids(sub.key_hash).astype(np.int32)
            fresh = np.flatnonzero(remap >= before).tolist()
            # the table numbers keys as the fingerprints do: in order of first appearance, only from here
            table.ids_of([sub.vocab[k] for k in fresh])
        else:
            remap = np.array(table.ids_of(sub.vocab), dtype=np.int32)
        table.flush()  # the piece's new keys named in one batch
        src = sub.sources if sub.sources is not None else np.full(n, sub.source, dtype=np.int32)
        chunk = fast.IdChunk(remap[sub.key_ids], src.astype(np.int32), sub.now(self.rate).astype(np.float64))
        return self.state.run(chunk)


class SourceRouter:
    """Source ``s``'s own grouping (its reference ``choose``), fed its pieces in sequence order."""

    def __init__(self, source: int, p: RoutingParams) -> None:
        self.g = build_groupings(p)[source]
        self.rate = p.rate
        self.changes = WorkerChanges([self.g], p.resizes, p.workers)

    def route(self, sub: SubStream) -> np.ndarray:
        vocab, choose, before = sub.vocab, self.g.choose, self.changes.before
        chosen = []
        for k, t, seq in zip(sub.key_ids.tolist(), sub.now(self.rate).tolist(), sub.seq.tolist()):
            before(seq)
            chosen.append(choose(vocab[k], t))
        return np.asarray(chosen, dtype=np.int32)


class MergedRouter:
    """Every source's grouping over the merged stream in sequence order, the probe reading the true loads so
    far (the simulator's ``route`` loop), fed piece after piece."""

    def __init__(self, p: RoutingParams) -> None:
        self.loads = [0] * p.every_worker
        self.groupings = build_groupings(p)
        self.changes = WorkerChanges(self.groupings, p.resizes, p.workers)
        self.rate = p.rate
        for g in self.groupings:
            if hasattr(g, "attach_probe"):
                g.attach_probe(lambda: self.loads[:self.changes.current])

    def route(self, merged: SubStream) -> np.ndarray:
        out = np.empty(len(merged), dtype=np.int32)
        vocab, groupings, loads, before = merged.vocab, self.groupings, self.loads, self.changes.before
        assert merged.sources is not None
        for n, (k, s, t, seq) in enumerate(zip(merged.key_ids.tolist(), merged.sources.tolist(),
                                               merged.now(self.rate).tolist(), merged.seq.tolist())):
            before(seq)
            w = groupings[s].choose(vocab[k], t)
            loads[w] += 1
            out[n] = w
        return out


def route_pieces(source: int, pieces: Iterator[SubStream], p: RoutingParams) -> Iterator[tuple[SubStream, np.ndarray,
                                                                                                  bool]]:
    """Route one partition's pieces, in sequence order, one at a time: source ``source``'s, or (global mode)
    the merged stream's. Yields each piece, its messages' workers, and whether the fast path routed it."""
    fs = fast.fast_spec(p.spec, p.workers, p.sources) if p.fast else None
    router: FastRouter | SourceRouter | MergedRouter
    if fs is not None:
        router = FastRouter(fs, p)
    elif p.mode == GLOBAL:
        router = MergedRouter(p)
    else:
        router = SourceRouter(source, p)
    for sub in pieces:
        yield sub, router.route(sub), fs is not None


def routing_params(spec: str, mode: str, opts: ReplayOptions) -> RoutingParams:
    """The routing parameters of ``spec`` in a replay (``opts``: :class:`spark_replay.options.ReplayOptions`)."""
    return RoutingParams(spec=spec, workers=opts.workers, sources=opts.sources, rate=opts.rate, mode=mode,
                         split=opts.split, fast=opts.fast,
                         capacities=tuple(opts.capacities) if opts.capacities is not None else None,
                         resizes=tuple(sorted(opts.resizes, key=lambda r: r.at)))


#: A partition function over one partition's dealt pieces ``(source, (chunk id, piece))``: the routed pieces.
RoutedPieces = Callable[[int, Iterator], Iterator[tuple[SubStream, np.ndarray, bool]]]


def router(ing: Ingested, spec: str, mode: str, opts: ReplayOptions, frequencies: Any,
           hashed: bool = True) -> tuple[Any, list[int], RoutedPieces]:
    """``(stream, sources, routed_pieces)``: the pieces ``spec`` routes (one partition per source, or the merged
    one), their sources, and the partition function that routes them in chunk order. ``hashed``: key ids come
    from the pieces' 64-bit fingerprints (the replay routes so before the counts have checked them, and routes
    again without them if two keys share one); else from the keys' names."""
    params = routing_params(spec, mode, opts)
    order = ing.order
    stream, sources = ((ing.merged, [0]) if mode == GLOBAL else (ing.streams, list(range(opts.sources))))

    def routed_pieces(index: int, items: Iterator) -> Iterator:
        p = replace(params, frequencies=frequencies.value if frequencies is not None else None)
        source = 0 if mode == GLOBAL else index  # partition s holds source s's pieces
        pieces = in_order(((part, sub) for _, (part, sub) in items), order)
        if not hashed:
            pieces = map(_by_name, pieces)
        return route_pieces(source, pieces, p)

    return stream, sources, routed_pieces


def _by_name(sub: SubStream) -> SubStream:
    """The piece without its fingerprints: every consumer then tells keys apart by name."""
    sub.key_hash = None
    return sub
