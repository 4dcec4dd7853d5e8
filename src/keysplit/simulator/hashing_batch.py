"""The routing hashes of :mod:`keysplit.hashing` for many keys at once, compiled with numba.

The fast path names every distinct key once: its d hash candidates and, under ``split=key``, its source.
Done key by key through mmh3 that is a Python call per key and per seed, which for 100 k keys costs more than
routing 5 M messages. Here the keys of a batch are packed into one array of UTF-8 bytes and a numba port of
MurmurHash3_x86_32 (the function mmh3's ``hash(key, seed, signed=False)`` computes, on the key's UTF-8 bytes)
hashes them all in one call.

:mod:`keysplit.hashing` stays the definition: :func:`candidate_rows` equals ``hashing.candidates`` and
:func:`bucket_many` equals ``hashing.bucket`` key for key (``tests/core/test_hashing.py`` checks both against mmh3
on random ASCII, non-ASCII, short and long keys). This module is imported by the fast path only, so the
CLI's start does not pay numba's import.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from keysplit.hashing import BASE_SEED
from keysplit.simulator.compiled import kernel

_MASK = 0xFFFFFFFF


@kernel(inline=True)
def _rotl32(x, r):  # pragma: no cover - compiled
    return ((x << r) | (x >> (32 - r))) & _MASK


@kernel()
def _murmur3_32(data, start, stop, seed):  # pragma: no cover - compiled
    """MurmurHash3_x86_32 of ``data[start:stop]`` with ``seed``, as an unsigned 32-bit value.

    Austin Appleby's reference (MurmurHash3.cpp): 4-byte little-endian blocks, a 1-3 byte tail, then the
    length and the fmix32 finaliser. Arithmetic is in int64 with explicit masks, so no step depends on
    numba's integer promotion rules.
    """
    c1 = 0xCC9E2D51
    c2 = 0x1B873593
    h = np.int64(seed) & _MASK
    n = stop - start
    end = start + (n // 4) * 4
    i = start
    while i < end:
        k = np.int64(data[i]) | (np.int64(data[i + 1]) << 8) | (np.int64(data[i + 2]) << 16) \
            | (np.int64(data[i + 3]) << 24)
        k = (k * c1) & _MASK
        k = _rotl32(k, 15)
        k = (k * c2) & _MASK
        h ^= k
        h = _rotl32(h, 13)
        h = (h * 5 + 0xE6546B64) & _MASK
        i += 4
    tail = n & 3
    if tail:
        k = np.int64(0)
        if tail == 3:
            k ^= np.int64(data[end + 2]) << 16
        if tail >= 2:
            k ^= np.int64(data[end + 1]) << 8
        k ^= np.int64(data[end])
        k = (k * c1) & _MASK
        k = _rotl32(k, 15)
        k = (k * c2) & _MASK
        h ^= k
    h ^= n & _MASK
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h


@kernel("void(u1[:], i8[:], i8, i8[:])")
def _hash_all(data, starts, seed, out):  # pragma: no cover - compiled
    for j in range(out.shape[0]):
        out[j] = _murmur3_32(data, starts[j], starts[j + 1], seed)


@kernel("void(u1[:], i8[:], i8, i8, b1, i8, i4[:, :])")
def _candidate_rows(data, starts, d, workers, distinct, base_seed, out):  # pragma: no cover - compiled
    """``out[j]`` = key j's d candidates, operation for operation as ``hashing.choices`` (not ``distinct``)
    or ``hashing.distinct_choices`` (``distinct``: the (h_i mod (W - i))-th worker not taken yet)."""
    taken = np.empty(d, dtype=np.int64)  # the choices so far, ascending (bisect.insort's list)
    for j in range(out.shape[0]):
        for i in range(d):
            h = _murmur3_32(data, starts[j], starts[j + 1], base_seed + i)
            if not distinct:
                out[j, i] = h % workers
                continue
            r = h % (workers - i)
            pos = 0
            while pos < i and taken[pos] <= r:  # hashing.nth_free: step over every taken worker <= r
                r += 1
                pos += 1
            for m in range(i, pos, -1):  # insert r at pos: it is above taken[:pos] and below taken[pos:]
                taken[m] = taken[m - 1]
            taken[pos] = r
            out[j, i] = r


def pack(names: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The keys' UTF-8 bytes in one uint8 array, and ``starts`` (len(names) + 1 offsets): key j is
    ``data[starts[j]:starts[j + 1]]``. Strict UTF-8, as mmh3 encodes a str (a lone surrogate raises)."""
    encoded = [name.encode("utf-8") for name in names]
    starts = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=starts[1:])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8), starts


def hash_many(names: Sequence[str], seed: int = BASE_SEED) -> np.ndarray:
    """``hashing.hash32(name, seed)`` of every name, as int64."""
    data, starts = pack(names)
    out = np.empty(len(names), dtype=np.int64)
    _hash_all(data, starts, seed & _MASK, out)
    return out


def bucket_many(names: Sequence[str], buckets: int, seed: int = BASE_SEED) -> np.ndarray:
    """``hashing.bucket(name, buckets, seed)`` of every name, as int32."""
    return (hash_many(names, seed) % buckets).astype(np.int32)


def candidate_rows(names: Sequence[str], d: int, workers: int, distinct: bool) -> np.ndarray:
    """``hashing.candidates(name, d, workers, distinct)`` of every name: an int32 array of shape (n, d).

    >>> from keysplit.hashing import candidates
    >>> keys = ["k1", "storm", "clé", ""]
    >>> candidate_rows(keys, 3, 8, True).tolist() == [candidates(k, 3, 8, True) for k in keys]
    True
    """
    if distinct and d > workers:
        raise ValueError(f"cannot draw {d} distinct workers out of {workers}")
    data, starts = pack(names)
    out = np.empty((len(names), d), dtype=np.int32)
    _candidate_rows(data, starts, d, workers, distinct, BASE_SEED, out)
    return out


def warm() -> None:
    """Compile (or load from numba's cache) this module's kernels, so the first batch pays only its hashing."""
    candidate_rows(["k"], 2, 2, True)
    bucket_many(["k"], 2)
