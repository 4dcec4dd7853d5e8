"""Reading a dataset on Spark partitions, numbering its messages, and dealing them to S ordered sub-streams.

The rules are the stream's (``keysplit.stream``): records are numbered 0, 1, ... in file order (the
records the reader yields, i.e. after ``parse_line`` skipped blank or keyless lines); record ``index`` goes
to source ``source_of(index, first_key, S, split)``; messages (keys) are numbered by ``sequence`` from 0 over
the whole stream, and a message's event time is its record's timestamp or ``sequence / rate``.

Reading is Spark's (:mod:`spark_replay.sparkinput`: every split of the file read by one task, in file order;
plain text lines tokenized by :mod:`spark_replay.text_input`); this module cuts what a task reads into chunks of
at most :data:`CHUNK_MESSAGES` messages (:class:`ChunkBuilder`: memory per task does not grow with the dataset).
A small job then gives every chunk its global record and message offsets (prefix sums of per-chunk counts, a few
numbers per chunk on the driver) and its share of the dataset fingerprint (:mod:`keysplit.fingerprint`), and one
shuffle deals each chunk's messages to the partition of their source (:func:`deal_chunk`, the rules of
``keysplit.stream``), as one piece per (source, chunk). A routing task then takes its pieces in chunk order
(:mod:`spark_replay.ordered`), one at a time. Nothing of the dataset itself goes through the driver.
"""

from __future__ import annotations

import math
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import mmh3
import numpy as np

from keysplit.datasets import Dataset, FileDataset, open_dataset, write_dataset
from keysplit.datasets.readers import ParquetDataset, bounded_lines, open_binary
from keysplit.errors import DatasetError
from keysplit.fingerprint import RecordColumns, chunk_lanes, key_hashes
from keysplit.hashing import BASE_SEED
from keysplit.stream import event_times, key_sources, sources_of

#: Seed of the 64-bit key fingerprints the replay uses to merge per-key state across partitions.
KEY_HASH_SEED = BASE_SEED + 700

#: Target bytes per input partition of an uncompressed file.
SLICE_BYTES = 8 << 20
#: Most messages in one chunk (a unit of parsing, shuffling and routing; bounds a task's memory).
CHUNK_MESSAGES = 1 << 19


@dataclass
class Chunk:
    """Consecutive records of one input partition, in file order: keys as ids into ``vocab``."""

    part: tuple[int, int]  # (input partition, chunk number inside it): chunks sort in file order
    vocab: list[str]
    key_ids: np.ndarray  # int32, one per message
    rec_len: np.ndarray  # int32, keys per record
    ts: np.ndarray | None  # float64 per record (0 where absent), None when no record has one
    has_ts: np.ndarray | None  # bool per record


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


# ----------------------------------------------------------------------------------------------- reading


def decode_line(data: bytes) -> str:
    """One line as :meth:`FileDataset.lines` decodes it (invalid UTF-8 replaced, line end stripped)."""
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError:
        line = data.decode("utf-8", errors="replace")
    return line.rstrip("\r\n")


def read_range(path: str, start: int, end: int) -> Iterator[str]:
    """The decoded lines that start at a byte offset in ``[start, end)`` of an uncompressed file."""
    with open(path, "rb") as fh:
        if start > 0:
            fh.seek(start - 1)
            fh.readline()  # the line that started before ``start`` belongs to the previous range
        pos = fh.tell()
        lines = bounded_lines(fh, path, numbered=start == 0)
        while pos < end:
            data = next(lines, b"")
            if not data:
                break
            pos += len(data)
            yield decode_line(data)


def read_gzip(path: str) -> Iterator[str]:
    try:
        with open_binary(path) as raw:
            for data in bounded_lines(raw, path):
                yield decode_line(data)
    except (OSError, EOFError, zlib.error) as exc:  # as FileDataset.lines: truncated, bad CRC, bad deflate data
        raise DatasetError(f"cannot read dataset file {path}: corrupt gzip data ({exc})") from None


