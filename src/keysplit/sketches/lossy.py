"""Lossy counting (Manku & Motwani, VLDB 2002) and Gedik's sliding-window emulation over tumbling windows.

Lossy counting with error ``epsilon`` splits the stream into buckets of width ``w = ceil(1/epsilon)``. Each
tracked item keeps an appearance count ``c_a`` and an error ``c_e`` (the most it may have been undercounted).
A new item enters with ``c_a = 1, c_e = b - 1`` where ``b`` is the current bucket (1-based); when bucket ``b``
closes, items with ``c_a + c_e <= b`` are evicted. After ``n`` items:

- ``c_a <= true count <= c_a + epsilon * n`` (undercount at most ``epsilon * n``);
- every item whose true count exceeds ``epsilon * n`` is in memory (no false negatives);
- the sketch holds at most ``(1/epsilon) * log(epsilon * n)`` entries.

``frequent(s)`` returns the items with ``c_a >= (s - epsilon) * n``: all items of true frequency ``>= s`` and
possibly some in ``(s - epsilon, s)`` (Gedik §4.1.2).

:class:`SlidingLossyCounter` is the paper's Fig. 2: ``x`` (default 3) lossy counters over tumbling windows,
started ``W / (x - 1)`` items apart, each rebuilt from scratch after ``x * W / (x - 1)`` items. The one in use
is always the oldest, which has seen between ``W`` and ``(1 + 1/(x-1)) * W`` items (``3W/2`` for x = 3); while
fewer than ``W`` items have arrived (initialisation, the paper's footnote 2) it has seen all of them.

>>> lc = LossyCounter(epsilon=0.1)
>>> for key in "aaaaabbbcd" * 10:
...     lc.update(key)
>>> sorted(lc.frequent(0.2))
['a', 'b']
>>> lc.count("a"), lc.n
(50, 100)
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable

from keysplit.errors import KeysplitError


class LossyCounter:
    """One lossy counter with error bound ``epsilon`` in (0, 1)."""

    def __init__(self, epsilon: float) -> None:
        if not 0 < epsilon < 1:
            raise KeysplitError(f"lossy counting: epsilon must be strictly between 0 and 1, got {epsilon}")
        self.epsilon = epsilon
        self.width = math.ceil(1.0 / epsilon)  # bucket width w = ceil(1/epsilon)
        self.n = 0  # items seen
        self.bucket = 1  # current bucket id b = ceil(n / w), 1-based
        self._counts: dict[Hashable, int] = {}  # c_a
        self._errors: dict[Hashable, int] = {}  # c_e
        self.peak = 0  # the most entries held at once (reached just before a bucket closes)

    def update(self, key: Hashable) -> None:
        """Count one appearance of ``key``; prune at a bucket boundary."""
        counts = self._counts
        if key in counts:
            counts[key] += 1
        else:
            counts[key] = 1
            self._errors[key] = self.bucket - 1
        self.n += 1
        if self.n % self.width == 0:
            self._prune()
            self.bucket += 1

    def update_many(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self.update(key)

    def _prune(self) -> None:
        """Evict entries with ``c_a + c_e <= b`` when bucket ``b`` closes."""
        b = self.bucket
        errors = self._errors
        self.peak = max(self.peak, len(errors))
        dead = [k for k, c in self._counts.items() if c + errors[k] <= b]
        for k in dead:
            del self._counts[k]
            del errors[k]

    def __len__(self) -> int:
        """Entries held (the sketch's size)."""
        return len(self._counts)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._counts

    def count(self, key: Hashable) -> int:
        """``c_a``: a lower bound on the true count, within ``epsilon * n`` of it (0 if not tracked)."""
        return self._counts.get(key, 0)

    def error(self, key: Hashable) -> int:
        """``c_e``: the most ``key`` may have been undercounted by."""
        return self._errors.get(key, 0)

    def frequent(self, support: float) -> dict[Hashable, int]:
        """Items with ``c_a >= (support - epsilon) * n``, mapped to ``c_a``."""
        cut = (support - self.epsilon) * self.n
        return {k: c for k, c in self._counts.items() if c >= cut}

    def frequencies(self, support: float = 0.0) -> dict[Hashable, float]:
        """``frequent(support)`` as relative frequencies ``c_a / n``."""
        if self.n == 0:
            return {}
        return {k: c / self.n for k, c in self.frequent(support).items()}


class SlidingLossyCounter:
    """Gedik Fig. 2: ``counters`` lossy counters over staggered tumbling windows emulate a sliding window.

    ``window`` is W in items. Counter j starts at item ``j * W/(x-1)`` and is reset every ``x * W/(x-1)`` items,
    so the oldest counter (the one queried) always covers between W and ``(1 + 1/(x-1)) * W`` recent items.

    >>> s = SlidingLossyCounter(epsilon=0.01, window=100)
    >>> for i in range(400):
    ...     s.update("old" if i < 200 else "new")
    >>> sorted(s.frequent(0.5)), s.active.n
    (['new'], 150)
    """

    def __init__(self, epsilon: float, window: int, counters: int = 3) -> None:
        if counters < 2:
            raise KeysplitError(f"sliding lossy counting needs at least 2 counters, got {counters}")
        if window < counters - 1:
            raise KeysplitError(f"sliding lossy counting: window must be at least {counters - 1} items, got {window}")
        self.epsilon = epsilon
        self.window = window
        self.stagger = math.ceil(window / (counters - 1))  # W / (x - 1)
        self.cycle = counters * self.stagger  # each counter's lifetime: x * W / (x - 1)
        self.counters = [LossyCounter(epsilon) for _ in range(counters)]
        self.n = 0
        self._live: list[LossyCounter] = []  # the counters that have started
        self._next_event = 0  # starts and resets all fall on multiples of the stagger

    def _advance(self) -> None:
        n = self.n
        for j in range(len(self.counters)):
            start = j * self.stagger
            if n > start and (n - start) % self.cycle == 0:
                self.counters[j] = LossyCounter(self.epsilon)  # tumbling window j starts over
        self._live = [c for j, c in enumerate(self.counters) if n >= j * self.stagger]
        self._next_event = n + self.stagger

    def update(self, key: Hashable) -> None:
        if self.n == self._next_event:
            self._advance()
        for counter in self._live:
            counter.update(key)
        self.n += 1

    def update_many(self, keys: Iterable[Hashable]) -> None:
        for key in keys:
            self.update(key)

    @property
    def active(self) -> LossyCounter:
        """The counter in use: the one that has seen the most items (the oldest window)."""
        return max(self.counters, key=lambda c: c.n)

    def __len__(self) -> int:
        """Entries held across all counters (the memory of the emulation)."""
        return sum(len(c) for c in self.counters)

    def frequent(self, support: float) -> dict[Hashable, int]:
        return self.active.frequent(support)

    def frequencies(self, support: float = 0.0) -> dict[Hashable, float]:
        return self.active.frequencies(support)
