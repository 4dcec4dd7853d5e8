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

Speed: a hit (the common case for heavy hitters) is one dict lookup and one list update. Each monitored key
owns a slot; the minimum is found with a lazy min-heap of plain ints ``count << shift | slot`` (int compares
are the cheapest a heap can do) whose counts may be stale (lower than the live count, since counters only
grow): a miss refreshes stale entries until the top is exact, amortised O(log k) per update. Ties between
equal minima go to the lowest slot, so the sketch is deterministic.

>>> s = SpaceSaving(capacity=2)
>>> for key in "aababc":
...     _ = s.update(key)
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

    __slots__ = ("_counts", "_errors", "_heap", "_keys", "_mask", "_shift", "_slot_of", "capacity", "n")

    def __init__(self, capacity: int = 100) -> None:
        if capacity < 1:
            raise ValueError(f"SpaceSaving capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self.n = 0  #: items counted (the stream length the bounds refer to)
        self._slot_of: dict[str, int] = {}  # monitored key -> its slot
        self._keys: list[str] = []  # slot -> key
        self._counts: list[int] = []  # slot -> counter
        self._errors: list[int] = []  # slot -> overestimation bound
        self._shift = max(1, (capacity - 1).bit_length())
        self._mask = (1 << self._shift) - 1
        self._heap: list[int] = []  # count << shift | slot, lazy: count may be below the live counter

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._slot_of

    def update(self, key: str) -> int:
        """Count one occurrence of ``key``; returns its new estimated count."""
        self.n += 1
        counts = self._counts
        s = self._slot_of.get(key)
        if s is not None:
            c = counts[s] + 1
            counts[s] = c
            return c
        shift = self._shift
        slots = len(counts)
        if slots < self.capacity:
            self._slot_of[key] = slots
            self._keys.append(key)
            counts.append(1)
            self._errors.append(0)
            heapq.heappush(self._heap, (1 << shift) | slots)
            return 1
        heap, mask = self._heap, self._mask
        while True:  # refresh stale entries until the top is the live minimum
            entry = heap[0]
            s = entry & mask
            m = counts[s]
            if m == entry >> shift:
                break
            heapq.heapreplace(heap, (m << shift) | s)
        keys = self._keys
        del self._slot_of[keys[s]]
        keys[s] = key
        self._slot_of[key] = s
        self._errors[s] = m
        c = counts[s] = m + 1
        heapq.heapreplace(heap, (c << shift) | s)
        return c

    def slot(self, key: str) -> int | None:
        """The slot of a monitored key (its place in :meth:`items` and in :meth:`state`'s items), else None."""
        return self._slot_of.get(key)

    def item(self, slot: int) -> list:
        """``[key, count, error]`` of ``slot``, as :meth:`state` lists it."""
        return [self._keys[slot], self._counts[slot], self._errors[slot]]

    def update_many(self, keys: Iterable[str]) -> None:
        """Offer every key of ``keys`` in order."""
        for key in keys:
            self.update(key)

    @property
    def min_count(self) -> int:
        """The smallest counter when the sketch is full (an upper bound on any unmonitored key), else 0."""
        if len(self._counts) < self.capacity:
            return 0
        return min(self._counts)

    def estimate(self, key: str) -> int:
        """Upper bound on ``key``'s frequency: its counter, or ``min_count`` when it is not monitored."""
        s = self._slot_of.get(key)
        return self.min_count if s is None else self._counts[s]

    def count(self, key: str) -> int:
        """``key``'s counter, 0 when it is not monitored."""
        s = self._slot_of.get(key)
        return 0 if s is None else self._counts[s]

    def error(self, key: str) -> int:
        """The overestimation bound of a monitored key (``min_count`` for an unmonitored one)."""
        s = self._slot_of.get(key)
        return self.min_count if s is None else self._errors[s]

    def guaranteed(self, key: str) -> int:
        """Lower bound on ``key``'s frequency: counter minus error (0 when not monitored)."""
        s = self._slot_of.get(key)
        return 0 if s is None else self._counts[s] - self._errors[s]

    def items(self) -> Iterator[tuple[str, int, int]]:
        """``(key, count, error)`` of every monitored key, in slot order."""
        return zip(self._keys, self._counts, self._errors)

    def counts(self) -> dict[str, int]:
        """A copy of the counters (key -> estimated count)."""
        return dict(zip(self._keys, self._counts))

    def top(self, k: int | None = None) -> list[tuple[str, int]]:
        """The ``k`` (default all) monitored keys by decreasing count, ties by key."""
        ranked = sorted(zip(self._keys, self._counts), key=lambda kv: (-kv[1], kv[0]))
        return ranked if k is None else ranked[:k]

    def state(self) -> dict:
        """The sketch as JSON-able data (:meth:`from_state` rebuilds it): what crosses processes when partial
        sketches are merged downstream (keysplit.toolkit.accumulators.HeavyHitters)."""
        return {"capacity": self.capacity, "n": self.n, "items": [list(item) for item in self.items()]}

    @classmethod
    def from_state(cls, state: dict) -> SpaceSaving:
        """The sketch :meth:`state` described: the same counters, errors and stream length.

        >>> s = SpaceSaving(2); s.update_many("aab")
        >>> SpaceSaving.from_state(s.state()).state() == s.state()
        True
        """
        out = cls(int(state["capacity"]))
        out._load(int(state["n"]), [(str(k), int(c), int(e)) for k, c, e in state["items"]])
        return out

    def _load(self, n: int, items: Iterable[tuple[str, int, int]]) -> None:
        """Monitor exactly ``items`` (at most ``capacity`` of them), over a stream of ``n`` items."""
        self.n = n
        for slot, (key, count, err) in enumerate(items):
            self._slot_of[key] = slot
            self._keys.append(key)
            self._counts.append(count)
            self._errors.append(err)
            self._heap.append((count << self._shift) | slot)
        heapq.heapify(self._heap)

    def merge(self, other: SpaceSaving) -> SpaceSaving:
        """A new sketch summarising both streams (capacity: the larger one); see the module docstring."""
        capacity = max(self.capacity, other.capacity)
        m1, m2 = self.min_count, other.min_count
        mine = {k: (c, e) for k, c, e in self.items()}
        theirs = {k: (c, e) for k, c, e in other.items()}
        combined: dict[str, tuple[int, int]] = {}
        for key in mine.keys() | theirs.keys():
            c1, e1 = mine.get(key, (m1, m1))
            c2, e2 = theirs.get(key, (m2, m2))
            combined[key] = (c1 + c2, e1 + e2)
        kept = sorted(combined.items(), key=lambda kv: (-kv[1][0], kv[0]))[:capacity]
        out = SpaceSaving(capacity)
        out._load(self.n + other.n, ((key, count, err) for key, (count, err) in kept))
        return out
