"""FISH's epoch-based recent hot-key counter (FISH §4.1.1, Algorithm 1).

The stream at one source is cut into epochs of ``epoch`` consecutive tuples.

- **Intra-epoch frequency counting** (Alg. 1 lines 8-17): keys are counted in a table of at most
  ``capacity`` entries (the set K, its maximum capacity). A key already in K is incremented; a new key
  joins K while K has room; when K is full the new key replaces the key with the smallest counter and
  starts from that minimum + 1 (ReplaceMin: "set to that of replaced ones plus 1 rather than 1", so a new
  key is not immediately evicted again by the next new key).
- **Inter-epoch hotness decaying** (§4.1.1, replacing the per-tuple time decay of Alg. 1 lines 5-7): at
  the end of every epoch, every counter is multiplied by ``alpha``. ``alpha = 1`` never forgets (lifetime
  counting, the D-/W-Choices view); ``alpha = 0`` forgets everything at each epoch end.
- A key's frequency is its counter over the sum of all counters in K.

The minimum is found with a lazy min-heap: every key has exactly one heap entry holding a counter value it
had at some point, never more than its current one (counters only grow within an epoch). ReplaceMin pops
entries whose value is stale and pushes them back with the current value until the top is exact, so an
increment costs one dict update and a replacement O(log capacity) amortised. Decay multiplies every
counter by the same factor, which keeps the order, and the heap is rebuilt once per epoch (O(capacity)
per ``epoch`` tuples).

>>> c = EpochCounter(epoch=4, capacity=2, alpha=0.5)
>>> [c.update(k) for k in ["a", "a", "b", "c"]]  # "c" replaces "b" (the minimum, 1) and starts at 2
[1.0, 2.0, 1.0, 2.0]
>>> c.frequency("a"), c.frequency("b")
(0.5, 0.0)
>>> c.update("a")  # the 5th tuple opens epoch 2: counters were halved to a=1, c=1 first
2.0
>>> sorted(c.counts.items())
[('a', 2.0), ('c', 1.0)]
"""

from __future__ import annotations

import heapq


class EpochCounter:
    """Decayed top-``capacity`` counter over epochs of ``epoch`` tuples (FISH Algorithm 1).

    ``update(key)`` counts one tuple and returns the key's counter after the update. ``counts`` is K
    (key -> counter), ``total`` the sum of its counters, ``max_count`` the largest counter
    (the top key's, f_max = max_count / total).
    """

    __slots__ = ("_heap", "_in_epoch", "alpha", "capacity", "counts", "epoch", "epochs", "max_count", "total")

    def __init__(self, epoch: int = 1000, capacity: int = 1000, alpha: float = 0.5) -> None:
        if epoch < 1:
            raise ValueError(f"epoch must be at least 1 tuple, got {epoch}")
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1 key, got {capacity}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
        self.epoch = epoch
        self.capacity = capacity
        self.alpha = alpha
        self.counts: dict[str, float] = {}
        self.total = 0.0
        self.max_count = 0.0
        self.epochs = 0  # completed epochs
        self._in_epoch = 0
        self._heap: list[tuple[float, str]] = []  # one lower-bound entry per key of K

    def __len__(self) -> int:
        return len(self.counts)

    def update(self, key: str) -> float:
        """Count one tuple of ``key`` (Alg. 1 lines 8-17) and return its counter.

        An epoch closes (decay) when the first tuple of the next one arrives, so after ``update`` the
        counter, ``total`` and ``max_count`` always describe the same table.
        """
        if self._in_epoch >= self.epoch:
            self.end_epoch()
        self._in_epoch += 1
        counts = self.counts
        c = counts.get(key)
        if c is not None:
            c += 1.0
            counts[key] = c
        elif len(counts) < self.capacity:
            c = counts[key] = 1.0
            heapq.heappush(self._heap, (1.0, key))
        else:
            c = self._replace_min(key)
        # Every case adds exactly 1 to the sum of counters (a replacement turns m into m + 1).
        self.total += 1.0
        if c > self.max_count:
            self.max_count = c
        return c

    def _replace_min(self, key: str) -> float:
        """ReplaceMin: evict the key with the smallest counter; ``key`` takes its counter + 1."""
        heap, counts = self._heap, self.counts
        while True:
            value, old = heap[0]
            current = counts[old]
            if current == value:
                break
            heapq.heapreplace(heap, (current, old))  # stale entry: refresh and look again
        del counts[old]
        c = counts[key] = value + 1.0
        heapq.heapreplace(heap, (c, key))
        return c

    def end_epoch(self) -> None:
        """Inter-epoch hotness decaying: multiply every counter by ``alpha`` (§4.1.1)."""
        self.epochs += 1
        self._in_epoch = 0
        alpha = self.alpha
        if alpha == 1.0:
            return
        if alpha == 0.0:  # forget everything: an empty K, not a table of zero counters
            self.counts.clear()
            self._heap.clear()
            self.total = self.max_count = 0.0
            return
        counts = self.counts
        for key in counts:
            counts[key] *= alpha
        self._heap = [(c, k) for k, c in counts.items()]
        heapq.heapify(self._heap)
        # Recompute the sums rather than scale them, so rounding never accumulates over epochs.
        self.total = sum(counts.values())
        self.max_count = max(counts.values(), default=0.0)

    def frequency(self, key: str) -> float:
        """The key's recent frequency f_k = counter / sum of counters (0 for a key not in K)."""
        c = self.counts.get(key)
        return c / self.total if c is not None and self.total > 0 else 0.0

    @property
    def f_max(self) -> float:
        """The top key's frequency."""
        return self.max_count / self.total if self.total > 0 else 0.0

    def top(self, n: int) -> list[tuple[str, float]]:
        """The ``n`` keys with the largest counters, largest first (ties by key)."""
        return sorted(self.counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
