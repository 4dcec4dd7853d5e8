"""The dataset on Spark as S ordered sub-streams: read (:mod:`spark_replay.sparkinput`), numbered and dealt
(:mod:`spark_replay.ingest`'s rules) into one cached piece per (source, chunk).

A small job gives every chunk its global record and message offsets (prefix sums of per-chunk counts, a few
numbers per chunk on the driver) and its share of the dataset fingerprint (:mod:`keysplit.fingerprint`), and
one shuffle deals each chunk's messages to the partition of their source. Nothing of the dataset itself goes
through the driver.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from keysplit.datasets import FileDataset
from keysplit.errors import DatasetError
from keysplit.fingerprint import Fingerprint
from spark_replay.ingest import Chunk, chunk_facts, deal_chunk, fingerprints
from spark_replay.sparkinput import read_failure, spark_chunks


@dataclass
class Ingested:
    """The dataset on Spark: its pieces (cached), their order, the exact counts, its size and fingerprint."""

    streams: Any  # RDD[(source, (chunk id, SubStream))], partition s = source s
    merged: Any  # RDD[(0, (chunk id, SubStream))] in one partition (every source), or None
    order: list[tuple[int, int]]  # every chunk id, in sequence order
    counts: Any  # RDD[(key, count)]
    records: int
    messages: int
    partitions: int
    sha256: str
    rising_times: bool  # event times never decrease along the stream

    def unpersist(self) -> None:
        for rdd in (self.streams, self.merged, self.counts):
            if rdd is not None:
                rdd.unpersist()


def ingest(spark: Any, dataset: FileDataset, sources: int, split: str, partitions: int | None = None,
           rate: float = 10_000.0, merged: bool = False) -> Ingested:
    """Read, number and deal the dataset into pieces per (source, chunk), cached (see the module docstring);
    ``merged`` also keeps every chunk whole, for the groupings routed in one partition."""
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
    facts = sorted(chunks.map(lambda c: chunk_facts(c, *offsets[c.part], rate)).collect())
    fingerprint = Fingerprint()
    for (_part, r, m), (_, lanes, _) in zip(sizes, facts):
        fingerprint.add(r, m, lanes)
    spans = [span for _, _, span in facts if span[0] is not None]
    rising = all(span[2] for span in spans) and all(a[1] <= b[0] for a, b in itertools.pairwise(spans))

    counts = chunks.flatMap(_chunk_counts).reduceByKey(lambda a, b: a + b).persist(StorageLevel.MEMORY_AND_DISK)
    # Fingerprints stand in for keys only when no two distinct keys share one (checked, not assumed): one job
    # brings every key's fingerprint (8 bytes a key) to the driver, instead of a count and a distinct shuffle.
    hashes = counts.mapPartitions(lambda kvs: [fingerprints([k for k, _ in kvs])]).collect()
    everyone = np.concatenate(hashes) if hashes else np.zeros(0, dtype=np.uint64)
    hashed = len(np.unique(everyone)) == len(everyone)

    def deal(chunk: Chunk, whole: bool) -> Iterator:
        return deal_chunk(chunk, *offsets[chunk.part], sources, split, merged=whole, hashed=hashed)

    streams = chunks.flatMap(lambda c: deal(c, False)).partitionBy(sources, lambda s: s)
    streams = streams.persist(StorageLevel.MEMORY_AND_DISK)
    streams.count()  # materialise the cache before the chunks go
    whole = None
    if merged:
        whole = chunks.flatMap(lambda c: deal(c, True)).partitionBy(1, lambda s: 0)
        whole = whole.persist(StorageLevel.MEMORY_AND_DISK)
        whole.count()
    chunks.unpersist()
    return Ingested(streams, whole, [part for part, _, _ in sizes], counts, records, messages, n_input,
                    fingerprint.hexdigest(), rising)


def _chunk_counts(chunk: Chunk) -> Iterator[tuple[str, int]]:
    freq = np.bincount(chunk.key_ids, minlength=len(chunk.vocab)).tolist()
    return zip(chunk.vocab, freq)
