"""Per-partition summaries of routed messages, and how the driver combines them.

Each routed partition (a source's messages in sequence order and the worker each went to) yields:

- ``agg``: the K x W matrix of loads at the checkpoints (row j: messages with sequence < (j+1)*c that went
  to each worker, the simulator's ``ImbalanceSeries`` points) and the final per-worker loads; summed over
  partitions they are the global L_i(t);
- ``mask``: per distinct key, the set of workers it reached (a bit mask); OR-ed over partitions per key they
  give the distinct keys per worker (DKG eq. 8's memory) without double-counting a key sent to one worker by
  two sources. Keys travel as their 64-bit murmur3 hashes, in numpy arrays bucketed by hash, when the ingest
  proved those hashes collision-free over the dataset's distinct keys (else as strings, one record each);
- ``arr``: per worker, the arrival times of its messages, shuffled by worker for the queueing estimate.

All three go through ONE ``reduceByKey`` (one shuffle per grouping), then :func:`finish_partition` turns each
reduced partition into a :class:`Partial` and the driver merges those few.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from spark_replay.ingest import SubStream
from spark_replay.queueing import LatencyHistogram, worker_latencies

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


def union_masks(pieces: list[tuple[np.ndarray, np.ndarray]], n_workers: int) -> tuple[np.ndarray, int]:
    """OR the masks of equal hashes over every piece; distinct keys per worker and in all."""
    hashes = np.concatenate([h for h, _ in pieces])
    masks = np.concatenate([m for _, m in pieces])
    order = np.argsort(hashes, kind="stable")
    hashes, masks = hashes[order], masks[order]
    starts = np.concatenate(([0], np.flatnonzero(np.diff(hashes)) + 1)) if len(hashes) else np.zeros(0, np.int64)
    merged = np.bitwise_or.reduceat(masks, starts, axis=0) if len(hashes) else masks
    per_worker = np.zeros(n_workers, dtype=np.int64)
    for w in range(n_workers):
        per_worker[w] = int(((merged[:, w // 64] >> np.uint64(w % 64)) & np.uint64(1)).sum())
    return per_worker, len(starts)


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


def tag_partition(
    routed: tuple[SubStream, np.ndarray, bool], n_workers: int, every: int, rows: int, rate: float,
    arrivals: bool, buckets: int,
) -> Iterator[tuple[tuple, Any]]:
    """Everything the driver needs from one routed partition, keyed for one ``reduceByKey``:
    ``("agg",)`` -> (checkpoint matrix, loads, fast); ``("hmask", b)`` -> [(hashes, masks)] when the keys'
    64-bit hashes are known to be collision-free, else ``("mask", key)`` -> mask; ``("arr", w)`` -> [arrivals]."""
    sub, workers, fast = routed
    workers = workers.astype(np.int64)
    loads = np.bincount(workers, minlength=n_workers)
    yield ("agg",), (checkpoint_loads(sub.seq, workers, n_workers, every, rows), loads, fast)
    if sub.key_hash is not None:
        for b, piece in hashed_masks(sub.key_ids, workers, sub.key_hash, n_workers, buckets):
            yield ("hmask", b), [piece]
    else:
        for key, mask in key_masks(sub.key_ids, workers, sub.vocab, n_workers):
            yield ("mask", key), mask
    if arrivals and len(workers):
        times = sub.now(rate)
        order = np.argsort(workers.astype(np.int16 if n_workers < 32768 else np.int32), kind="stable")
        ordered = times[order]
        bounds = np.concatenate(([0], np.cumsum(loads)))
        for w in np.flatnonzero(loads).tolist():
            yield ("arr", w), [ordered[bounds[w]:bounds[w + 1]]]


def merge_values(a: Any, b: Any) -> Any:
    """The reduceByKey merge of the three kinds: sum the matrices, OR the masks, join the arrival chunks."""
    if isinstance(a, int):
        return a | b
    if isinstance(a, list):
        return a + b
    return a[0] + b[0], a[1] + b[1], a[2] or b[2]


@dataclass
class Partial:
    """What one reduced partition contributes to a grouping's result."""

    agg: tuple | None
    distinct: np.ndarray
    keys: int
    hist: LatencyHistogram

    def merge(self, other: Partial) -> Partial:
        agg = other.agg if self.agg is None else self.agg if other.agg is None else merge_values(self.agg, other.agg)
        return Partial(agg, self.distinct + other.distinct, self.keys + other.keys, self.hist.merge(other.hist))


def finish_partition(items: Iterable[tuple[tuple, Any]], n_workers: int, service: float) -> Partial:
    """Reduce one partition of merged values: distinct keys per worker, and each worker's queue (Lindley)."""
    agg = None
    masks: list[int] = []
    hist = LatencyHistogram(service)
    distinct = np.zeros(n_workers, dtype=np.int64)
    keys = 0
    for key, value in items:
        kind = key[0]
        if kind == "mask":
            masks.append(value)
        elif kind == "hmask":
            d, k = union_masks(value, n_workers)
            distinct += d
            keys += k
        elif kind == "arr":
            hist.add(worker_latencies(value, service))
        else:
            agg = value
    d, k = distinct_counts(masks, n_workers)
    return Partial(agg, distinct + d, keys + k, hist)
