"""Seeded murmur3 hashes and a consistent-hash ring: the only source of hashing in keysplit.

Python's built-in ``hash()`` is salted per process, so two processes (a Storm router, the simulator, a
Spark executor) would route the same key differently. Every routing hash therefore goes through mmh3
with a fixed seed, and is identical in every process and on every machine.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

import mmh3

#: Seed of the first hash function. Hash function ``i`` (0-based) uses ``BASE_SEED + i``.
BASE_SEED = 0x5EED


def hash32(key: str, seed: int = BASE_SEED) -> int:
    """Unsigned 32-bit murmur3 of ``key`` (UTF-8) with ``seed``."""
    return mmh3.hash(key, seed, False)


def bucket(key: str, buckets: int, seed: int = BASE_SEED) -> int:
    """``hash32(key, seed) mod buckets``: key grouping's single choice when ``seed`` is the base seed."""
    return mmh3.hash(key, seed, False) % buckets


def choices(key: str, d: int, workers: int, base_seed: int = BASE_SEED) -> list[int]:
    """The ``d`` hash choices H_1(k) .. H_d(k) of the PKG paper (§3), each in ``[0, workers)``.

    Choice ``i`` is an independent murmur3 hash with seed ``base_seed + i``. Choices may coincide (the
    paper's hash functions are independent, not a permutation); the first one is key grouping's.
    """
    return [mmh3.hash(key, base_seed + i, False) % workers for i in range(d)]


def nth_free(r: int, taken: Sequence[int]) -> int:
    """The ``r``-th (0-based) worker not in ``taken`` (sorted ascending), counting workers 0, 1, 2, ..."""
    for t in taken:
        if t > r:
            break
        r += 1
    return r


def distinct_choices(key: str, d: int, workers: int, base_seed: int = BASE_SEED) -> list[int]:
    """``d`` *different* workers for ``key`` (``d <= workers``), drawn from the same hashes as :func:`choices`.

    With h_i = murmur3(key, base_seed + i): choice 0 is ``h_0 mod W`` (key grouping's, as in :func:`choices`);
    choice i is the ``(h_i mod (W - i))``-th of the W - i workers not chosen yet, taken in ascending order.
    Each step is uniform over the remaining workers, so the choices are a uniform ordered d-subset, and a
    key's candidates never coincide: a hot key is always split over d workers. Storm's PartialKeyGrouping
    draws two distinct tasks for the same reason (2.x: ``RandomTwoTaskAssignmentCreator``).

    >>> distinct_choices("k1", 2, 8)[0] == choices("k1", 2, 8)[0], sorted(distinct_choices("k1", 8, 8))
    (True, [0, 1, 2, 3, 4, 5, 6, 7])
    """
    if d > workers:
        raise ValueError(f"cannot draw {d} distinct workers out of {workers}")
    out: list[int] = []
    taken: list[int] = []
    for i in range(d):
        c = nth_free(mmh3.hash(key, base_seed + i, False) % (workers - i), taken)
        bisect.insort(taken, c)
        out.append(c)
    return out


def candidates(key: str, d: int, workers: int, distinct: bool) -> list[int]:
    """A key's d hash choices: :func:`distinct_choices` when ``distinct``, else the paper's :func:`choices`."""
    return distinct_choices(key, d, workers) if distinct else choices(key, d, workers)


def second_choice(key: str, first: int, workers: int, distinct: bool) -> int:
    """H_2(k) given H_1(k) = ``first``: the hot path of every two-choice grouping (pkg, potc, the tails of
    dchoices and wchoices), equal to ``candidates(key, 2, workers, distinct)[1]``."""
    if not distinct:
        return mmh3.hash(key, BASE_SEED + 1, False) % workers
    if workers == 1:
        return first  # d=2 > W=1 is refused by pkg; the tails of dchoices/wchoices at W=1 have one worker
    r = mmh3.hash(key, BASE_SEED + 1, False) % (workers - 1)
    return r + 1 if r >= first else r


