"""The replay's unit of reading: a :class:`Chunk`, consecutive records of one input split with their keys as ids
into the chunk's own vocabulary, at most :data:`CHUNK_MESSAGES` messages (so a task's memory does not grow with the
dataset). Every reader (:mod:`spark_replay.sparkinput`'s row path, :mod:`spark_replay.text_input`'s compiled path)
ends in chunks; the deal (:mod:`spark_replay.ingest`) numbers and deals them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from keysplit.fingerprint import RecordColumns

#: Target bytes per input split of a file (what one task parses and deals).
SLICE_BYTES = 8 << 20
#: Most messages in one chunk (a unit of parsing, shuffling and routing; bounds a task's memory).
CHUNK_MESSAGES = 1 << 19


@dataclass
class Chunk:
    """Consecutive records of one input split, in file order: keys as ids into ``vocab``."""

    part: tuple[int, int]  # (input split, chunk number inside it): chunks sort in file order
    vocab: list[str]
    key_ids: np.ndarray  # int32, one per message
    rec_len: np.ndarray  # int32, keys per record
    ts: np.ndarray | None  # float64 per record (0 where absent), None when no record has one
    has_ts: np.ndarray | None  # bool per record


def decode_line(data: bytes) -> str:
    """One line as :meth:`FileDataset.lines` decodes it (invalid UTF-8 replaced, line end stripped)."""
    try:
        line = data.decode("utf-8")
    except UnicodeDecodeError:
        line = data.decode("utf-8", errors="replace")
    return line.rstrip("\r\n")


def compact(ids: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(ids, return_inverse=True)`` for ids below ``size``, without a sort: the ids used, ascending,
    and every id's rank among them (O(len(ids) + size), for pieces much larger than their vocabulary)."""
    seen = np.zeros(size, dtype=bool)
    seen[ids] = True
    rank = np.cumsum(seen, dtype=np.int64) - 1
    return np.flatnonzero(seen), rank[ids]


class ChunkBuilder:
    """Records in file order, cut into :class:`Chunk` s of about ``limit`` messages numbered ``(part, 0), (part,
    1), ...``: the one way the row readers turn records into chunks."""

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
