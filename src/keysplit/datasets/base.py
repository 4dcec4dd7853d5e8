"""What every dataset is: a stream of records, each ``(timestamp or None, keys)``.

A record is what one spout tuple carries in the topology: a line of text with all its words, one CSV row,
one edge. A message is one key of a record; groupings route messages. Records are streamed, never held.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Optional

from keysplit.errors import DatasetError

Record = tuple[Optional[float], list[str]]  # noqa: UP045 - runtime alias, Python 3.9 syntax for Spark workers

log = logging.getLogger("keysplit")

#: Keys travel through Redis and Spark as one string: the keys joined by this separator.
KEY_SEPARATOR = "\t"


def encode_record(record: Record) -> str:
    """One line for a record: ``ts`` (empty when absent), then the keys, tab-separated."""
    ts, keys = record
    return ("" if ts is None else repr(ts)) + KEY_SEPARATOR + KEY_SEPARATOR.join(keys)


def decode_record(line: str) -> Record:
    """Inverse of :func:`encode_record`."""
    ts, *keys = line.split(KEY_SEPARATOR)
    return (float(ts) if ts else None), keys


def clean_key(key: str) -> str:
    """A key as every component sees it: the separator and line breaks become spaces, outer space trimmed."""
    if KEY_SEPARATOR in key or "\n" in key or "\r" in key:
        key = key.replace(KEY_SEPARATOR, " ").replace("\n", " ").replace("\r", " ")
    return key.strip()


class Dataset:
    """A named, re-iterable stream of records. ``spec`` is the string that recreates it."""

    spec: str = ""

    def records(self) -> Iterator[Record]:  # pragma: no cover - abstract
        raise NotImplementedError

    def messages(self) -> Iterator[tuple[float | None, str]]:
        """Every key of every record, in order, with its record's timestamp."""
        for ts, keys in self.records():
            for key in keys:
                yield ts, key

    def message_count(self) -> int:
        """How many messages (keys over all records) the stream has; generators know it without a pass."""
        return sum(len(keys) for _, keys in self.records())

    def stats(self) -> dict:
        """messages, distinct keys, and p1 (the share of the most frequent key)."""
        counts: dict[str, int] = {}
        records = 0
        for _, keys in self.records():
            records += 1
            for key in keys:
                counts[key] = counts.get(key, 0) + 1
        messages = sum(counts.values())
        top = max(counts.values(), default=0)
        return {
            "spec": self.spec,
            "records": records,
            "messages": messages,
            "keys": len(counts),
            "p1": top / messages if messages else 0.0,
        }

    def sha256(self) -> str:
        """A fingerprint of the record stream itself (not of a file): a generator spec and the file it
        was written to, or a text file and its gzip, have the same fingerprint. The definition lives in
        :mod:`keysplit.fingerprint`, so that the replay's executors compute it too."""
        from keysplit.fingerprint import dataset_sha256

        return dataset_sha256(self.records())


def require_records(dataset: Dataset) -> None:
    """Raise a DatasetError if the dataset yields no record at all."""
    for _ in dataset.records():
        return
    raise DatasetError(f"dataset {dataset.spec!r} has no records (empty file or no keys in it)")