@dataclass
class Slice:
    """One input partition: a byte range of a text file, the whole of a gzip file, or Parquet row groups."""

    part: int
    start: int = 0
    end: int = 0
    gzip: bool = False
    row_groups: tuple[int, ...] = ()


def plan_slices(dataset: FileDataset, partitions: int | None, parallelism: int) -> list[Slice]:
    """Cut the file into input partitions (``partitions`` forces the number for byte ranges)."""
    path = dataset.path
    if isinstance(dataset, ParquetDataset):
        groups = dataset._file.num_row_groups
        n = max(1, min(groups, partitions or parallelism))
        bounds = [groups * i // n for i in range(n + 1)]
        return [Slice(i, row_groups=tuple(range(bounds[i], bounds[i + 1]))) for i in range(n)]
    with open(path, "rb") as fh:
        if fh.read(2) == b"\x1f\x8b":
            return [Slice(0, gzip=True)]
    size = os.path.getsize(path)
    n = partitions or max(parallelism, math.ceil(size / SLICE_BYTES))
    n = max(1, min(n, size))
    bounds = [size * i // n for i in range(n + 1)]
    return [Slice(i, bounds[i], bounds[i + 1]) for i in range(n)]


def executor_dataset(dataset: FileDataset) -> Any:
    """What a task needs to re-create the reader: the dataset itself, or for Parquet its (path, key, time)."""
    if isinstance(dataset, ParquetDataset):
        return ("parquet", dataset.path, dataset.key_column, dataset.time_column)
    return dataset


def parse_slice(reader: Any, piece: Slice) -> list[Chunk]:
    """Every chunk of one input partition (eagerly; the job streams :func:`slice_chunks`)."""
    return list(slice_chunks(reader, piece))


class ChunkBuilder:
    """Records in file order, cut into :class:`Chunk` s of about ``limit`` messages numbered ``(part, 0), (part,
    1), ...``: the one way every reader turns records into chunks."""

    def __init__(self, part: int, limit: int = CHUNK_MESSAGES) -> None:
        self.part, self.limit, self.number = part, limit, 0
        self._reset()

    def _reset(self) -> None:
        self.cols = RecordColumns()

    def add(self, records: Iterable) -> Iterator[Chunk]:
        """Take records ``(ts, keys)``; yield every chunk that fills up."""
        for ts, keys in records:
            self.cols.add(ts, keys)
            if len(self.cols.ids) >= self.limit:
                yield self._take()

    def finish(self) -> Iterator[Chunk]:
        """The last, partly filled chunk (if any record is left)."""
        if self.cols.lengths:
            yield self._take()

    def _take(self) -> Chunk:
        c = self.cols
        chunk = Chunk(
            part=(self.part, self.number),
            vocab=list(c.vocab),
            key_ids=np.asarray(c.ids, dtype=np.int32),
            rec_len=np.asarray(c.lengths, dtype=np.int32),
            ts=np.asarray(c.times, dtype=np.float64) if c.any_ts else None,
            has_ts=np.asarray(c.timed, dtype=bool) if c.any_ts else None,
        )
        self.number += 1
        self._reset()
        return chunk


def slice_chunks(reader: Any, piece: Slice, limit: int = CHUNK_MESSAGES) -> Iterator[Chunk]:
    """Parse one input partition with the reader's ``parse_line`` into chunks of about ``limit`` messages."""
    if isinstance(reader, tuple):
        records: Iterator = _parquet_records(ParquetDataset(*reader[1:]), piece.row_groups)
    else:
        lines = read_gzip(reader.path) if piece.gzip else read_range(reader.path, piece.start, piece.end)
        if reader.skip_header and piece.start == 0:
            next(lines, None)
        records = filter(None, map(reader.parse_line, lines))
    builder = ChunkBuilder(piece.part, limit)
    yield from builder.add(records)
    yield from builder.finish()


def _parquet_records(dataset: ParquetDataset, groups: tuple[int, ...]) -> Iterator:
    import pyarrow as pa

    for g in groups:
        try:
            table = dataset._file.read_row_group(g, columns=dataset.columns)
        except (OSError, pa.ArrowException) as exc:  # pages that do not decode under a valid footer
            raise DatasetError(f"cannot read Parquet file {dataset.path}: {exc}") from None
        yield from dataset.table_records(table)


# ------------------------------------------------------------------------------------- sources and order


def deal_chunk(chunk: Chunk, rec0: int, seq0: int, sources: int, split: str, merged: bool = False,
               hashed: bool = False) -> Iterator[tuple[int, tuple[tuple[int, int], SubStream]]]:
    """Give the chunk's messages their global sequence numbers and emit ``(source, (chunk id, piece))``.

    ``keysplit.stream.sources_of``: record ``index`` goes to ``index % S`` (shuffle) or to the murmur3 hash of
    its first key with ``SPLIT_SEED`` mod S (key). Every source gets a piece of every chunk, empty or not, so
    that a routing task knows which chunk comes next. ``merged``: one piece (source 0) with every message
    tagged with its source, for the groupings routed in one partition. ``hashed``: the pieces carry their
    keys' 64-bit fingerprints (:func:`key_fingerprint`).
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
        sub.key_hash = fingerprints(chunk.vocab) if hashed else None
        yield 0, (chunk.part, sub)
        return
    hashes = fingerprints(chunk.vocab) if hashed else None  # once per chunk, not once per piece
    for s in range(sources):
        mask = msg_source == s
        used, local = compact(chunk.key_ids[mask], len(chunk.vocab))
        sub = SubStream(s, seq[mask], local.astype(np.int32).reshape(-1), [chunk.vocab[i] for i in used.tolist()],
                        ts[mask] if ts is not None else None, has_ts[mask] if has_ts is not None else None,
                        rec_len=chunk.rec_len[(rec_source == s) & (chunk.rec_len > 0)],
                        key_hash=hashes[used] if hashes is not None else None)
        yield s, (chunk.part, sub)


def compact(ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(ids, return_inverse=True)`` for ids below ``size``, without a sort: the ids used, ascending,
    and every id's rank among them (O(len(ids) + size), for pieces much larger than their vocabulary)."""
    seen = np.zeros(size, dtype=bool)
    seen[ids] = True
    rank = np.cumsum(seen, dtype=np.int64) - 1
    return np.flatnonzero(seen), rank[ids]


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


def key_fingerprint(key: str) -> int:
    """A key's 64-bit murmur3 fingerprint (only trusted after the ingest checked there is no collision)."""
    return mmh3.hash64(key, KEY_HASH_SEED, signed=False)[0]


def fingerprints(vocab: list[str]) -> np.ndarray:
    """:func:`key_fingerprint` of every key, as uint64."""
    return np.fromiter((key_fingerprint(k) for k in vocab), dtype=np.uint64, count=len(vocab))


# ------------------------------------------------------------------------------------------- the job


def is_uri(path: str) -> bool:
    """A path with a scheme (``hdfs://``, ``s3a://``, ``file:``) rather than a local file name."""
    head = path.split("/", 1)[0]
    return ":" in head and len(head.split(":", 1)[0]) > 1


def materialise(dataset: Dataset, out_dir: str) -> FileDataset:
    """A file dataset for ``dataset``: itself, or a generator written out first as ``out_dir/dataset.csv``."""
    if isinstance(dataset, FileDataset):
        if not is_uri(dataset.path):
            dataset.path = os.path.abspath(dataset.path)
        return dataset
    os.makedirs(out_dir, exist_ok=True)
    spec, _ = write_dataset(dataset, os.path.join(out_dir, "dataset.csv"))
    written = open_dataset(spec)
    assert isinstance(written, FileDataset)
    return written
