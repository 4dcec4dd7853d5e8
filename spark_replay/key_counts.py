"""The exact count of every key, and the check that the keys' 64-bit hashes are collision-free, in one
shuffle of numpy arrays.

Every input partition sums its chunks' counts per hash (:func:`spark_replay.key_hashes.key_hash64`)
and sends them in ``buckets`` pieces (by hash), each as three arrays: the sorted hashes, their
counts and their keys. A reduce task merges its bucket's pieces the same way; where two entries share a
hash their keys must be equal, or the hashes are not collision-free (a clash), which the driver
learns with the counts' summary. So the counts cost a few array operations per chunk rather than a pickled
``(key, count)`` pair per distinct key of every chunk, and the collision check needs no job of its own.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from spark_replay.chunks import Chunk
from spark_replay.key_hashes import key_hashes64

if TYPE_CHECKING:
    from spark_replay.ingest import Ingested

#: One merged piece of counts: sorted hashes (uint64), counts (int64), keys (object), and the clash flag.
Counts = tuple[np.ndarray, np.ndarray, np.ndarray, bool]


def merge_counts(hashes: np.ndarray, counts: np.ndarray, names: np.ndarray) -> Counts:
    """Sum the counts of equal hashes: ``(hashes ascending, counts, keys, clash)``, ``clash`` True
    when two different keys share a hash (the first key of each hash is kept)."""
    if not len(hashes):
        return hashes.astype(np.uint64), counts.astype(np.int64), names, False
    order = np.argsort(hashes, kind="stable")
    h, c, n = hashes[order], counts[order].astype(np.int64), names[order]
    starts = np.flatnonzero(np.concatenate(([True], h[1:] != h[:-1])))
    first = np.repeat(starts, np.diff(np.append(starts, len(h))))  # each entry's first entry of its hash
    clash = bool(np.any(n != n[first]))
    return h[starts], np.add.reduceat(c, starts), n[starts], clash


def partition_counts(chunks: Iterable[Chunk], buckets: int) -> Iterator[tuple[int, Counts]]:
    """One input partition's counts, per bucket ``hash % buckets``."""
    hs, cs, ns = [], [], []
    for chunk in chunks:
        hs.append(key_hashes64(chunk.vocab))
        cs.append(np.bincount(chunk.key_ids, minlength=len(chunk.vocab)))
        ns.append(np.asarray(chunk.vocab, dtype=object))
    if not hs:
        return
    h, c, n, clash = merge_counts(np.concatenate(hs), np.concatenate(cs), np.concatenate(ns))
    bucket = (h % np.uint64(buckets)).astype(np.int64)
    for b in np.unique(bucket).tolist():
        sel = bucket == b
        yield b, (h[sel], c[sel], n[sel], clash)


def reduce_counts(pieces: Iterable[tuple[int, Counts]]) -> list[Counts]:
    """A bucket's pieces merged into one (a partition without any piece gives empty arrays)."""
    pieces = [p for _, p in pieces]
    if not pieces:
        return [(np.zeros(0, np.uint64), np.zeros(0, np.int64), np.zeros(0, dtype=object), False)]
    h, c, n, clash = merge_counts(np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]),
                                  np.concatenate([p[2] for p in pieces]))
    return [(h, c, n, clash or any(p[3] for p in pieces))]


def key_counts(chunks: Any, buckets: int) -> Any:
    """The RDD of merged counts: one :data:`Counts` per partition (``buckets`` partitions)."""
    return (chunks.mapPartitions(lambda it: partition_counts(it, buckets))
            .partitionBy(buckets, lambda b: b)
            .mapPartitions(reduce_counts))


def _rank(kv: tuple[str, int]) -> tuple[int, str]:
    """Top-k order: most frequent first, ties by key."""
    return -kv[1], kv[0]


def top(counts: Counts, k: int) -> list[tuple[str, int]]:
    """The ``k`` first keys of one partition in top-k order (most frequent first, ties by key)."""
    _, c, n, _ = counts
    if not len(c):
        return []
    k = min(k, len(c))
    floor = np.partition(c, len(c) - k)[len(c) - k]  # the k-th largest count: every key of the top has at least it
    cand = np.flatnonzero(c >= floor)
    return heapq.nsmallest(k, zip(n[cand].tolist(), c[cand].tolist()), key=_rank)


def summary(counts: Any, k: int) -> dict:
    """The driver's view of the counts, in one job: keys, the top-k, the most frequent key's count, and whether
    the hashes are collision-free (``hashed``)."""
    parts = counts.map(lambda t: (len(t[0]), top(t, max(k, 1)), t[3])).collect()
    best = heapq.nsmallest(max(k, 1), (kv for _, kvs, _ in parts for kv in kvs), key=_rank)
    return {"keys": sum(n for n, _, _ in parts), "top_k": [[w, c] for w, c in best[:k]], "top_count": best[0][1],
            "hashed": not any(clash for _, _, clash in parts)}


def pairs(counts: Any) -> Any:
    """The counts as an RDD of ``(key, count)``."""
    return counts.flatMap(lambda t: zip(t[2].tolist(), t[1].tolist()))


def count_keys(ing: Ingested, buckets: int, k: int) -> dict:
    """The exact counts (``ing.counts``) and their :func:`summary`; sets ``ing.hashed``. The counts go by
    hash (:func:`key_counts`); if two keys share one, they are counted again by name."""
    from pyspark import StorageLevel

    if ing.cached_counts is not None:
        ing.cached_counts.unpersist()
    merged = key_counts(ing.chunks, buckets).persist(StorageLevel.MEMORY_AND_DISK)
    info = summary(merged, k)
    ing.hashed = info["hashed"]
    if ing.hashed:
        ing.counts, ing.cached_counts = pairs(merged), merged
        return info
    merged.unpersist()
    ing.counts = ing.chunks.flatMap(_chunk_counts).reduceByKey(lambda a, b: a + b)
    ing.counts = ing.cached_counts = ing.counts.persist(StorageLevel.MEMORY_AND_DISK)
    parts = ing.counts.mapPartitions(lambda it: [_partition_top(it, max(k, 1))]).collect()
    best = heapq.nsmallest(max(k, 1), (kv for _, kvs in parts for kv in kvs), key=_rank)
    return {"keys": sum(n for n, _ in parts), "top_k": [[w, c] for w, c in best[:k]], "top_count": best[0][1],
            "hashed": False}


def _partition_top(items: Iterator[tuple[str, int]], k: int) -> tuple[int, list]:
    items = list(items)
    return len(items), heapq.nsmallest(k, items, key=_rank)


def _chunk_counts(chunk: Chunk) -> Iterator[tuple[str, int]]:
    freq = np.bincount(chunk.key_ids, minlength=len(chunk.vocab)).tolist()
    return zip(chunk.vocab, freq)
