"""Plain ``text:`` lines (and ``csv:`` or ``edges:`` ones) into the replay's chunks without a Python object per
word.

Spark's text source hands the lines over as Arrow binary arrays: their data and offsets buffers are exactly
what :meth:`keysplit.simulator.tokenize.Interner.lines` scans, so the words are found and interned by the
compiled tokenizer (the reader's words on every line, ``tests/simulator/test_tokenize.py``) and only each chunk's
distinct words become Python strings. The chunks are those :class:`~spark_replay.chunks.ChunkBuilder` cuts
from the same records: a chunk ends with the first record that brings it to ``limit`` messages.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np

from keysplit.datasets.readers import FileDataset
from keysplit.simulator.columns import ColumnScanner, is_plain_column
from keysplit.simulator.tokenize import Interner
from spark_replay.chunks import CHUNK_MESSAGES, Chunk, compact

#: One run of lines -> (ids, records per line, ...), interning into the interner given.
Scan = Callable[[Interner, np.ndarray, np.ndarray], tuple]


def _words(words: Interner, data: np.ndarray, offsets: np.ndarray) -> tuple:
    return words.lines(data, offsets)


def scanner_for(dataset: FileDataset | None, at: int) -> Scan:
    """The compiled reader of the split starting at byte ``at``: the tokenizer for ``text:``, the key column
    for ``csv:`` and ``edges:`` (:mod:`keysplit.simulator.columns`; a CSV's header is in the split at 0, and
    errors name no line, as the row path's)."""
    if dataset is not None and is_plain_column(dataset):
        return ColumnScanner(dataset, at_start=at == 0, numbered=False).block
    return _words


class TextChunker:
    """The chunks of one split's lines, fed as runs of lines in file order."""

    def __init__(self, part: int, limit: int = CHUNK_MESSAGES, scan: Scan = _words) -> None:
        self.part, self.limit, self.number = part, limit, 0
        self.scan = scan
        self.words = Interner()  # one split's words (a split is at most SLICE_BYTES: bounded)
        self.ids: list[np.ndarray] = []
        self.lens: list[np.ndarray] = []
        self.messages = 0

    def add(self, data: np.ndarray, offsets: np.ndarray) -> Iterator[Chunk]:
        """Take the lines ``data[offsets[j]:offsets[j + 1]]``; yield every chunk that fills up."""
        ids, rec_len, _ = self.scan(self.words, data, offsets)
        counts = rec_len[rec_len > 0]  # lines without words are not records
        while len(counts):
            ends = np.cumsum(counts, dtype=np.int64)
            last = int(np.searchsorted(ends, self.limit - self.messages))  # the record that fills the chunk
            if last == len(counts):
                self._keep(ids, counts)
                return
            taken = int(ends[last])
            self._keep(ids[:taken], counts[: last + 1])
            yield self._take()
            ids, counts = ids[taken:], counts[last + 1:]

    def finish(self) -> Iterator[Chunk]:
        """The last, partly filled chunk (if any record is left)."""
        if self.lens:
            yield self._take()

    def _keep(self, ids: np.ndarray, counts: np.ndarray) -> None:
        self.ids.append(ids)
        self.lens.append(counts)
        self.messages += len(ids)

    def _take(self) -> Chunk:
        used, local = compact(np.concatenate(self.ids), self.words.size)
        chunk = Chunk(part=(self.part, self.number), vocab=self.words.names_of(used),
                      key_ids=local.astype(np.int32).reshape(-1), rec_len=np.concatenate(self.lens).astype(np.int32),
                      ts=None, has_ts=None)
        self.number += 1
        self.ids, self.lens, self.messages = [], [], 0
        return chunk


def plain_text_chunks(runs: Iterator[tuple[int, np.ndarray, np.ndarray]], limit: int = CHUNK_MESSAGES,
                      dataset: FileDataset | None = None) -> Iterator[Chunk]:
    """The chunks of runs ``(split start, data, offsets)`` of lines, each split's lines in order: a ``text:``
    file's words, or (``dataset`` a ``csv:`` or ``edges:`` file) its key column."""
    chunker: TextChunker | None = None
    for at, data, offsets in runs:
        if chunker is None or chunker.part != at:
            if chunker is not None:
                yield from chunker.finish()
            chunker = TextChunker(at, limit, scanner_for(dataset, at))
        yield from chunker.add(data, offsets)
    if chunker is not None:
        yield from chunker.finish()


def byte_runs(runs: Iterator[tuple[int, list]]) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Runs of lines given row by row (``(split start, [lines])`` of bytes) as data and offsets."""
    for at, (lines,) in runs:
        lines = [bytes(line) for line in lines]
        offsets = np.zeros(len(lines) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, lines), dtype=np.int64, count=len(lines)), out=offsets[1:])
        yield at, np.frombuffer(b"".join(lines), dtype=np.uint8), offsets


def arrow_runs(batches: Iterator) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Runs of lines of one split each from Arrow batches ``(line binary, split start)``, zero-copy: the
    binary column's own data buffer and offsets."""
    import pyarrow as pa

    for batch in batches:
        at = batch.column(1).to_numpy(zero_copy_only=False)
        cuts = [0, *(np.flatnonzero(at[1:] != at[:-1]) + 1).tolist(), len(at)]
        column = batch.column(0)
        _, offset_buffer, data_buffer = column.buffers()
        wide = pa.types.is_large_binary(column.type)
        all_offsets = np.frombuffer(offset_buffer, dtype=np.int64 if wide else np.int32)
        data = np.frombuffer(data_buffer, dtype=np.uint8) if data_buffer is not None else np.zeros(0, np.uint8)
        for lo, hi in itertools.pairwise(cuts):
            offsets = all_offsets[column.offset + lo: column.offset + hi + 1].astype(np.int64)
            yield int(at[lo]), data, offsets
