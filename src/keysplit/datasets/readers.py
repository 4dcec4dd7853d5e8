"""Streaming readers of dataset files: ``text:PATH``, ``edges:PATH``, ``csv:PATH,key=COL[,time=COL]``,
``parquet:PATH,key=COL[,time=COL]``. Gzip input is detected by its magic bytes and read transparently.

Each reader parses one line at a time with a pure ``parse_line`` (the Spark replay calls the same
function on its partitions), so a file and its replay agree record for record. Lines that are not valid
UTF-8 are decoded with U+FFFD replacements and counted; the count is reported as a warning when the
stream ends, together with the count of records skipped (no key, or an empty key).
"""

from __future__ import annotations

import csv
import gzip
import io
import os
import re
from collections.abc import Iterator
from typing import IO

from keysplit.datasets.base import Dataset, Record, clean_key, log
from keysplit.errors import DatasetError

# A word: letters and digits, with inner apostrophes ("don't", "l'homme"); underscores split words.
WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")


def check_file(path: str) -> None:
    """A one-line DatasetError when ``path`` is missing, a directory, unreadable or empty."""
    if not os.path.exists(path):
        raise DatasetError(f"dataset file not found: {path}")
    if os.path.isdir(path):
        raise DatasetError(f"dataset path is a directory, not a file: {path}")
    if not os.access(path, os.R_OK):
        raise DatasetError(f"dataset file is not readable (permission denied): {path}")
    if os.path.getsize(path) == 0:
        raise DatasetError(f"dataset file is empty: {path}")


def open_binary(path: str) -> IO[bytes]:
    """The file's bytes, gunzipped when it starts with the gzip magic number."""
    with open(path, "rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


class FileDataset(Dataset):
    """A dataset read line by line from a (possibly gzipped) file."""

    kind = ""
    skip_header = False

    def __init__(self, path: str) -> None:
        self.path = path
        self.spec = f"{self.kind}:{path}"
        self.invalid_utf8_lines = 0
        self.skipped_lines = 0
        check_file(path)

    def lines(self) -> Iterator[str]:
        """Decoded lines without their line ends; invalid UTF-8 replaced and counted."""
        self.invalid_utf8_lines = 0
        try:
            with open_binary(self.path) as raw:
                for data in raw:
                    try:
                        line = data.decode("utf-8")
                    except UnicodeDecodeError:
                        line = data.decode("utf-8", errors="replace")
                        self.invalid_utf8_lines += 1
                    yield line.rstrip("\r\n")
        except (OSError, EOFError, gzip.BadGzipFile) as exc:
            raise DatasetError(f"cannot read dataset file {self.path}: {exc}") from None

    def parse_line(self, line: str) -> Record | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def records(self) -> Iterator[Record]:
        self.skipped_lines = 0
        lines = self.lines()
        if self.skip_header:
            next(lines, None)
        for line in lines:
            record = self.parse_line(line)
            if record is None:
                self.skipped_lines += 1
            else:
                yield record
        self.report()

    def report(self) -> None:
        if self.invalid_utf8_lines:
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

    def make_record(self, key: str, ts: object, where: str) -> Record | None:
        key = clean_key(key)
        if not key:
            self.empty_keys += 1
            return None
        if self.time_column is None or ts in (None, ""):
            return None, [key]
        try:
            return float(ts), [key]  # type: ignore[arg-type]
        except (TypeError, ValueError):
            raise DatasetError(f"{where}: time column {self.time_column!r} holds {ts!r}, not a number") from None

    def report(self) -> None:
        super().report()
        if self.empty_keys:
            log.warning("%s: %d record(s) with an empty key %r were skipped", self.path, self.empty_keys,
                        self.key_column)


class CsvDataset(_ColumnDataset):
    """``csv:PATH,key=COL[,time=COL]``: one record per row; columns named by the header row."""

    kind = "csv"
    skip_header = True

    def __init__(self, path: str, key: str, time: str | None = None) -> None:
        super().__init__(path, key, time)
        header = next(self.lines(), "")
        columns = next(csv.reader([header]), [])
        for wanted in filter(None, (key, time)):
            if wanted not in columns:
                raise DatasetError(
                    f"{path}: no column {wanted!r} in the CSV header (columns: {', '.join(columns) or 'none'})"
                )
        self.key_index = columns.index(key)
        self.time_index = columns.index(time) if time else None

    def parse_line(self, line: str) -> Record | None:
        if not line.strip():
            return None
        row = next(csv.reader(io.StringIO(line)), [])
        if len(row) <= self.key_index:
            self.empty_keys += 1
            return None
        ts = row[self.time_index] if self.time_index is not None and self.time_index < len(row) else None
        return self.make_record(row[self.key_index], ts, self.path)


class ParquetDataset(_ColumnDataset):
    """``parquet:PATH,key=COL[,time=COL]``: one record per row, read in batches with pyarrow."""

    kind = "parquet"

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

    def table_records(self, table) -> Iterator[Record]:
        """The records of a pyarrow batch or table holding :attr:`columns` (whole file or one row group)."""
        keys = table.column(0).to_pylist()
        times = table.column(1).to_pylist() if self.time_column else [None] * len(keys)
        for key, ts in zip(keys, times):
            record = self.make_record("" if key is None else str(key), ts, self.path)
            if record is not None:
                yield record

    def records(self) -> Iterator[Record]:
        self.empty_keys = 0
        for batch in self._file.iter_batches(columns=self.columns, batch_size=65536):
            yield from self.table_records(batch)
        self.report()


READERS: dict[str, type[FileDataset]] = {
    r.kind: r for r in (TextDataset, EdgeDataset, CsvDataset, ParquetDataset)
}
