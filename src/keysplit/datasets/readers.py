"""Streaming readers of dataset files: ``text:PATH``, ``edges:PATH``, ``csv:PATH,key=COL[,time=COL]``,
``parquet:PATH,key=COL[,time=COL]``. Gzip input is detected by its magic bytes and read transparently.

Each reader parses one line at a time with a pure ``parse_line`` (the Spark replay calls the same
function on its partitions), so a file and its replay agree record for record. A line ``parse_line``
cannot take raises a DatasetError naming the file (``PATH: problem``); it cannot know the line number, which
:meth:`FileDataset.records` adds (``PATH line N: problem``). Lines that are not valid
UTF-8 are decoded with U+FFFD replacements and counted; the count is reported as a warning when the
stream ends, together with the count of records skipped (no key, or an empty key).
"""

from __future__ import annotations

import csv
import gzip
import math
import os
import re
import stat
import zlib
from collections.abc import Iterator
from typing import IO

from keysplit.datasets.base import Dataset, Record, clean_key, log
from keysplit.errors import DatasetError

# A word: letters and digits, with inner apostrophes ("don't", "l'homme"); underscores split words.
WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")

#: A UTF-8 byte-order mark, which some editors put at the start of a file: not part of the first line's text.
BOM = "\ufeff"

# The csv module refuses fields over 128 KiB, a guard against a stray quote swallowing the rest of a file. Rows
# here are parsed one line at a time, so the line bounds a field anyway; the limit only refused long but
# legitimate fields (a JSON payload column). Set at import, so Spark executors parse with the same limit.
csv.field_size_limit(max(csv.field_size_limit(), 16 << 20))


#: The longest line a reader takes (a line is one record, one spout tuple): a file with no line end (a binary
#: file, ``/dev/zero`` saved to disk) would otherwise be read whole into memory; the csv module's field limit.
MAX_LINE_BYTES = 16 << 20

_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def check_file(path: str) -> None:
    """A one-line DatasetError when ``path`` is missing, a directory, not a regular file (a FIFO, a device:
    a dataset is read more than once, and /dev/zero never ends), unreadable or empty."""
    if not os.path.exists(path):
        raise DatasetError(f"dataset file not found: {path}")
    if os.path.isdir(path):
        raise DatasetError(f"dataset path is a directory, not a file: {path}")
    mode = os.stat(path).st_mode
    for test, kind in _KINDS:
        if test(mode):
            raise DatasetError(f"dataset path {path} is {kind}, not a regular file: keysplit reads a dataset more "
                               "than once (counting, then routing); save it to a file first")
    if not os.access(path, os.R_OK):
        raise DatasetError(f"dataset file is not readable (permission denied): {path}")
    if os.path.getsize(path) == 0:
        raise DatasetError(f"dataset file is empty: {path}")


def bounded_lines(raw: IO[bytes], path: str, numbered: bool = True) -> Iterator[bytes]:
    """The lines of ``raw`` (line ends kept), each read with at most :data:`MAX_LINE_BYTES` + 1 bytes in memory:
    a longer line is a one-line DatasetError (naming its number when ``raw`` is read from the start), never a
    whole file in memory."""
    number = 0
    while True:
        data = raw.readline(MAX_LINE_BYTES + 1)
        if not data:
            return
        number += 1
        if len(data) > MAX_LINE_BYTES and data[-1:] != b"\n":
            where = f" line {number}" if numbered else ""
            raise DatasetError(f"{path}{where}: a line longer than {MAX_LINE_BYTES >> 20} MiB (a line is one record, "
                               "one spout tuple); is it a text file with line ends?")
        yield data


def open_binary(path: str) -> IO[bytes]:
    """The file's bytes, gunzipped when it starts with the gzip magic number."""
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


#: How much of a file :func:`refuse_binary` reads, and the share of its bytes that may be neither text nor
#: valid UTF-8 before the file is taken for a binary one. Perl's ``-B`` test takes a third of odd bytes for
#: binary; a text file with a few hostile bytes (NUL, controls, invalid UTF-8 in a line or two) stays far
#: below it, and random or compressed bytes (an image, an archive, an executable) are far above.
BINARY_SAMPLE = 8192
BINARY_SHARE = 1 / 3
_CONTROL = bytes(set(range(32)) - set(b"\t\n\r\f\v\b\x1b") | {127})


