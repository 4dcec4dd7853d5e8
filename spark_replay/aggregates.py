"""Per-partition summaries of routed messages, and how the driver combines them.

A routing task routes its pieces one at a time (:mod:`spark_replay.routing`) and keeps, for all of them:

- ``agg``: the K x W matrix of loads at the checkpoints (row j: messages with sequence < (j+1)*c that went
  to each worker, the simulator's ``ImbalanceSeries`` points) and the final per-worker loads; summed over
  partitions they are the global L_i(t);
- ``mask``: per distinct key, the set of workers it reached (a bit mask); OR-ed over partitions per key they
  give the distinct keys per worker (DKG eq. 8's memory) without double-counting a key sent to one worker by
  two sources. Keys travel as their 64-bit murmur3 hashes, in numpy arrays bucketed by hash, when the ingest
  proved those hashes collision-free over the dataset's distinct keys (else as strings, one record each);
- ``arr``: per chunk, the arrival times of the chunk's messages at each worker, sent at once (keyed by worker
  group, chunk and source) for the queueing estimate.

All three go through ONE shuffle per grouping. A reduce task (:func:`finish_partition`) merges the loads and
masks (memory grows with keys, not messages) and serves each of its workers' queues chunk after chunk, in
chunk order (:class:`~spark_replay.ordered.InOrder`): a chunk's arrivals from every source, sorted, continue
Lindley's recursion where the previous chunk left it. That is the exact FIFO order whenever event times never
decrease along the stream (always without timestamps); otherwise each worker's arrivals are gathered and sorted
at the end, as one array per worker. Each task returns a :class:`Partial`; the driver merges those few.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from keysplit.hashing import hash32
from keysplit.latency import LatencyHistogram
from spark_replay.ingest import SubStream
from spark_replay.ordered import InOrder
from spark_replay.queueing import Queues

#: Above this many (key, worker) cells a partition finds its pairs by sorting instead of with a bitmap.
_BITMAP_CELLS = 1 << 26


def checkpoint_loads(seq: np.ndarray, workers: np.ndarray, n_workers: int, every: int, rows: int) -> np.ndarray:
    """``M[j, w]`` = messages with ``seq < (j+1)*every`` that went to worker w (this partition's share)."""
    if rows == 0:
        return np.zeros((0, n_workers), dtype=np.int64)
    row = seq // every  # a message first counts at checkpoint row ``seq // every``
    keep = row < rows
    cells = np.bincount(row[keep] * n_workers + workers[keep], minlength=rows * n_workers)
    return np.cumsum(cells.reshape(rows, n_workers), axis=0)


def distinct_pairs(
    key_ids: np.ndarray, workers: np.ndarray, n_keys: int, n_workers: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The distinct (key, worker) pairs of a partition, sorted by key: ``(kid, wid, starts)`` with ``starts``
    the index of each key's first pair. A bitmap when keys x workers is small, else a sort."""
    cells = key_ids.astype(np.int64) * n_workers + workers
    if n_keys * n_workers <= _BITMAP_CELLS:
        seen = np.zeros(n_keys * n_workers, dtype=bool)
        seen[cells] = True
        pairs = np.flatnonzero(seen)
    else:
        pairs = np.unique(cells)
    kid = pairs // n_workers
    starts = np.concatenate(([0], np.flatnonzero(np.diff(kid)) + 1))
    return kid, pairs % n_workers, starts


def key_masks(key_ids: np.ndarray, workers: np.ndarray, vocab: list[str], n_workers: int) -> Iterator[tuple[str, int]]:
    """``(key, mask)`` with bit w set when the key went to worker w in this partition."""
    if not len(key_ids):
        return
    kid, wid, starts = distinct_pairs(key_ids, workers, len(vocab), n_workers)
    if n_workers <= 63:
        bits = np.left_shift(np.uint64(1), wid.astype(np.uint64))
        masks = np.bitwise_or.reduceat(bits, starts).tolist()
    else:
        ends = np.append(starts[1:], len(kid))
        wl = wid.tolist()
        masks = []
        for a, b in zip(starts.tolist(), ends.tolist()):
            m = 0
            for w in wl[a:b]:
                m |= 1 << w
            masks.append(m)
    for k, m in zip(kid[starts].tolist(), masks):
        yield vocab[k], int(m)


def hashed_masks(
    key_ids: np.ndarray, workers: np.ndarray, key_hash: np.ndarray, n_workers: int, buckets: int
) -> Iterator[tuple[int, tuple[np.ndarray, np.ndarray]]]:
    """``(bucket, (hashes, masks))``: the 64-bit hash of every distinct key of this partition and the bit mask
    of the workers it reached (``masks[:, w // 64]`` bit ``w % 64``), split into ``buckets`` by hash."""
    if not len(key_ids):
        return
    kid, wid, starts = distinct_pairs(key_ids, workers, len(key_hash), n_workers)
    words = (n_workers + 63) // 64
    masks = np.zeros((len(starts), words), dtype=np.uint64)
    for j in range(words):
        bits = np.where(wid // 64 == j, np.left_shift(np.uint64(1), (wid % 64).astype(np.uint64)), np.uint64(0))
        masks[:, j] = np.bitwise_or.reduceat(bits, starts)
    hashes = key_hash[kid[starts]]
    bucket = (hashes % np.uint64(buckets)).astype(np.int64)
    for b in np.unique(bucket).tolist():
        sel = bucket == b
        yield b, (hashes[sel], masks[sel])


def merge_masks(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """One ``(hashes, masks)`` with the masks of equal hashes OR-ed over every piece, sorted by hash."""
    hashes = np.concatenate([h for h, _ in pieces])
    masks = np.concatenate([m for _, m in pieces])
    if not len(hashes):
        return hashes, masks
    order = np.argsort(hashes, kind="stable")
    hashes, masks = hashes[order], masks[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(hashes)) + 1))
    return hashes[starts], np.bitwise_or.reduceat(masks, starts, axis=0)


def union_masks(pieces: list[tuple[np.ndarray, np.ndarray]], n_workers: int) -> tuple[np.ndarray, int]:
    """OR the masks of equal hashes over every piece; distinct keys per worker and in all."""
    hashes, merged = merge_masks(pieces)
    per_worker = np.zeros(n_workers, dtype=np.int64)
    for w in range(n_workers):
        per_worker[w] = int(((merged[:, w // 64] >> np.uint64(w % 64)) & np.uint64(1)).sum())
    return per_worker, len(hashes)


def distinct_counts(masks: Iterable[int], n_workers: int) -> tuple[np.ndarray, int]:
    """Distinct keys per worker and in all, from one partition of OR-ed masks."""
    values = list(masks)
    per_worker = np.zeros(n_workers, dtype=np.int64)
    if n_workers <= 63:
        arr = np.asarray(values, dtype=np.uint64)
        for w in range(n_workers):
            per_worker[w] = int(((arr >> np.uint64(w)) & np.uint64(1)).sum())
    else:
        for m in values:
            for w in range(n_workers):
                if m >> w & 1:
                    per_worker[w] += 1
    return per_worker, len(values)


def tag_pieces(
    routed: Iterator[tuple[tuple[int, int], tuple[SubStream, np.ndarray, bool]]], source: int, n_workers: int,
    every: int, rows: int, rate: float, arrivals: bool, groups: int,
) -> Iterator[tuple[tuple, Any]]:
    """Everything the driver needs from one routing task's pieces ``(chunk index, routed piece)``, keyed for
    one shuffle: per chunk ``("arr", g, chunk, source)`` -> [(worker, arrival times)] for each worker group g
    (sent as the pieces go); at the end ``("agg",)`` -> (checkpoint matrix, loads, fast), and
    ``("hmask", b)`` -> (hashes, masks) when the keys' 64-bit hashes are known to be collision-free, else
    ``("mask", key)`` -> mask."""
    matrix = np.zeros((rows, n_workers), dtype=np.int64)
    loads = np.zeros(n_workers, dtype=np.int64)
    fast = False
    hmasks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    masks: dict[str, int] = {}
    for index, (sub, workers, piece_fast) in routed:
        fast = fast or piece_fast
        workers = workers.astype(np.int64)
        piece_loads = np.bincount(workers, minlength=n_workers)
        loads += piece_loads
        matrix += checkpoint_loads(sub.seq, workers, n_workers, every, rows)
        if sub.key_hash is not None:
            for b, piece in hashed_masks(sub.key_ids, workers, sub.key_hash, n_workers, groups):
                hmasks[b] = merge_masks([hmasks[b], piece]) if b in hmasks else piece
        else:
            for key, mask in key_masks(sub.key_ids, workers, sub.vocab, n_workers):
                masks[key] = masks.get(key, 0) | mask
        if arrivals:
            times = sub.now(rate)
            order = np.argsort(workers.astype(np.int16 if n_workers < 32768 else np.int32), kind="stable")
            ordered = times[order]
            bounds = np.concatenate(([0], np.cumsum(piece_loads)))
            per_group: list[list] = [[] for _ in range(groups)]
            for w in np.flatnonzero(piece_loads).tolist():
                per_group[w % groups].append((w, ordered[bounds[w]:bounds[w + 1]]))
            for g in range(groups):
                yield ("arr", g, index, source), per_group[g]
    yield ("agg",), (matrix, loads, fast)
    for b, piece in hmasks.items():
        yield ("hmask", b), piece
    yield from (( ("mask", key), mask) for key, mask in masks.items())


def shuffle_partition(key: tuple) -> int:
    """The reduce partition (before the modulo) of a tagged item: arrivals by worker group, the rest spread."""
    if key[0] in ("arr", "hmask"):
        return key[1]
    return hash32(key[1]) if key[0] == "mask" else 0


def merge_agg(a: tuple, b: tuple) -> tuple:
    """Two ``(checkpoint matrix, loads, fast)`` summed."""
    return a[0] + b[0], a[1] + b[1], a[2] or b[2]


@dataclass
class Partial:
    """What one reduced partition contributes to a grouping's result."""

    agg: tuple | None
    distinct: np.ndarray
    keys: int
    hist: LatencyHistogram

    def merge(self, other: Partial) -> Partial:
        agg = other.agg if self.agg is None else self.agg if other.agg is None else merge_agg(self.agg, other.agg)
        return Partial(agg, self.distinct + other.distinct, self.keys + other.keys, self.hist.merge(other.hist))


def finish_partition(items: Iterable[tuple[tuple, Any]], group: int, chunks: int, sources: list[int],
                     n_workers: int, service: float, streaming: bool) -> Partial:
    """Reduce one partition: sum the loads, merge the masks into distinct keys per worker, and serve the queues
    of worker group ``group`` with the arrivals of ``chunks`` chunks from ``sources``, in chunk order."""
    agg = None
    masks: dict[str, int] = {}
    hmasks: dict[int, list] = {}
    queues = Queues(service, streaming)
    order = InOrder((c, s) for c in range(chunks) for s in sources) if service > 0 else None
    batch: list = []
    try:
        for key, value in items:
            kind = key[0]
            if kind == "arr":
                assert order is not None
                for piece in order.push(key[2:], value):
                    batch.append(piece)
                    if len(batch) == len(sources):
                        queues.add(batch)
                        batch = []
            elif kind == "hmask":
                hmasks[key[1]] = [merge_masks(hmasks[key[1]] + [value])] if key[1] in hmasks else [value]
            elif kind == "mask":
                masks[key[1]] = masks.get(key[1], 0) | value
            else:
                agg = value if agg is None else merge_agg(agg, value)
    finally:
        if order is not None:
            order.close()
    distinct = np.zeros(n_workers, dtype=np.int64)
    keys = 0
    for pieces in hmasks.values():
        d, k = union_masks(pieces, n_workers)
        distinct += d
        keys += k
    d, k = distinct_counts(masks.values(), n_workers)
    return Partial(agg, distinct + d, keys + k, queues.finish())


def one_task(n_workers: int, every: int, messages: int, chunks: int, rate: float) -> Callable[[Iterator], Partial]:
    """The measurements of ONE task that routes the whole stream in sequence order (the topology model's,
    ``spark_replay.model_task.estimate_from_chunks``): what the routing and reduce tasks compute, in one
    partition, from its routed pieces ``(chunk index, (piece, workers, fast))``. No queue is served: there the
    topology model estimates latency, not Lindley's recursion."""

    def measure(routed: Iterator) -> Partial:
        items = tag_pieces(routed, 0, n_workers, every, messages // every, rate, False, 1)
        return finish_partition(items, 0, chunks, [0], n_workers, 0.0, True)

    return measure
