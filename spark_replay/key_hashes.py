"""The 64-bit key hashes the replay merges per-key state by, across partitions (trusted only once
:func:`spark_replay.key_counts.count_keys` found no two keys sharing one)."""

from __future__ import annotations

import mmh3
import numpy as np

from keysplit.hashing import BASE_SEED

#: Seed of the 64-bit key hashes the replay uses to merge per-key state across partitions.
KEY_HASH_SEED = BASE_SEED + 700


def key_hash64(key: str) -> int:
    """A key's 64-bit murmur3 hash (only trusted after the counts checked there is no collision)."""
    return mmh3.hash64(key, KEY_HASH_SEED, signed=False)[0]


def key_hashes64(vocab: list[str]) -> np.ndarray:
    """:func:`key_hash64` of every key, as uint64."""
    return np.fromiter((key_hash64(k) for k in vocab), dtype=np.uint64, count=len(vocab))
