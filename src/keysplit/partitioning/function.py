"""The partitioning function p = <H_p, H_c> (Gedik §4.1): an explicit hash for the frequent keys, a
consistent hash for the rest, and Algorithm 1's O(1) lookup.

The consistent hash is :class:`keysplit.hashing.HashRing` (virtual nodes, "replicas" in the paper) with the
bucketing technique of Karger et al. [20] that the paper uses for O(1) lookups: the 32-bit ring is cut into
at least as many equal buckets as there are ring points, each bucket remembers the first point at or after
its start, and a lookup searches only its bucket's points (O(1) expected) instead of the whole ring.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping

import mmh3
import numpy as np

from keysplit.hashing import HashRing

#: Virtual nodes per channel; the paper's implementation uses 1000 replicas (§5.5).
DEFAULT_VNODES = 1000


class BucketedRing(HashRing):
    """A :class:`HashRing` with an O(1) bucketed lookup; same owners as ``HashRing.lookup`` for every key.

    >>> ring = BucketedRing(range(3), vnodes=50)
    >>> all(ring.lookup(f"k{i}") == HashRing.lookup(ring, f"k{i}") for i in range(200))
    True
    """

    def __init__(self, workers: Iterable[int], vnodes: int = DEFAULT_VNODES, **kwargs) -> None:
        self._table: list[int] | None = None  # built on the first lookup after a change
        self._shift = 32
        super().__init__(workers, vnodes=vnodes, **kwargs)

    def add(self, worker: int) -> None:
        super().add(worker)
        self._table = None

    def remove(self, worker: int) -> None:
        super().remove(worker)
        self._table = None

    def _reindex(self) -> list[int]:
        points = self._points
        bits = max(1, (max(1, len(points)) - 1).bit_length())  # 2^bits >= number of points
        self._shift = 32 - bits
        starts = np.arange((1 << bits) + 1, dtype=np.uint64) << np.uint64(self._shift)  # + an end sentinel
        self._table = np.searchsorted(np.asarray(points, dtype=np.uint64), starts, side="left").tolist()
        return self._table

    def lookup(self, key: str) -> int:
        """The channel owning ``key``: first ring point clockwise from its hash, via the bucket table."""
        points = self._points
        if not points:
            raise ValueError("the hash ring has no workers")
        table = self._table if self._table is not None else self._reindex()
        h = mmh3.hash(key, self.seed, False)
        b = h >> self._shift
        i = bisect_left(points, h, table[b], table[b + 1])  # the bucket's own few points: O(1) expected
        return self._owners[i if i < len(points) else 0]

    def key_hashes(self, keys: Iterable[str]) -> np.ndarray:
        """The ring positions of ``keys`` (for :meth:`assign`)."""
        return np.fromiter((mmh3.hash(k, self.seed, False) for k in keys), dtype=np.uint64)

    def assign(self, hashes: np.ndarray) -> np.ndarray:
        """Vectorised lookup of many keys from their ring positions (``key_hashes``)."""
        points = np.asarray(self._points, dtype=np.uint64)
        idx = np.searchsorted(points, hashes, side="left")
        idx[idx == len(points)] = 0
        return np.asarray(self._owners, dtype=np.int64)[idx]


class PartitioningFunction:
    """p = <H_p, H_c> for ``workers`` channels (0-based indices; the paper counts from 1).

    >>> p = PartitioningFunction(4, {"hot": 2}, vnodes=100)
    >>> p.lookup("hot"), p.lookup("cold") == p.ring.lookup("cold")
    (2, True)
    """

    def __init__(self, workers: int, explicit_hash: Mapping[str, int] | None = None,
                 vnodes: int = DEFAULT_VNODES, ring: BucketedRing | None = None) -> None:
        if workers < 1:
            raise ValueError(f"a partitioning function needs at least 1 channel, got {workers}")
        self.workers = workers
        self.explicit_hash: dict[str, int] = dict(explicit_hash or {})  # H_p
        if ring is None or ring.workers != list(range(workers)):
            ring = BucketedRing(range(workers), vnodes=vnodes)
        self.ring = ring  # H_c, CREATECONSISTENTHASH(N)
        self.vnodes = ring.vnodes
        bad = {d: i for d, i in self.explicit_hash.items() if not 0 <= i < workers}
        if bad:
            raise ValueError(f"explicit mappings outside [0, {workers}): {sorted(bad.items())[:3]}")

    def lookup(self, key: str) -> int:
        """Algorithm 1: H_p(d) if the key is tracked, else H_c(d). O(1)."""
        i = self.explicit_hash.get(key)
        return self.ring.lookup(key) if i is None else i

    __call__ = lookup

    @property
    def tracked(self) -> set[str]:
        """D_p: the keys with an explicit mapping."""
        return set(self.explicit_hash)

    def __len__(self) -> int:
        """|p|, proportional to |D_p| (the explicit hash size)."""
        return len(self.explicit_hash)

    def __repr__(self) -> str:
        return f"PartitioningFunction(workers={self.workers}, explicit={len(self.explicit_hash)}, vnodes={self.vnodes})"
