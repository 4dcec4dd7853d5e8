"""The deal: the dataset's chunks on Spark numbered and dealt to S ordered sub-streams, one piece per (source, chunk).

The rules are the stream's (``keysplit.stream``): records are numbered 0, 1, ... in file order (the
records the reader yields, i.e. after ``parse_line`` skipped blank or keyless lines); record ``index`` goes
to source ``source_of(index, first_key, S, split)``; messages (keys) are numbered by ``sequence`` from 0 over
the whole stream, and a message's event time is its record's timestamp or ``sequence / rate``.

A small job gives every chunk (:mod:`spark_replay.chunks`, read by :mod:`spark_replay.sparkinput`) its global
record and message offsets (prefix sums of per-chunk counts, a few numbers per chunk on the driver), and one
shuffle (run by the first job that routes) deals each chunk's messages to the partition of their source. The
chunks stay cached: their share of the dataset fingerprint (:mod:`keysplit.fingerprint`) and the exact counts
(:mod:`spark_replay.key_counts`) are taken from them while the routing jobs (:mod:`spark_replay.routing`) run,
and the topology model (:mod:`spark_replay.model_task`) reads them in sequence order. Nothing of the dataset
itself goes through the driver.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from keysplit.datasets import FileDataset
from keysplit.errors import DatasetError
from keysplit.fingerprint import Fingerprint, chunk_lanes, key_hashes
from keysplit.stream import event_times, key_sources, sources_of
from spark_replay.chunks import Chunk, compact
from spark_replay.key_hashes import key_hashes64
from spark_replay.sparkinput import read_failure, spark_chunks


@dataclass
class SubStream:
    """The ordered messages of one source (or, merged, of several: then ``sources`` is set per message)."""

    source: int
    seq: np.ndarray  # int64, strictly increasing
    key_ids: np.ndarray  # int32 into vocab
    vocab: list[str]
    ts: np.ndarray | None  # float64 per message
    has_ts: np.ndarray | None
    sources: np.ndarray | None = None  # int32 per message, merged streams only
    key_hash: np.ndarray | None = None  # uint64 per vocab entry, set when hashes are collision-free
    rec_len: np.ndarray | None = None  # int32, messages of each of its records (non-empty ones, in order)

    def __len__(self) -> int:
        return len(self.seq)

    def now(self, rate: float) -> np.ndarray:
        """Event time of every message (``keysplit.stream.event_times``)."""
        return event_times(self.seq, rate, self.ts, self.has_ts)


# ------------------------------------------------------------------------------------- sources and order


def deal_chunk(chunk: Chunk, rec0: int, seq0: int, sources: int, split: str, merged: bool = False,
               hashed: bool = False) -> Iterator[tuple[int, tuple[tuple[int, int], SubStream]]]:
    """Give the chunk's messages their global sequence numbers and emit ``(source, (chunk id, piece))``.

    ``keysplit.stream.sources_of``: record ``index`` goes to ``index % S`` (shuffle) or to the murmur3 hash of
    its first key with ``SPLIT_SEED`` mod S (key). Every source gets a piece of every chunk, empty or not, so
    that a routing task knows which chunk comes next. ``merged``: one piece (source 0) with every message
    tagged with its source, for the groupings routed in one partition. ``hashed``: the pieces carry their
    keys' 64-bit hashes (:func:`~spark_replay.key_counts.key_hash64`).
    """
    n_rec = len(chunk.rec_len)
    n_msg = len(chunk.key_ids)
    first_key_sources = None
    if split != "shuffle":  # empty records have no first key; they deal no message
        starts = np.cumsum(chunk.rec_len, dtype=np.int64) - chunk.rec_len
        nonempty = chunk.rec_len > 0
        first_key_sources = np.zeros(n_rec, dtype=np.int64)
        first_key_sources[nonempty] = key_sources(chunk.vocab, sources)[chunk.key_ids[starts[nonempty]]]
    rec_source = sources_of(rec0 + np.arange(n_rec, dtype=np.int64), first_key_sources, sources, split)
    msg_source = np.repeat(rec_source, chunk.rec_len).astype(np.int32)
    seq = seq0 + np.arange(n_msg, dtype=np.int64)
    ts = np.repeat(chunk.ts, chunk.rec_len) if chunk.ts is not None else None
    has_ts = np.repeat(chunk.has_ts, chunk.rec_len) if chunk.has_ts is not None else None
    if merged:
        sub = SubStream(0, seq, chunk.key_ids, chunk.vocab, ts, has_ts, sources=msg_source, rec_len=chunk.rec_len[
            chunk.rec_len > 0])
        sub.key_hash = key_hashes64(chunk.vocab) if hashed else None
        yield 0, (chunk.part, sub)
        return
    hashes = key_hashes64(chunk.vocab) if hashed else None  # once per chunk, not once per piece
    for s in range(sources):
        mask = msg_source == s
        used, local = compact(chunk.key_ids[mask], len(chunk.vocab))
        sub = SubStream(s, seq[mask], local.astype(np.int32).reshape(-1), [chunk.vocab[i] for i in used.tolist()],
                        ts[mask] if ts is not None else None, has_ts[mask] if has_ts is not None else None,
                        rec_len=chunk.rec_len[(rec_source == s) & (chunk.rec_len > 0)],
                        key_hash=hashes[used] if hashes is not None else None)
        yield s, (chunk.part, sub)


def chunk_facts(chunk: Chunk, rec0: int, seq0: int, rate: float) -> tuple[tuple[int, int], tuple[int, int], tuple]:
    """What the driver learns of a chunk once its offsets are known: its share of the dataset fingerprint, and
    its first and last event time and whether they rise within it (Lindley can then stream chunk by chunk)."""
    lanes = chunk_lanes(key_hashes(chunk.vocab), chunk.key_ids, chunk.rec_len, seq0, rec0, chunk.ts, chunk.has_ts)
    n = len(chunk.key_ids)
    if n == 0:
        return chunk.part, lanes, (None, None, True)
    timed = chunk.ts is not None
    now = event_times(seq0 + np.arange(n, dtype=np.int64), rate, np.repeat(chunk.ts, chunk.rec_len) if timed else None,
                      np.repeat(chunk.has_ts, chunk.rec_len) if timed else None)
    rising = bool(np.all(now[1:] >= now[:-1]))
    return chunk.part, lanes, (float(now[0]), float(now[-1]), rising)


# ------------------------------------------------------------------------------------------- on Spark


@dataclass
class Ingested:
    """The dataset on Spark: its pieces (cached), their order, the exact counts, its size and fingerprint.

    The pieces are dealt by the first job that routes them; the chunks stay cached for :func:`facts` (the
    fingerprint, whether event times rise), :func:`spark_replay.key_counts.count_keys` (the exact counts, whether
    the keys' 64-bit hashes are collision-free), which the replay runs beside the routing, and the topology
    model (:func:`spark_replay.model_task.estimate_from_chunks`)."""

    streams: Any  # RDD[(source, (chunk id, SubStream))], partition s = source s
    merged: Any  # RDD[(0, (chunk id, SubStream))] in one partition (every source), or None
    order: list[tuple[int, int]]  # every chunk id, in sequence order
    chunks: Any  # RDD[Chunk], cached (the facts, the counts and the topology model read it)
    offsets: dict[tuple[int, int], tuple[int, int]]  # chunk id -> (first record, first message)
    rate: float
    records: int
    messages: int
    partitions: int
    counts: Any = None  # RDD[(key, count)], set by key_counts.count_keys
    sha256: str = ""  # set by facts
    rising_times: bool = True  # event times never decrease along the stream (set by facts)
    hashed: bool | None = None  # the keys' 64-bit hashes are collision-free (None: not checked yet)
    cached_counts: Any = None  # the cached RDD behind ``counts``

    def unpersist(self) -> None:
        for rdd in (self.chunks, self.cached_counts):
            if rdd is not None:
                rdd.unpersist()


def ingest(spark: Any, dataset: FileDataset, sources: int, split: str, partitions: int | None = None,
           rate: float = 10_000.0, merged: bool = False) -> Ingested:
    """Read, number and deal the dataset into pieces per (source, chunk), cached (see the module docstring);
    ``merged`` also keeps every chunk whole, for the groupings routed in one partition. Every piece carries its
    keys' 64-bit hashes; the routing trusts them only where the counts found no collision
    (:func:`spark_replay.key_counts.count_keys`)."""
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