def refuse_binary(path: str, kind: str) -> None:
    """A one-line DatasetError when the start of ``path`` (gunzipped) is mostly bytes no text file holds: a
    binary file would otherwise be read as lines of replacement characters and "counted"."""
    try:
        with open_binary(path) as raw:
            sample = raw.read(BINARY_SAMPLE)
    except (OSError, EOFError, zlib.error):  # a corrupt gzip: reading the records reports it in its own words
        return
    if not sample:
        return
    odd = len(sample) - len(sample.translate(None, _CONTROL))
    # invalid UTF-8, counted by sequence (a U+FFFD the file itself holds is text)
    odd += sample.decode("utf-8", errors="replace").count("\ufffd") - sample.count("\ufffd".encode())
    if odd > BINARY_SHARE * len(sample):
        raise DatasetError(f"dataset file {path} is not text ({odd:,} of its first {len(sample):,} bytes are "
                           f"control bytes or invalid UTF-8); {kind}: reads UTF-8 text lines")


class FileDataset(Dataset):
    """A dataset read line by line from a (possibly gzipped) file."""

    kind = ""
    skip_header = False
    #: Whether the file is text lines (every reader but Parquet's): a binary file is then refused.
    text_lines = True

    def __init__(self, path: str) -> None:
        self.path = path
        self.spec = f"{self.kind}:{path}"
        self.invalid_utf8_lines = 0
        self.skipped_lines = 0
        check_file(path)
        if self.text_lines:
            refuse_binary(path, self.kind)

    def lines(self) -> Iterator[str]:
        """Decoded lines without their line ends; invalid UTF-8 replaced and counted."""
        self.invalid_utf8_lines = 0
        try:
            with open_binary(self.path) as raw:
                for data in bounded_lines(raw, self.path):
                    try:
                        line = data.decode("utf-8")
                    except UnicodeDecodeError:
                        line = data.decode("utf-8", errors="replace")
                        self.invalid_utf8_lines += 1
                    yield line.rstrip("\r\n")
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise DatasetError(f"cannot read dataset file {self.path}: {exc}") from None
        except zlib.error as exc:  # bad deflate data inside a valid gzip header
            raise DatasetError(f"cannot read dataset file {self.path}: corrupt gzip data ({exc})") from None

    def parse_line(self, line: str) -> Record | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def at(self, exc: DatasetError, place: str) -> DatasetError:
        """``exc``, raised by ``parse_line`` or ``make_record`` as ``PATH: problem``, as ``PATH place: problem``."""
        return DatasetError(str(exc).replace(f"{self.path}: ", f"{self.path} {place}: ", 1))

    def records(self) -> Iterator[Record]:
        self.skipped_lines = 0
        lines = self.lines()
        if self.skip_header:
            next(lines, None)
        for number, line in enumerate(lines, start=2 if self.skip_header else 1):
            self.line_number = number  # for readers that report where a skipped line was
            try:
                record = self.parse_line(line)
            except DatasetError as exc:
                raise self.at(exc, f"line {number}") from None
            if record is None:
                self.skipped_lines += 1
            else:
                yield record
        self.report()

    def report(self) -> None:
        if self.invalid_utf8_lines and not getattr(self, "_utf8_reported", False):  # once, however often it is read
            self._utf8_reported = True
            log.warning("%s: %d line(s) were not valid UTF-8; invalid bytes were replaced by U+FFFD",
                        self.path, self.invalid_utf8_lines)


class TextDataset(FileDataset):
    """``text:PATH``: one record per line, its keys the lower-cased word tokens; lines without words skipped."""

    kind = "text"

    def parse_line(self, line: str) -> Record | None:
        words = WORD.findall(line.lower())
        return (None, words) if words else None


