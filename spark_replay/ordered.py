"""Taking a shuffle's pieces in a known order with bounded memory.

A Spark shuffle delivers a partition's pieces in fetch order, which on a cluster is not the order they were
written in (on ``local[...]`` it usually is). A routing task must see its chunks in sequence order, and a
worker's queue its arrivals in time order, so :class:`InOrder` releases the pieces in the order the driver
announced (every chunk id, known after the ingest). A piece that arrives before its turn waits, pickled, in
memory up to a budget and beyond it in a spill file in Spark's local directory, which is removed at the end.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Hashable, Iterable, Iterator
from typing import IO, Any

#: Bytes of early pieces held in memory before they go to the spill file.
BUDGET = 32 << 20


def local_dir() -> str:
    """The executor's scratch directory (``SPARK_LOCAL_DIRS``, which Spark sets for its Python workers)."""
    dirs = os.environ.get("SPARK_LOCAL_DIRS", "")
    return dirs.split(",")[0] if dirs else tempfile.gettempdir()


class InOrder:
    """Accept ``(key, value)`` in any order; release values in the order of ``order`` (every key once)."""

    def __init__(self, order: Iterable[Hashable], budget: int = BUDGET) -> None:
        self.order = list(order)
        self.next = 0
        self.budget = budget
        self.held: dict[Hashable, bytes] = {}
        self.held_bytes = 0
        self.spilled: dict[Hashable, tuple[int, int]] = {}
        self.file: IO[bytes] | None = None

    def push(self, key: Hashable, value: Any) -> Iterator[Any]:
        """Take one piece; yield every value whose turn has come (this one and those it unblocked)."""
        if self.next < len(self.order) and key == self.order[self.next]:
            self.next += 1
            yield value
            yield from self._release()
            return
        data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        if self.held_bytes + len(data) <= self.budget:
            self.held[key] = data
            self.held_bytes += len(data)
        else:
            if self.file is None:
                self.file = tempfile.TemporaryFile(prefix="keysplit-order-", dir=local_dir())  # noqa: SIM115
            self.file.seek(0, os.SEEK_END)
            self.spilled[key] = (self.file.tell(), len(data))
            self.file.write(data)

    def _release(self) -> Iterator[Any]:
        while self.next < len(self.order):
            key = self.order[self.next]
            if key in self.held:
                data = self.held.pop(key)
                self.held_bytes -= len(data)
            elif key in self.spilled:
                assert self.file is not None
                offset, size = self.spilled.pop(key)
                self.file.seek(offset)
                data = self.file.read(size)
            else:
                return
            self.next += 1
            yield pickle.loads(data)

    def close(self) -> None:
        """Check that every announced piece came, and remove the spill file."""
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.next != len(self.order):
            raise RuntimeError(f"{len(self.order) - self.next} piece(s) never arrived (expected "
                               f"{self.order[self.next]!r} next)")


def in_order(items: Iterable[tuple[Hashable, Any]], order: Iterable[Hashable], budget: int = BUDGET) -> Iterator[Any]:
    """The values of ``items`` in the order of their keys in ``order``."""
    buffer = InOrder(order, budget)
    try:
        for key, value in items:
            yield from buffer.push(key, value)
    finally:
        buffer.close()
