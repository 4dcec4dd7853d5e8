"""Routing one source's sub-stream inside a Spark partition with the library's groupings.

A source's grouping is ``build_grouping(spec, W, S)[s]`` with the simulator's hooks
(``keysplit.groupings.hosting.prepare_groupings``): ``fit`` with the exact key frequencies for offline groupings, the
per-worker capacities for those that take them, and a probe of the true loads. Groupings whose decisions
depend on the other sources -- a shared ("global oracle") load vector, or a probe of the true loads -- cannot
be split by source: they run in ONE partition over the merged stream in sequence order (``mode="global"``),
exactly as the simulator interleaves them. Everything else runs one partition per source
(``mode="partitioned"``). Either way kg, sg and pkg go through ``keysplit.simulator.fast``'s proven kernel
(:mod:`spark_replay.fastpath`) and the other groupings through their reference ``choose``.
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from keysplit.groupings import BaseGrouping, build_grouping
from keysplit.groupings.hosting import WorkerChanges, prepare_groupings
from spark_replay.fastpath import fast_router
from spark_replay.ingest import SubStream

PARTITIONED = "partitioned"
GLOBAL = "global"

_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, range,
              types.FunctionType, types.MethodType, types.BuiltinFunctionType)


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
    """``global`` (one partition, merged stream) or ``partitioned`` (one partition per source)."""
    instances = build_grouping(spec, workers, sources)
    if shares_state(instances) or any(needs_probe(g) for g in instances):
        return GLOBAL
    return PARTITIONED


def prepare(
    spec: str,
    workers: int,
    sources: int,
    frequencies: Mapping[str, int] | None,
    capacities: Sequence[float] | None,
) -> list[BaseGrouping]:
    """``keysplit.groupings.hosting.prepare_groupings`` without the dataset: the frequencies come from the replay's
    counts."""
    return prepare_groupings(spec, workers, sources, capacities=capacities, frequencies=frequencies or {})


class SourceRouter:
    """Source ``s``'s own grouping (its reference ``choose``), fed its pieces in sequence order."""

    def __init__(self, source: int, params: dict) -> None:
        self.g = prepare(params["spec"], params["workers"], params["sources"], params.get("frequencies"),
                         params.get("capacities"))[source]
        self.rate = params["rate"]
        self.changes = WorkerChanges([self.g], params.get("resizes", ()), params["workers"])

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

    def __init__(self, params: dict) -> None:
        workers, resizes = params["workers"], params.get("resizes", ())
        self.loads = [0] * max([workers] + [r.workers for r in resizes])
        self.groupings = prepare(params["spec"], workers, params["sources"], params.get("frequencies"),
                                 params.get("capacities"))
        self.changes = WorkerChanges(self.groupings, resizes, workers)
        self.rate = params["rate"]
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


def describe(spec: str, workers: int, sources: int) -> str:
    """The canonical spec, as ``RunResult.grouping``."""
    return build_grouping(spec, workers, sources)[0].describe()


def route_pieces(source: int, pieces: Iterator[SubStream], params: dict) -> Iterator[tuple[SubStream, np.ndarray,
                                                                                          bool]]:
    """Route one partition's pieces, in sequence order, one at a time: source ``source``'s, or (global mode)
    the merged stream's. Yields each piece, its messages' workers, and whether the fast path routed it."""
    router: Any = None
    if params.get("fast", True):
        router = fast_router(params["spec"], params["workers"], params["sources"], params["split"], params["rate"])
    fast = router is not None
    if router is None:
        router = MergedRouter(params) if params["mode"] == GLOBAL else SourceRouter(source, params)
    for sub in pieces:
        yield sub, router.route(sub), fast