class EdgeDataset(FileDataset):
    """``edges:PATH``: a SNAP-style edge list ``src dst``; key = destination vertex; ``#`` lines skipped."""

    kind = "edges"

    def parse_line(self, line: str) -> Record | None:
        line = line.removeprefix(BOM)  # else a first "# comment" line would not be one
        if not line or line.startswith("#"):
            return None
        fields = line.split()
        if len(fields) < 2:
            return None
        return None, [fields[1]]

    def report(self) -> None:
        super().report()
        malformed = self.skipped_lines
        if malformed:
            log.info("%s: %d comment, blank or malformed line(s) skipped", self.path, malformed)


class _ColumnDataset(FileDataset):
    """Shared key/time column handling of CSV and Parquet."""

    def __init__(self, path: str, key: str, time: str | None = None) -> None:
        self.key_column = key
        self.time_column = time
        super().__init__(path)
        self.spec = f"{self.kind}:{path},key={key}" + (f",time={time}" if time else "")
        self.empty_keys = 0
        self.respaced_keys = 0  # keys whose tab or line break became a space (record text separates keys by tabs)
        self.first_respaced: tuple[int | None, str] | None = None

    def make_record(self, key: str, ts: object) -> Record | None:
        if isinstance(key, str) and ("\t" in key or "\n" in key or "\r" in key) and key.strip("\t\n\r ") != "":
            inner = key.strip()
            if "\t" in inner or "\n" in inner or "\r" in inner:  # it becomes a space: said once (report)
                self.respaced_keys += 1
                if self.first_respaced is None:
                    self.first_respaced = (getattr(self, "line_number", None), inner)
        key = clean_key(key)
        if not key:
            self.empty_keys += 1
            return None
        if self.time_column is None or ts in (None, ""):
            return None, [key]
        try:
            stamp = float(ts)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise DatasetError(f"{self.path}: time column {self.time_column!r} holds {ts!r}, not a number") from None
        if not math.isfinite(stamp):  # inf and nan parse as floats but order no events
            raise DatasetError(f"{self.path}: time column {self.time_column!r} holds {ts}, not a finite number")
        return stamp, [key]

    def report(self) -> None:
        super().report()
        if self.empty_keys:
            log.warning("%s: %d record(s) with an empty key %r were skipped", self.path, self.empty_keys,
                        self.key_column)
        if self.respaced_keys and not getattr(self, "_respaced_reported", False):  # once, however often it is read
            self._respaced_reported = True
            line, key = self.first_respaced  # type: ignore[misc]
            log.warning("%s: %d key(s) of column %r held a tab or line break, which keysplit reads as a space (its "
                        "records separate keys by tabs and lines), so keys that differ only there are counted as "
                        "one%s: %r is counted as %r", self.path, self.respaced_keys, self.key_column,
                        f" (the first at line {line})" if line else "", key, clean_key(key))


