"""Hashes are seeded murmur3: identical across processes, independent across seeds; the ring moves few keys."""

from __future__ import annotations

import random
import string
import subprocess
import sys

import mmh3
import numpy as np
import pytest

from keysplit.hashing import (
    BASE_SEED,
    HashRing,
    bucket,
    candidates,
    choices,
    distinct_choices,
    hash32,
    moved_keys,
    second_choice,
)
from keysplit.simulator.hashing_batch import bucket_many, candidate_rows, hash_many


def test_hashes_are_identical_in_another_process():
    keys = [f"key{i}" for i in range(50)]
    here = [hash32(k) for k in keys]
    code = "from keysplit.hashing import hash32; print([hash32(f'key{i}') for i in range(50)])"
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert str(here) == there.strip()


def test_choices_are_independent_hash_functions():
    """The d hash choices of PKG: the first is key grouping's; each is a different function of the key."""
    keys = [f"w{i}" for i in range(2000)]
    first = [choices(k, 2, 10)[0] for k in keys]
    second = [choices(k, 2, 10)[1] for k in keys]
    assert first == [bucket(k, 10) for k in keys]
    agree = sum(a == b for a, b in zip(first, second)) / len(keys)
    assert 0.05 < agree < 0.15  # independent: P(H1 = H2) = 1/W


def test_buckets_are_roughly_uniform():
    counts = [0] * 8
    for i in range(16000):
        counts[bucket(f"k{i}", 8)] += 1
    assert max(counts) < 1.1 * 2000 and min(counts) > 0.9 * 2000


def test_ring_adding_a_worker_moves_about_one_over_w_of_the_keys():
    keys = [f"k{i}" for i in range(20000)]
    ring = HashRing(range(10), vnodes=64)
    before = [ring.lookup(k) for k in keys]
    ring.add(10)
    after = [ring.lookup(k) for k in keys]
    moved = moved_keys(before, after)
    assert 0.04 * len(keys) < moved < 0.15 * len(keys)  # ideal 1/11 = 9%
    assert all(a == 10 for b, a in zip(before, after) if a != b)  # keys only move to the new worker
    mod_moved = moved_keys([bucket(k, 10) for k in keys], [bucket(k, 11) for k in keys])
    assert mod_moved > 5 * moved  # hash mod W reshuffles almost everything


def test_ring_removal_and_successors():
    ring = HashRing(range(5), vnodes=32)
    succ = ring.successors("hot", 3)
    assert len(set(succ)) == 3 and succ[0] == ring.lookup("hot")
    ring.remove(succ[0])
    assert ring.lookup("hot") == succ[1]
    assert len(ring.successors("hot", 10)) == 4  # only 4 workers left


def test_distinct_choices_are_different_workers_drawn_uniformly_and_start_with_kgs():
    keys = [f"w{i}" for i in range(4000)]
    for workers in (2, 3, 8):
        for d in range(1, workers + 1):
            for k in keys[:300]:
                got = distinct_choices(k, d, workers)
                assert len(set(got)) == d and all(0 <= w < workers for w in got)
                assert got[0] == bucket(k, workers)  # the first candidate stays key grouping's
                assert got == distinct_choices(k, workers, workers)[:d]  # more choices extend fewer
                assert candidates(k, d, workers, False) == choices(k, d, workers)
            if d >= 2:
                assert all(second_choice(k, bucket(k, workers), workers, True) == distinct_choices(k, 2, workers)[1]
                           for k in keys[:300])
    # the second choice is uniform over the 7 other workers: each (H1, H2) pair near 1/56 of the keys
    pairs: dict[tuple[int, int], int] = {}
    for k in keys:
        a, b = distinct_choices(k, 2, 8)
        pairs[(a, b)] = pairs.get((a, b), 0) + 1
    assert len(pairs) == 56 and max(pairs.values()) < 2.5 * len(keys) / 56


def test_a_ring_built_at_once_equals_one_built_worker_by_worker():
    at_once = HashRing(range(12), vnodes=50)
    one_by_one = HashRing([], vnodes=50)
    for w in range(12):
        one_by_one.add(w)
    assert at_once.arcs() == one_by_one.arcs() and at_once.workers == one_by_one.workers


# -- the batch hashes of the fast path (keysplit.simulator.hashing_batch) equal mmh3 and hashing.candidates --------

def random_keys(seed: int) -> list[str]:
    """Keys of every tail length (0..16 bytes of ASCII), non-ASCII keys (2-, 3- and 4-byte UTF-8 characters, so
    byte and character lengths differ), long keys, and the generators' own names."""
    rng = random.Random(seed)
    ascii_chars = string.printable
    wide = "é߿ࠀ中￿𐀀😀\U0010ffff"
    keys = ["".join(rng.choice(ascii_chars) for _ in range(n)) for n in range(17) for _ in range(20)]
    keys += ["".join(rng.choice(ascii_chars + wide) for _ in range(rng.randrange(1, 24))) for _ in range(600)]
    keys += ["".join(rng.choice(ascii_chars + wide) for _ in range(rng.randrange(200, 3000))) for _ in range(20)]
    keys += [f"k{i}" for i in range(300)] + ["", "\x00", "\x00\x00\x00\x00"]
    return keys


def test_batch_murmur3_equals_mmh3_on_random_keys():
    keys = random_keys(1)
    for seed in (0, 1, BASE_SEED, BASE_SEED + 500, 0x7FFFFFFF, 0xFFFFFFFF):
        assert hash_many(keys, seed).tolist() == [mmh3.hash(k, seed, False) for k in keys]
        assert bucket_many(keys, 7, seed).tolist() == [bucket(k, 7, seed) for k in keys]


def test_batch_candidates_equal_hashing_candidates():
    keys = random_keys(2)
    for d, workers in ((1, 1), (2, 2), (2, 10), (3, 7), (5, 5), (8, 64), (4, 100)):
        for distinct in (True, False):
            got = candidate_rows(keys, d, workers, distinct)
            assert got.dtype == np.int32 and got.shape == (len(keys), d)
            assert got.tolist() == [candidates(k, d, workers, distinct) for k in keys], (d, workers, distinct)
    assert candidate_rows([], 2, 5, True).shape == (0, 2)
    with pytest.raises(ValueError, match="cannot draw 3 distinct workers out of 2"):
        candidate_rows(["a"], 3, 2, True)


def test_batch_hashing_refuses_a_key_that_is_not_valid_unicode():
    """A lone surrogate has no UTF-8 bytes: the batch raises (mmh3 5.3.1 itself crashes the process on one, so it
    is not called here; the dataset readers decode with errors="replace" and never produce one)."""
    with pytest.raises(UnicodeEncodeError):
        candidate_rows(["ok", "a\ud800"], 2, 4, True)
