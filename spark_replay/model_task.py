"""The model step: the topology model in Spark (the replay's ``--arrivals closed`` and ``--arrivals open``
estimates), for each grouping in ONE task fed the routed stream in sequence order, a chunk at a time, so its
memory does not grow with the stream; only the summary comes back (:func:`model_estimate`).

Where the merged stream's decisions are the grouping's (:func:`merged_decisions`) the task reads the cached
chunks itself, deals and routes each whole and also takes the measurements (:func:`estimate_from_chunks`);
otherwise each grouping's routed pieces go, in slices, through a shuffle to the task, which takes them in chunk
order and merges each chunk's sources by sequence number (:func:`spark_estimate`). Either way it feeds a
:class:`~keysplit.topology_model.StreamedModel` (:mod:`keysplit.topology_model`). The model routes again (the
same decisions) rather than keep every decision of the measurements in memory.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from keysplit.simulator.tokenize import HashIds
from keysplit.topology_model import model_params
from keysplit.topology_model.driver import StreamedModel, aggregator_of
from keysplit.topology_model.params import TopologyParams
from spark_replay.chunks import compact
from spark_replay.ingest import Ingested, deal_chunk
from spark_replay.ordered import in_order
from spark_replay.routing import GLOBAL, has_fast_path, router

if TYPE_CHECKING:
    from spark_replay.options import ReplayOptions


class ModelKeyIds:
    """The model's global key ids (equal keys, equal ids: what its distinct counts need) and each key's aggregator
    (the runner's fields hash, :func:`~keysplit.topology_model.driver.aggregator_of`), computed once per key:
    memory grows with keys, not messages. When the pieces carry their keys' 64-bit fingerprints (checked
    collision-free by the ingest, for every piece of a replay or for none) the ids come from the fingerprints
    in one compiled step per slice, and only a new key's name is read."""

    def __init__(self, aggregators: int, shape: str = "wordcount") -> None:
        self.aggregators = aggregators
        self.shape = shape
        self.ids: dict[str, int] = {}
        self.by_hash = HashIds()
        self.size = 0
        self._agg = np.zeros(1024, dtype=np.int64)

    def _name(self, fresh: list[str]) -> None:
        """Append the aggregators of keys new to the table (ids ``size``, ``size + 1``, ...)."""
        end = self.size + len(fresh)
        if end > len(self._agg):
            self._agg = np.resize(self._agg, max(end, 2 * len(self._agg)))
        self._agg[self.size:end] = aggregator_of(fresh, self.aggregators, self.shape)
        self.size = end

    def lookup(self, vocab: list[str], hashes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, aggregators)`` of every entry of ``vocab`` (distinct names), ``hashes`` their fingerprints."""
        if hashes is not None:
            before = self.by_hash.size
            ids = self.by_hash.ids(hashes)
            fresh = np.flatnonzero(ids >= before).tolist()  # new ids, in this order
            if fresh:
                self._name([vocab[k] for k in fresh])
            return ids, self._agg[ids]
        fresh = [k for k in dict.fromkeys(vocab) if k not in self.ids]
        if fresh:
            for k in fresh:
                self.ids[k] = len(self.ids)
            self._name(fresh)
        ids = np.fromiter((self.ids[k] for k in vocab), dtype=np.int64, count=len(vocab))
        return ids, self._agg[ids]


#: Slices a routed piece is cut into for the model's shuffle: PySpark's shuffle writes and reads its items in
#: batches of up to ten, so an item must be small (a merged piece of 2^19 messages gives slices of 2^14).
SLICES = 32


def model_slices(sub: Any, chosen: np.ndarray) -> list[tuple]:
    """What the model task needs of one routed piece, in :data:`SLICES` slices of whole records (some may be
    empty): per slice its sequence numbers, workers, key ids into its own vocabulary, that vocabulary, the
    messages of each of its records (in order), the source (the topology's router) of each record and, when the
    piece has them, the vocabulary's 64-bit fingerprints."""
    assert sub.rec_len is not None, "the ingest gives every piece its records' lengths"
    rec = sub.rec_len.astype(np.int64)
    rec_start = np.cumsum(rec) - rec
    which = rec_start * SLICES // max(1, len(sub.seq))  # a record goes to the slice where it starts
    cuts = np.searchsorted(which, np.arange(SLICES + 1))  # record bounds of each slice
    out = []
    chosen = np.asarray(chosen, dtype=np.int32)
    # a piece is one source's, or (global groupings) every source's merged, each message with its source
    rec_src = (np.full(len(rec), sub.source, dtype=np.int32) if sub.sources is None or not len(rec)
               else np.asarray(sub.sources, dtype=np.int32)[rec_start])
    for q in range(SLICES):
        r0, r1 = int(cuts[q]), int(cuts[q + 1])
        a = int(rec_start[r0]) if r0 < len(rec) else len(sub.seq)
        b = int(rec_start[r1]) if r1 < len(rec) else len(sub.seq)
        used, local = compact(sub.key_ids[a:b], len(sub.vocab))  # np.unique's result, without its sort
        out.append((sub.seq[a:b].copy(), chosen[a:b].copy(), local.astype(np.int32).reshape(-1),
                    [sub.vocab[k] for k in used.tolist()], sub.rec_len[r0:r1].copy(), rec_src[r0:r1].copy(),
                    sub.key_hash[used] if sub.key_hash is not None else None))
    return out


def merge_pieces(pieces: list[tuple], keys: ModelKeyIds) -> tuple:
    """One chunk's pieces (one per source, each sorted) as the model's feed: ``(line lengths, workers,
    aggregators, key ids, line sources)`` in sequence order. A record's messages are consecutive and in one piece,
    so the merged order keeps every record whole."""
    seq = np.concatenate([p[0] for p in pieces])
    workers = np.concatenate([p[1] for p in pieces]).astype(np.int64)
    starts = np.zeros(len(seq), dtype=bool)
    source = np.zeros(len(seq), dtype=np.int64)
    ids, aggs, at = [], [], 0
    for p in pieces:
        rec = p[4].astype(np.int64)
        starts[at + np.cumsum(rec) - rec] = True  # a record's first message
        source[at + np.cumsum(rec) - rec] = p[5]
        at += len(p[0])
        gid, gagg = keys.lookup(p[3], p[6])
        ids.append(gid[p[2]])
        aggs.append(gagg[p[2]])
    order = np.argsort(seq, kind="stable")
    first = np.flatnonzero(starts[order])
    lengths = np.diff(np.append(first, len(seq)))
    return lengths, workers[order], np.concatenate(aggs)[order], np.concatenate(ids)[order], source[order][first]


def whole_chunk(sub: Any, chosen: np.ndarray, keys: ModelKeyIds) -> tuple:
    """:func:`merge_pieces` of one merged piece (a whole chunk, in sequence order): its records need no merge,
    and its arrays no slice or copy. ``sub.rec_len`` has the lengths of its non-empty records."""
    rec = sub.rec_len
    first = np.cumsum(rec, dtype=np.int64) - rec
    ids, aggs = keys.lookup(sub.vocab, sub.key_hash)
    return rec, chosen, aggs[sub.key_ids], ids[sub.key_ids], sub.sources[first]


def estimate_task(items: Any, chunks: int, sources: list[int], params: TopologyParams) -> dict:
    """The model's one task: the slices ``((chunk number, source, slice), slice)`` of every source's routed
    pieces (:func:`model_slices`), released in chunk order (:func:`spark_replay.ordered.in_order`: early ones
    wait in a bounded buffer, then on disk); each chunk's slices are merged by sequence number and fed to a
    :class:`StreamedModel`."""
    model = StreamedModel(params)
    keys = ModelKeyIds(params.aggregators, params.shape)
    held: list[tuple] = []
    order = [(n, s, q) for n in range(chunks) for s in sources for q in range(SLICES)]
    for piece in in_order(items, order):
        held.append(piece)
        if len(held) == len(sources) * SLICES:  # every slice of the chunk: merge and feed
            model.feed(*merge_pieces(held, keys))
            held = []
    return model.finish().summary()


def spark_estimate(routed: Any, chunks: int, sources: list[int], params: TopologyParams) -> dict:
    """Run the model for one grouping in ONE Spark task, streaming: ``routed``'s partition for source s (or the
    one merged partition, ``sources`` [0]) yields ``(SubStream, workers, fast)`` for chunk 0, 1, ... in order;
    each piece goes, compacted, through a shuffle to the model's task, which takes them in chunk order, and only
    the summary comes back to the driver."""

    def tag(index: int, pieces: Any) -> Any:
        for n, (sub, chosen, _fast) in enumerate(pieces):
            for q, part in enumerate(model_slices(sub, chosen)):
                yield 0, ((n, index, q), part)

    return (routed.mapPartitionsWithIndex(tag)
            .partitionBy(1, lambda _key: 0)
            .mapPartitions(lambda items: [estimate_task((kv[1] for kv in items), chunks, sources, params)])
            .collect()[0])


def estimate_from_chunks(chunks: Any, order: list, offsets: dict, sources: int, split: str, route: Any,
                         params: TopologyParams, measure: Any = None) -> tuple:
    """The model for a grouping whose decisions the merged stream gives (:func:`merged_decisions`), in ONE
    task that reads the cached chunks themselves in sequence order (``coalesce(1)``: no shuffle; chunks that
    come early wait in :func:`~spark_replay.ordered.in_order`'s bounded buffer), deals each chunk whole,
    routes it (``route``: a partition function as :func:`spark_replay.routing.router`'s, over the merged
    stream) and feeds the model one chunk at a time: no piece of the stream is sliced, shuffled or merged by
    sequence number. ``offsets``: every chunk's first record and message. ``measure``, if given, takes the
    same routed pieces ``(chunk index, (piece, workers, fast))`` as they are fed and returns the measurements
    (:class:`spark_replay.aggregates.Partial`), so one routing serves both. Returns ``(summary, measured)``."""

    def task(items: Any) -> list:
        from collections import deque

        whole = (piece for c in in_order(((c.part, c) for c in items), order)
                 for piece in deal_chunk(c, *offsets[c.part], sources, split, merged=True, hashed=True))
        model = StreamedModel(params)
        keys = ModelKeyIds(params.aggregators, params.shape)

        def fed() -> Any:
            for n, routed in enumerate(route(0, whole)):
                model.feed(*whole_chunk(routed[0], routed[1], keys))
                yield n, routed
                del routed  # before the next chunk is dealt and routed: one chunk's arrays at a time

        measured = measure(fed()) if measure is not None else deque(fed(), 0)
        return [(model.finish().summary(), measured if measure is not None else None)]

    return chunks.coalesce(1).mapPartitions(task).collect()[0]


def merged_decisions(spec: str, mode: str, opts: ReplayOptions) -> bool:
    """True when routing the merged stream (every chunk whole, each message with its source) makes the
    decisions of ``spec``'s routing: a global grouping is routed so anyway, and the fast path's kernel keeps
    every source's state apart (a message touches only its source's row), so it decides each source's messages
    as that source's own partition would."""
    return mode == GLOBAL or (opts.fast and has_fast_path(spec, opts.workers, opts.sources))


def model_estimate(ing: Ingested, spec: str, mode: str, opts: ReplayOptions, frequencies: Any, hashed: bool = True,
                   measure: Any = None) -> tuple:
    """The topology model's estimate for ``spec``: the stream routed again (the same decisions) and given in
    sequence order to the model's one task: straight from the cached chunks where the merged stream's decisions
    are the grouping's (:func:`merged_decisions`, :func:`estimate_from_chunks`, which also takes the
    measurements, ``measure``, from the same decisions), else the routed pieces through a shuffle
    (:func:`spark_estimate`). Returns ``(estimate, measured or None)``."""
    n_workers = max([opts.workers] + [r.workers for r in opts.resizes])  # every worker that ever exists
    # the feed's words a line, where the spouts' window starts from (storm/window.py window_start)
    params = replace(model_params(opts, n_workers), words_per_line=ing.messages / max(1, ing.records))
    if merged_decisions(spec, mode, opts):
        _, _, route = router(ing, spec, GLOBAL, opts, frequencies, hashed)
        return estimate_from_chunks(ing.chunks, ing.order, ing.offsets, opts.sources, opts.split, route, params,
                                    measure)
    stream, sources, routed_pieces = router(ing, spec, mode, opts, frequencies, hashed)
    return spark_estimate(stream.mapPartitionsWithIndex(routed_pieces), len(ing.order), sources, params), None