class CsvDataset(_ColumnDataset):
    """``csv:PATH,key=COL[,time=COL]``: one record per row; columns named by the header row."""

    kind = "csv"
    skip_header = True

    def __init__(self, path: str, key: str, time: str | None = None) -> None:
        super().__init__(path, key, time)
        try:
            columns = self.parse_row(next(self.lines(), "").removeprefix(BOM))
        except DatasetError as exc:
            raise self.at(exc, "line 1") from None
        for wanted in filter(None, (key, time)):
            if wanted not in columns:
                raise DatasetError(
                    f"{path}: no column {wanted!r} in the CSV header (columns: {', '.join(columns) or 'none'})"
                )
        self.columns = columns
        self.key_index = columns.index(key)
        self.time_index = columns.index(time) if time else None
        self.width = len(columns)
        self.row: list[str] = []  # the row of the record parse_line returned last
        self.ragged_rows = 0
        self.first_ragged: int | None = None

    def parse_row(self, line: str) -> list[str]:
        """The fields of one CSV line. A quoted field cannot span lines: files are read (and cut into byte
        ranges for the Spark replay) line by line, so its continuation would be parsed as rows of its own."""
        # The csv reader asks for the next line only when this one ends inside quotes.
        reader = csv.reader((line, ""))
        try:
            row = next(reader, [])
        except csv.Error as exc:
            raise DatasetError(f"{self.path}: not a CSV row ({exc})") from None
        if reader.line_num > 1:
            raise DatasetError(f"{self.path}: a quoted field spans lines, which keysplit's line-by-line CSV reader "
                               "does not support")
        return row

    def parse_line(self, line: str) -> Record | None:
        if not line.strip():
            return None
        row = self.parse_row(line)
        if len(row) != self.width:
            # A row with more or fewer fields than the header has a missing or extra delimiter somewhere: its
            # key column may hold another column's value, so it is skipped (not guessed), counted and reported
            # with the first line number, like invalid UTF-8 and empty keys. Every reader (simulate, run,
            # replay) skips the same rows, so their counts still agree.
            self.ragged_rows += 1
            if self.first_ragged is None:
                self.first_ragged = getattr(self, "line_number", None)
            return None
        ts = row[self.time_index] if self.time_index is not None else None
        self.row = row
        return self.make_record(row[self.key_index], ts)

    def rows(self) -> Iterator[tuple[Record, dict[str, str]]]:
        """Each record with its row by column name, the key column as the record's (cleaned) key: what keysplit's
        feed spout emits to a user's topology (keysplit.toolkit.FeedSpout); the same rows as :meth:`records`."""
        for record in self.records():
            row = dict(zip(self.columns, self.row))
            row[self.key_column] = record[1][0]
            yield record, row

    def records(self) -> Iterator[Record]:
        self.ragged_rows = 0
        self.first_ragged = None
        self.respaced_keys, self.first_respaced = 0, None
        yield from super().records()

    def report(self) -> None:
        super().report()
        if self.ragged_rows:
            where = f" (the first at line {self.first_ragged})" if self.first_ragged else ""
            log.warning("%s: %d row(s) with %s fields than the header's %d were skipped%s", self.path,
                        self.ragged_rows, "more or fewer", self.width, where)


class ParquetDataset(_ColumnDataset):
    """``parquet:PATH,key=COL[,time=COL]``: one record per row, read in batches with pyarrow."""

    kind = "parquet"
    text_lines = False

    def __init__(self, path: str, key: str, time: str | None = None) -> None:
        super().__init__(path, key, time)
        import pyarrow.parquet as pq

        try:
            self._file = pq.ParquetFile(path)
        except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
            raise DatasetError(f"cannot read Parquet file {path}: {exc}") from None
        names = self._file.schema_arrow.names
        for wanted in filter(None, (key, time)):
            if wanted not in names:
                raise DatasetError(f"{path}: no column {wanted!r} in the Parquet schema (columns: {', '.join(names)})")

    @property
    def columns(self) -> list[str]:
        """The columns a record needs: the key, then the time if there is one."""
        return [self.key_column] + ([self.time_column] if self.time_column else [])

    def table_records(self, table, first_row: int | None = None) -> Iterator[Record]:
        """The records of a pyarrow batch or table holding :attr:`columns` (whole file or one row group).
        ``first_row``, the file's row number (from 1) of the table's first row, places errors in the file."""
        keys = table.column(0).to_pylist()
        times = table.column(1).to_pylist() if self.time_column else [None] * len(keys)
        for i, (key, ts) in enumerate(zip(keys, times)):
            try:
                record = self.make_record("" if key is None else str(key), ts)
            except DatasetError as exc:
                if first_row is None:
                    raise
                raise self.at(exc, f"row {first_row + i}") from None
            if record is not None:
                yield record

    def batches(self) -> Iterator:
        """The file's :attr:`columns` in batches; pages that do not decode (corrupt data under a valid footer)
        end in a DatasetError."""
        import pyarrow as pa

        batches = self._file.iter_batches(columns=self.columns, batch_size=65536)
        while True:
            try:
                batch = next(batches, None)
            except (OSError, pa.ArrowException) as exc:
                raise DatasetError(f"cannot read Parquet file {self.path}: {exc}") from None
            if batch is None:
                return
            yield batch

    def records(self) -> Iterator[Record]:
        self.empty_keys = 0
        self.respaced_keys, self.first_respaced = 0, None
        row = 1
        for batch in self.batches():
            yield from self.table_records(batch, row)
            row += batch.num_rows
        self.report()


READERS: dict[str, type[FileDataset]] = {
    r.kind: r for r in (TextDataset, EdgeDataset, CsvDataset, ParquetDataset)
}
