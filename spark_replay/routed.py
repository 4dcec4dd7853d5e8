"""A grouping's routed stream in the replay, for its two consumers: the measurements (:mod:`spark_replay.job`)
and the topology model's estimate (:mod:`spark_replay.model_task`), which routes again (the same decisions)
rather than keep every decision in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from keysplit.topology_model import model_params
from spark_replay import source_routing
from spark_replay.fastpath import has_fast_path
from spark_replay.model_task import estimate_from_chunks, spark_estimate
from spark_replay.ordered import in_order
from spark_replay.streams import Ingested


def router(ing: Ingested, spec: str, mode: str, opts: Any, frequencies: Any, hashed: bool = True) -> tuple:
    """``(stream, sources, routed_pieces)``: the pieces ``spec`` routes (one partition per source, or the merged
    one), their sources, and the partition function that routes them in chunk order. ``hashed``: key ids come
    from the pieces' 64-bit fingerprints (the replay routes so before the counts have checked them, and routes
    again without them if two keys share one); else from the keys' names."""
    params = {"spec": spec, "workers": opts.workers, "sources": opts.sources, "rate": opts.rate, "mode": mode,
              "capacities": opts.capacities, "fast": opts.fast, "split": opts.split,
              "resizes": sorted(opts.resizes, key=lambda r: r.at)}
    order = ing.order
    stream, sources = ((ing.merged, [0]) if mode == source_routing.GLOBAL
                       else (ing.streams, list(range(opts.sources))))

    def routed_pieces(index: int, items: Iterator) -> Iterator:
        p = dict(params, frequencies=frequencies.value if frequencies is not None else None)
        source = 0 if mode == source_routing.GLOBAL else index  # partition s holds source s's pieces
        pieces = in_order(((part, sub) for _, (part, sub) in items), order)
        if not hashed:
            pieces = map(_by_name, pieces)
        return source_routing.route_pieces(source, pieces, p)

    return stream, sources, routed_pieces


def _by_name(sub: Any) -> Any:
    """The piece without its fingerprints: every consumer then tells keys apart by name."""
    sub.key_hash = None
    return sub


def merged_decisions(spec: str, mode: str, opts: Any) -> bool:
    """True when routing the merged stream (every chunk whole, each message with its source) makes the
    decisions of ``spec``'s routing: a global grouping is routed so anyway, and the fast path's kernel keeps
    every source's state apart (a message touches only its source's row), so it decides each source's messages
    as that source's own partition would."""
    return mode == source_routing.GLOBAL or (opts.fast and has_fast_path(spec, opts.workers, opts.sources))


def model_estimate(ing: Ingested, spec: str, mode: str, opts: Any, frequencies: Any, hashed: bool = True,
                   measure: Any = None) -> tuple:
    """The topology model's estimate for ``spec``: the stream routed again (the same decisions) and given in
    sequence order to the model's one task: straight from the cached chunks where the merged stream's decisions
    are the grouping's (:func:`merged_decisions`, :func:`spark_replay.model_task.estimate_from_chunks`, which
    also takes the measurements, ``measure``, from the same decisions), else the routed pieces through a
    shuffle (:func:`spark_replay.model_task.spark_estimate`). Returns ``(estimate, measured or None)``."""
    n_workers = max([opts.workers] + [r.workers for r in opts.resizes])  # every worker that ever exists
    # the feed's words a line, where the spouts' window starts from (storm/window.py window_start)
    params = replace(model_params(opts, n_workers), words_per_line=ing.messages / max(1, ing.records))
    if merged_decisions(spec, mode, opts):
        _, _, route = router(ing, spec, source_routing.GLOBAL, opts, frequencies, hashed)
        return estimate_from_chunks(ing.chunks, ing.order, ing.offsets, opts.sources, opts.split, route, params,
                                    measure)
    stream, sources, routed_pieces = router(ing, spec, mode, opts, frequencies, hashed)
    return spark_estimate(stream.mapPartitionsWithIndex(routed_pieces), len(ing.order), sources, params), None
