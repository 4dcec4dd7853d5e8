"""Key grouping (hash mod W) and shuffle grouping (round-robin per source), the two ends of the spectrum."""

from __future__ import annotations

from typing import ClassVar

import mmh3

from keysplit.groupings.base import BaseGrouping
from keysplit.hashing import BASE_SEED


class KeyGrouping(BaseGrouping):
    """KG: every message of a key goes to ``hash(key) mod W`` (one worker per key, no balance).

    >>> from keysplit.groupings import build_grouping
    >>> [g] = build_grouping("kg", workers=4)
    >>> g.choose("the", 0.0) == g.choose("the", 1.0)
    True
    """

    name = "kg"
    summary = "key grouping: hash(key) mod W, one worker per key"

    def choose(self, key: str, now: float) -> int:
        w = mmh3.hash(key, BASE_SEED, False) % self.workers
        self.local_loads[w] += 1
        return w


class ShuffleGrouping(BaseGrouping):
    """SG: round-robin over the workers, starting at the source's index so sources do not move in step.

    >>> from keysplit.groupings import build_grouping
    >>> [g] = build_grouping("sg", workers=3)
    >>> [g.choose("x", 0.0) for _ in range(4)]
    [0, 1, 2, 0]
    """

    name = "sg"
    summary = "shuffle grouping: round-robin per source; perfect balance, every key on every worker"
    PARAMS: ClassVar = {}

    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None:
        super().prepare(workers, source, sources)
        self._next = source % workers

    def choose(self, key: str, now: float) -> int:
        w = self._next
        self._next = w + 1 if w + 1 < self.workers else 0
        self.local_loads[w] += 1
        return w
