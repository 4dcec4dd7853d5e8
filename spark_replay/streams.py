"""The dataset on Spark as S ordered sub-streams: read (:mod:`spark_replay.sparkinput`), numbered and dealt
(:mod:`spark_replay.ingest`'s rules) into one piece per (source, chunk).

A small job gives every chunk its global record and message offsets (prefix sums of per-chunk counts, a few
numbers per chunk on the driver), and one shuffle (run by the first job that routes) deals each chunk's
messages to the partition of their source. The chunks stay cached: their share of the dataset fingerprint
(:mod:`keysplit.fingerprint`) and the exact counts (:mod:`spark_replay.key_counts`) are taken from them while
the routing jobs run, and the topology model reads them in sequence order. Nothing of the dataset itself goes
through the driver.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from keysplit.datasets import FileDataset
from keysplit.errors import DatasetError
from keysplit.fingerprint import Fingerprint
from spark_replay import key_counts
from spark_replay.ingest import Chunk, chunk_facts, deal_chunk
from spark_replay.sparkinput import read_failure, spark_chunks


@dataclass
class Ingested:
    """The dataset on Spark: its pieces (cached), their order, the exact counts, its size and fingerprint.

    The pieces are dealt by the first job that routes them; the chunks stay cached for :func:`facts`
    (the fingerprint, whether event times rise), :func:`count_keys` (the exact counts, whether the keys' 64-bit
    fingerprints are collision-free), which the replay runs beside the routing, and the topology model
    (:func:`spark_replay.model_task.estimate_from_chunks`)."""

    streams: Any  # RDD[(source, (chunk id, SubStream))], partition s = source s
    merged: Any  # RDD[(0, (chunk id, SubStream))] in one partition (every source), or None
    order: list[tuple[int, int]]  # every chunk id, in sequence order
    chunks: Any  # RDD[Chunk], cached (the facts, the counts and the topology model read it)
    offsets: dict[tuple[int, int], tuple[int, int]]  # chunk id -> (first record, first message)
    rate: float
    records: int
    messages: int
    partitions: int
    counts: Any = None  # RDD[(key, count)], set by count_keys
    sha256: str = ""  # set by facts
    rising_times: bool = True  # event times never decrease along the stream (set by facts)
    hashed: bool | None = None  # the keys' fingerprints are collision-free (None: not checked yet)
    cached_counts: Any = None  # the cached RDD behind ``counts``

    def unpersist(self) -> None:
        for rdd in (self.chunks, self.cached_counts):
            if rdd is not None:
                rdd.unpersist()


def ingest(spark: Any, dataset: FileDataset, sources: int, split: str, partitions: int | None = None,
           rate: float = 10_000.0, merged: bool = False) -> Ingested:
    """Read, number and deal the dataset into pieces per (source, chunk), cached (see the module docstring);
    ``merged`` also keeps every chunk whole, for the groupings routed in one partition. Every piece carries its
    keys' 64-bit fingerprints; the routing trusts them only where the counts found no collision
    (:func:`count_keys`)."""
    from pyspark import StorageLevel

    chunks, n_input = spark_chunks(spark, dataset, partitions)
    chunks = chunks.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        sizes = sorted(chunks.map(lambda c: (c.part, len(c.rec_len), len(c.key_ids))).collect())
    except Exception as exc:
        failure = read_failure(exc, dataset)
        if failure is None:
            raise
        raise failure from None
    records = sum(r for _, r, _ in sizes)
    messages = sum(m for _, _, m in sizes)
    if messages == 0:
        chunks.unpersist()
        raise DatasetError(f"dataset {dataset.spec!r} has no records (empty file or no keys in it)")
    offsets: dict[tuple[int, int], tuple[int, int]] = {}
    rec0 = seq0 = 0
    for part, r, m in sizes:
        offsets[part] = (rec0, seq0)
        rec0 += r
        seq0 += m

    def deal(chunk: Chunk, whole: bool) -> Iterator:
        return deal_chunk(chunk, *offsets[chunk.part], sources, split, merged=whole, hashed=True)

    # Not cached: the first job that routes runs the deal's shuffle, and every later one reads its files again
    # (Spark keeps a shuffle's output while its RDD lives), without a pass that only fills a cache.
    streams = chunks.flatMap(lambda c: deal(c, False)).partitionBy(sources, lambda s: s)
    whole = chunks.flatMap(lambda c: deal(c, True)).partitionBy(1, lambda s: 0) if merged else None
    return Ingested(streams, whole, [part for part, _, _ in sizes], chunks, offsets, rate, records, messages,
                    n_input)


def facts(ing: Ingested) -> None:
    """The dataset fingerprint and whether event times rise, from every chunk's facts (one small job)."""
    offsets, rate = ing.offsets, ing.rate
    found = sorted(ing.chunks.map(lambda c: (len(c.rec_len), len(c.key_ids),
                                             chunk_facts(c, *offsets[c.part], rate))).collect(),
                   key=lambda f: f[2][0])
    fingerprint = Fingerprint()
    for r, m, (_, lanes, _) in found:
        fingerprint.add(r, m, lanes)
    spans = [span for _, _, (_, _, span) in found if span[0] is not None]
    ing.sha256 = fingerprint.hexdigest()
    ing.rising_times = all(span[2] for span in spans) and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))


def count_keys(ing: Ingested, buckets: int, k: int) -> dict:
    """The exact counts (``ing.counts``) and their summary (:func:`spark_replay.key_counts.summary`); sets
    ``ing.hashed``. The counts go by fingerprint (:mod:`spark_replay.key_counts`); if two keys share one, they
    are counted again by name."""
    from pyspark import StorageLevel

    if ing.cached_counts is not None:
        ing.cached_counts.unpersist()
    merged = key_counts.key_counts(ing.chunks, buckets).persist(StorageLevel.MEMORY_AND_DISK)
    info = key_counts.summary(merged, k)
    ing.hashed = info["hashed"]
    if ing.hashed:
        ing.counts, ing.cached_counts = key_counts.pairs(merged), merged
        return info
    merged.unpersist()
    ing.counts = ing.chunks.flatMap(_chunk_counts).reduceByKey(lambda a, b: a + b)
    ing.counts = ing.cached_counts = ing.counts.persist(StorageLevel.MEMORY_AND_DISK)
    parts = ing.counts.mapPartitions(lambda it: [_partition_top(it, max(k, 1))]).collect()
    best = heapq.nsmallest(max(k, 1), (kv for _, kvs in parts for kv in kvs), key=key_counts._rank)
    return {"keys": sum(n for n, _ in parts), "top_k": [[w, c] for w, c in best[:k]], "top_count": best[0][1],
            "hashed": False}


def _partition_top(items: Iterator[tuple[str, int]], k: int) -> tuple[int, list]:
    items = list(items)
    return len(items), heapq.nsmallest(k, items, key=key_counts._rank)


def _chunk_counts(chunk: Chunk) -> Iterator[tuple[str, int]]:
    freq = np.bincount(chunk.key_ids, minlength=len(chunk.vocab)).tolist()
    return zip(chunk.vocab, freq)
