"""SpaceSaving (Metwally, Agrawal, El Abbadi, ICDT 2005): the top-k heavy-hitter sketch of D-Choices/W-Choices.

The sketch keeps at most ``capacity`` (k) monitored keys, each with a counter and an error. A monitored key's
counter is incremented; an unmonitored key replaces a key with the minimum counter m and starts at m + 1 with
error m. Over a stream of n items the sketch guarantees, for every key x with true frequency f(x):

- ``f(x) <= estimate(x) <= f(x) + min_count <= f(x) + n/k`` (an unmonitored key's estimate is ``min_count``);
- ``estimate(x) - error(x) <= f(x)`` (``guaranteed(x)`` is a lower bound);
- every key with f(x) > n/k is monitored.

:meth:`SpaceSaving.merge` combines two sketches built on disjoint sub-streams (Berinde et al., Agarwal et al.
"Mergeable summaries"): each key's counters are added, a key missing from one sketch counts that sketch's
minimum (its upper bound there), and the k largest are kept. The merged sketch keeps all three guarantees
with n = n1 + n2, and the sum of its counters stays at most n, so updates after a merge keep them too.

Speed: a hit (the common case for heavy hitters) is one dict update. The minimum is found with a lazy
min-heap of ``(count, key)`` entries that may be stale (lower than the live count, since counters only grow);
a miss pops and refreshes stale entries until the top is exact, which is amortised O(log k) per update.
Ties between equal minima go to the smallest key, so the sketch is deterministic.

>>> s = SpaceSaving(capacity=2)
>>> for key in "aababc":
...     _ = s.offer(key)
>>> s.n, sorted(s.items())
(6, [('a', 3, 0), ('c', 3, 2)])
>>> s.estimate("b"), s.guaranteed("c")
(3, 1)
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator


class SpaceSaving:
    """Top-``capacity`` counters with SpaceSaving's error guarantees (see the module docstring)."""

    __slots__ = ("_counts", "_errors", "_heap", "capacity", "n")

    def __init__(self, capacity: int = 100) -> None:
        if capacity < 1:
            raise ValueError(f"SpaceSaving capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.n = 0  #: items offered (the stream length the bounds refer to)
        self._counts: dict[str, int] = {}
        self._errors: dict[str, int] = {}
        self._heap: list[tuple[int, str]] = []  # lazy: an entry's count may be below the live count

    def __len__(self) -> int:
        return len(self._counts)

    def __contains__(self, key: object) -> bool:
        return key in self._counts

    def offer(self, key: str) -> int:
        """Count one occurrence of ``key``; returns its new estimated count."""
        self.n += 1
        counts = self._counts
        c = counts.get(key)
        if c is not None:
            c += 1
            counts[key] = c
            return c
        if len(counts) < self.capacity:
            counts[key] = 1
            self._errors[key] = 0
            heapq.heappush(self._heap, (1, key))
            return 1
        heap = self._heap
        while True:  # refresh stale entries until the top is the live minimum
            m, victim = heap[0]
            live = counts[victim]
            if live == m:
                break
            heapq.heapreplace(heap, (live, victim))
        del counts[victim]
        del self._errors[victim]
        c = m + 1
        counts[key] = c
        self._errors[key] = m
        heapq.heapreplace(heap, (c, key))
        return c

    def update(self, keys: Iterable[str]) -> None:
        """Offer every key of ``keys`` in order."""
        for key in keys:
            self.offer(key)

    @property
    def min_count(self) -> int:
        """The smallest counter when the sketch is full (an upper bound on any unmonitored key), else 0."""
        if len(self._counts) < self.capacity:
            return 0
        return min(self._counts.values())

    def estimate(self, key: str) -> int:
        """Upper bound on ``key``'s frequency: its counter, or ``min_count`` when it is not monitored."""
        c = self._counts.get(key)
        return self.min_count if c is None else c

    def count(self, key: str) -> int:
        """``key``'s counter, 0 when it is not monitored (what the routing hot path reads)."""
        return self._counts.get(key, 0)

    def error(self, key: str) -> int:
        """The overestimation bound of a monitored key (``min_count`` for an unmonitored one)."""
        e = self._errors.get(key)
        return self.min_count if e is None else e

    def guaranteed(self, key: str) -> int:
        """Lower bound on ``key``'s frequency: counter minus error (0 when not monitored)."""
        c = self._counts.get(key)
        return 0 if c is None else c - self._errors[key]

    def items(self) -> Iterator[tuple[str, int, int]]:
        """``(key, count, error)`` of every monitored key, in no particular order."""
        errors = self._errors
        for key, c in self._counts.items():
            yield key, c, errors[key]

    def counts(self) -> dict[str, int]:
        """A copy of the counters (key -> estimated count)."""
        return dict(self._counts)

    def top(self, k: int | None = None) -> list[tuple[str, int]]:
        """The ``k`` (default all) monitored keys by decreasing count, ties by key."""
        ranked = sorted(self._counts.items(), key=lambda kv: (-kv[1], kv[0]))
        return ranked if k is None else ranked[:k]

    def merge(self, other: SpaceSaving) -> SpaceSaving:
        """A new sketch summarising both streams (capacity: the larger one); see the module docstring."""
        capacity = max(self.capacity, other.capacity)
        m1, m2 = self.min_count, other.min_count
        combined: dict[str, tuple[int, int]] = {}
        for key in self._counts.keys() | other._counts.keys():
            c1 = self._counts.get(key)
            c2 = other._counts.get(key)
            count = (m1 if c1 is None else c1) + (m2 if c2 is None else c2)
            err = (m1 if c1 is None else self._errors[key]) + (m2 if c2 is None else other._errors[key])
            combined[key] = (count, err)
        kept = sorted(combined.items(), key=lambda kv: (-kv[1][0], kv[0]))[:capacity]
        out = SpaceSaving(capacity)
        out.n = self.n + other.n
        for key, (count, err) in kept:
            out._counts[key] = count
            out._errors[key] = err
        out._heap = [(c, k) for k, c in out._counts.items()]
        heapq.heapify(out._heap)
        return out
