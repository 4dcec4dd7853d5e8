"""The key column of ``csv:`` and ``edges:`` files for many lines at once, compiled, equal to their readers.

``CsvDataset.parse_line`` and ``EdgeDataset.parse_line`` stay the definition. The kernel
:func:`~keysplit.simulator.tokenize_kernel._scan_columns` takes the lines its byte rules cover (edges: pure
ASCII; CSV: printable ASCII without a double quote, which the csv module splits at every comma) and marks the
others, which are decoded as :meth:`FileDataset.lines` decodes them and given to the reader's own
``parse_line`` here, so every line's key, and every count the reader reports (invalid UTF-8, skipped, ragged
rows, empty keys), equal the reader's (``tests/simulator/test_columns.py``). Keys are interned by the tokenizer's table
(:class:`~keysplit.simulator.tokenize.Interner`, not lowered), so Python meets each distinct key once.

A CSV with a time column is not taken here (its times need Python's ``float``): it stays on the records path.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from keysplit.datasets.readers import CsvDataset, EdgeDataset, FileDataset
from keysplit.errors import DatasetError
from keysplit.simulator.tokenize import Interner, decode
from keysplit.simulator.tokenize_kernel import (
    COL_EMPTY,
    COL_OTHER,
    COL_RAGGED,
    COL_RECORD,
    COL_SKIP,
    _intern_spans,
    _scan_columns,
)


@dataclass
class Counts:
    """What a reader counts over one pass, summed over blocks: the numbers its ``report`` warns about."""

    invalid: int = 0  #: lines that were not valid UTF-8
    skipped: int = 0  #: lines without a record
    ragged: int = 0  #: CSV rows of another width than the header's
    first_ragged: int | None = None  #: the line number of the first of them
    empty: int = 0  #: CSV rows with an empty key

    def add(self, other: Counts) -> None:
        self.invalid += other.invalid
        self.skipped += other.skipped
        self.ragged += other.ragged
        self.empty += other.empty
        if self.first_ragged is None:
            self.first_ragged = other.first_ragged


def finish(dataset: FileDataset, counts: Counts) -> None:
    """Leave the pass's counts on ``dataset`` as its ``records`` would, and let it report them."""
    dataset.invalid_utf8_lines, dataset.skipped_lines = counts.invalid, counts.skipped
    if isinstance(dataset, CsvDataset):
        dataset.ragged_rows, dataset.first_ragged, dataset.empty_keys = counts.ragged, counts.first_ragged, counts.empty
    dataset.report()


def is_plain_column(dataset: object) -> bool:
    """An ``edges:`` file, or a ``csv:`` file without a time column, read by the stock reader."""
    kind = type(dataset)
    return kind is EdgeDataset or (kind is CsvDataset and dataset.time_column is None)  # type: ignore[attr-defined]


class ColumnScanner:
    """The keys of a ``csv:`` or ``edges:`` file block by block, as ids of one :class:`Interner`."""

    def __init__(self, dataset: FileDataset, at_start: bool = True, numbered: bool = True) -> None:
        """``at_start``: the blocks start at the file's first line (a CSV's header is skipped); ``numbered``: a
        reader's error names its line (the replay's splits do not know their first line's number)."""
        self.dataset = dataset
        self.csv = isinstance(dataset, CsvDataset)
        self.header = self.csv and at_start
        self.numbered = numbered
        self.line = 0  #: lines before the next block (of the file when ``at_start``)

    def block(self, words: Interner, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, Counts]:
        """The key ids of one block of lines (blocks in file order), one per record; a line's record count
        (0 or 1) and the block's counts. The CSV header, the file's first line, is not a record."""
        if self.header and len(offsets) > 1:
            offsets = offsets[1:]
            self.line, self.header = 1, False
        n = len(offsets) - 1
        starts, ends = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        status = np.empty(n, dtype=np.int8)
        ds = self.dataset
        _scan_columns(data, offsets, self.csv, getattr(ds, "width", 0), getattr(ds, "key_index", 0), starts, ends,
                      status)
        counts = Counts()
        extra = self._other_lines(data, offsets, status, starts, ends, counts)
        if extra:  # the other lines' keys, appended after the block's bytes
            data = np.concatenate((data, np.frombuffer(extra, dtype=np.uint8)))
        ragged = np.flatnonzero(status == COL_RAGGED)
        counts.ragged += len(ragged)
        if len(ragged) and counts.first_ragged is None:
            counts.first_ragged = self.line + int(ragged[0]) + 1
        counts.empty += int(np.count_nonzero(status == COL_EMPTY))
        records = status == COL_RECORD
        counts.skipped = n - int(np.count_nonzero(records))
        self.line += n
        return self._intern(words, data, starts[records], ends[records]), records.astype(np.int32), counts

    def _other_lines(self, data: np.ndarray, offsets: np.ndarray, status: np.ndarray, starts: np.ndarray,
                     ends: np.ndarray, counts: Counts) -> bytes:
        """Give the lines marked ``COL_OTHER`` to the reader's ``parse_line``; their keys' bytes, for spans
        past the block's end (statuses and spans set in place)."""
        ds, keys, at = self.dataset, [], len(data)
        for j in np.flatnonzero(status == COL_OTHER).tolist():
            line, bad = decode(data[offsets[j]:offsets[j + 1]].tobytes())
            counts.invalid += bad
            number = self.line + j + 1
            ds.line_number = number  # where the reader notes its first ragged row
            ragged, empty = getattr(ds, "ragged_rows", 0), getattr(ds, "empty_keys", 0)
            try:
                record = ds.parse_line(line.rstrip("\r\n"))
            except DatasetError as exc:
                raise (ds.at(exc, f"line {number}") if self.numbered else exc) from None
            if getattr(ds, "ragged_rows", 0) > ragged:
                status[j] = COL_RAGGED
            elif getattr(ds, "empty_keys", 0) > empty:
                status[j] = COL_EMPTY
            elif record is None:
                status[j] = COL_SKIP  # blank, a comment, too few fields
            else:
                key = record[1][0].encode("utf-8")
                keys.append(key)
                starts[j], ends[j], status[j] = at, at + len(key), COL_RECORD
                at += len(key)
        return b"".join(keys)

    @staticmethod
    def _intern(words: Interner, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        ids = np.empty(len(starts), dtype=np.int32)
        state = np.array([words.size], dtype=np.int64)
        k = 0
        while True:
            k = _intern_spans(buf, starts, ends, k, words.slots, words.vhash, words.pool, words.pstarts, state, ids)
            words.size = int(state[0])
            if k == len(starts):
                return ids
            words._grow(1, int(ends[k] - starts[k]))
