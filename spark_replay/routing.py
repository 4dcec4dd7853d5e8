"""Routing one source's sub-stream inside a Spark partition with the library's groupings.

A source's grouping is ``build_grouping(spec, W, S)[s]`` with the simulator's hooks
(``simulate.prepare_groupings``): ``fit`` with the exact key frequencies for offline groupings, the
per-worker capacities for those that take them, and a probe of the true loads. Groupings whose decisions
depend on the other sources -- a shared ("global oracle") load vector, or a probe of the true loads -- cannot
be split by source: they run in ONE partition over the merged stream in sequence order (``mode="global"``),
exactly as the simulator interleaves them. Everything else runs one partition per source
(``mode="partitioned"``). Either way kg, sg and pkg go through ``keysplit.fast``'s proven kernel
(:mod:`spark_replay.fastpath`) and the other groupings through their reference ``choose``.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from keysplit.groupings import BaseGrouping, build_grouping
from keysplit.simulate import Resize, WorkerChanges, prepare_groupings
from spark_replay.fastpath import route_fast
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
    """``simulate.prepare_groupings`` without the dataset: the frequencies come from the replay's counts."""
    return prepare_groupings(spec, workers, sources, capacities=capacities, frequencies=frequencies or {})


def route_source(
    sub: SubStream,
    spec: str,
    workers: int,
    sources: int,
    rate: float,
    frequencies: Mapping[str, int] | None = None,
    capacities: Sequence[float] | None = None,
    resizes: Sequence[Resize] = (),
) -> np.ndarray:
    """The worker of every message of source ``sub.source``, by its own grouping's reference ``choose``."""
    g = prepare(spec, workers, sources, frequencies, capacities)[sub.source]
    vocab = sub.vocab
    choose = g.choose
    keys, times = sub.key_ids.tolist(), sub.now(rate).tolist()
    if not resizes:
        chosen = [choose(vocab[k], t) for k, t in zip(keys, times)]
    else:
        changes = WorkerChanges([g], resizes, workers)
        chosen = []
        for k, t, seq in zip(keys, times, sub.seq.tolist()):
            changes.before(seq)
            chosen.append(choose(vocab[k], t))
    return np.asarray(chosen, dtype=np.int32)


def route_merged(
    merged: SubStream,
    spec: str,
    workers: int,
    sources: int,
    rate: float,
    frequencies: Mapping[str, int] | None = None,
    capacities: Sequence[float] | None = None,
    resizes: Sequence[Resize] = (),
) -> np.ndarray:
    """Every message of the whole stream in sequence order, each by its own source's grouping, with the probe
    reading the true loads so far (the simulator's ``route`` loop)."""
    loads = [0] * max([workers] + [r.workers for r in resizes])
    groupings = prepare(spec, workers, sources, frequencies, capacities)
    changes = WorkerChanges(groupings, resizes, workers)
    for g in groupings:
        if hasattr(g, "attach_probe"):
            g.attach_probe(lambda: loads[:changes.current])
    out = np.empty(len(merged), dtype=np.int32)
    vocab = merged.vocab
    assert merged.sources is not None
    for n, (k, s, t, seq) in enumerate(zip(merged.key_ids.tolist(), merged.sources.tolist(),
                                           merged.now(rate).tolist(), merged.seq.tolist())):
        changes.before(seq)
        w = groupings[s].choose(vocab[k], t)
        loads[w] += 1
        out[n] = w
    return out


def describe(spec: str, workers: int, sources: int) -> str:
    """The canonical spec, as ``RunResult.grouping``."""
    return build_grouping(spec, workers, sources)[0].describe()


def run_partition(sub_or_subs: Any, params: dict) -> tuple[SubStream, np.ndarray, bool]:
    """Route one partition: a source's SubStream, or (global mode) every SubStream merged.

    Returns the stream, each message's worker, and whether the fast path routed it.
    """
    spec, workers, sources, rate = params["spec"], params["workers"], params["sources"], params["rate"]
    if params["mode"] == GLOBAL:
        from spark_replay.ingest import merge_streams

        sub = merge_streams(list(sub_or_subs))
    else:
        sub = sub_or_subs
    if params.get("fast", True):
        chosen = route_fast(sub, spec, workers, sources, params["split"], rate)
        if chosen is not None:
            return sub, chosen, True
    route = route_merged if params["mode"] == GLOBAL else route_source
    chosen = route(sub, spec, workers, sources, rate, params.get("frequencies"), params.get("capacities"),
                   params.get("resizes", ()))
    return sub, chosen, False