class HashRing:
    """Consistent hashing with virtual nodes (Karger et al.), as used by FISH and Gedik's partitioning.

    Each worker ``w`` owns ``vnodes`` points on a 32-bit ring at ``hash32(f"{w}#{v}")``. A key belongs to
    the first point clockwise from ``hash32(key)``. Adding or removing a worker moves only the keys whose
    arc changes owner, about 1/W of them.

    >>> ring = HashRing(range(4), vnodes=64)
    >>> ring.lookup("storm") in range(4)
    True
    >>> len(set(ring.successors("storm", 3)))
    3
    """

    def __init__(self, workers: Iterable[int], vnodes: int = 64, seed: int = BASE_SEED + 1000) -> None:
        if vnodes < 1:
            raise ValueError(f"vnodes must be at least 1, got {vnodes}")
        self.vnodes = vnodes
        self.seed = seed
        self._points: list[int] = []
        self._owners: list[int] = []
        self._workers: set[int] = set()
        self._place(workers)

    @property
    def workers(self) -> list[int]:
        return sorted(self._workers)

    def _worker_points(self, worker: int) -> list[int]:
        return [mmh3.hash(f"{worker}#{v}", self.seed, False) for v in range(self.vnodes)]

    def add(self, worker: int) -> None:
        """Place ``worker``'s virtual nodes on the ring (a no-op if it is already there)."""
        self._place([worker])

    def _place(self, workers: Iterable[int]) -> None:
        """Add several workers with one sort (the ring's order is that of the sorted (point, owner) pairs, so
        adding them together or one by one gives the same ring; one by one is O(W^2 vnodes log) to build)."""
        new = [w for w in dict.fromkeys(workers) if w not in self._workers]
        if not new:
            return
        self._workers.update(new)
        merged = sorted(
            list(zip(self._points, self._owners)) + [(p, w) for w in new for p in self._worker_points(w)]
        )
        self._points = [p for p, _ in merged]
        self._owners = [o for _, o in merged]

    def remove(self, worker: int) -> None:
        """Take ``worker``'s virtual nodes off the ring; its keys fall to their clockwise successors."""
        if worker not in self._workers:
            return
        self._workers.discard(worker)
        kept = [(p, o) for p, o in zip(self._points, self._owners) if o != worker]
        self._points = [p for p, _ in kept]
        self._owners = [o for _, o in kept]

    def arcs(self) -> tuple[list[int], list[int]]:
        """Copies of the sorted virtual-node points and their owners, for callers that precompute lookups
        (FISH's per-point second successor); key ``k`` starts at ``bisect_left(points, hash32(k, seed))``."""
        return list(self._points), list(self._owners)

    def _start(self, key: str) -> int:
        if not self._points:
            raise ValueError("the hash ring has no workers")
        i = bisect.bisect_left(self._points, mmh3.hash(key, self.seed, False))
        return 0 if i == len(self._points) else i

    def lookup(self, key: str) -> int:
        """The worker owning ``key``: the first virtual node clockwise from the key's hash."""
        return self._owners[self._start(key)]

    def successors(self, key: str, n: int) -> list[int]:
        """The first ``n`` distinct workers clockwise from ``key`` (fewer if the ring has fewer workers)."""
        n = min(n, len(self._workers))
        out: list[int] = []
        i = self._start(key)
        size = len(self._owners)
        while len(out) < n:
            owner = self._owners[i]
            if owner not in out:
                out.append(owner)
            i = (i + 1) % size
        return out


def moved_keys(before: Sequence[int], after: Sequence[int]) -> int:
    """How many positions differ between two assignments of the same keys (keys that migrate)."""
    return sum(1 for a, b in zip(before, after, strict=True) if a != b)


#: Seed of the hash that assigns a toolkit topology's keys to its merge tasks (distinct from the routing and dealing
#: seeds): here, beside the other seeds, so that the topology model computes it without importing the toolkit.
MERGE_SEED = BASE_SEED + 700


def merge_index(key: str, merges: int) -> int:
    """The merge task (index among the merge component's sorted tasks) that owns ``key`` (its JSON text): the
    toolkit's (``keysplit.toolkit.contract``) and the topology model's.

    >>> merge_index("home", 1), 0 <= merge_index("home", 3) < 3
    (0, True)
    """
    return bucket(key, merges, MERGE_SEED)
