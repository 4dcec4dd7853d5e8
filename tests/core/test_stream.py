"""The stream's rules (keysplit.stream): each vectorised twin gives what its scalar rule gives, message for message.

The simulator's numba routing kernel keeps its own copy of two of them (a round-robin source counter and
``(seq0 + i) / rate``, since an njit kernel cannot call numpy-level Python): ``tests/simulator/test_fast.py`` proves the
kernel's decisions equal to the reference path's, which calls the scalar rules, on both splits and with probes.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from keysplit.simulator.hashing_batch import hash_many
from keysplit.stream import event_time, event_times, key_source, key_sources, source_of, sources_of

rng = random.Random(11)
KEYS = ["", "a", "storm", "clé", "😀", *(f"k{rng.randrange(10**6)}" for _ in range(500))]


@pytest.mark.parametrize("sources", [1, 2, 3, 7])
def test_key_sources_are_key_source_with_either_hasher(sources):
    expected = [key_source(k, sources) for k in KEYS]
    assert key_sources(KEYS, sources).tolist() == expected
    assert key_sources(KEYS, sources, hash_many).tolist() == expected  # the simulator's compiled murmur3


@pytest.mark.parametrize("split", ["shuffle", "key"])
@pytest.mark.parametrize("sources", [1, 4])
def test_sources_of_is_source_of(split, sources):
    first_keys = [rng.choice(KEYS) for _ in range(300)]
    indices = np.arange(1000, 1300)
    got = sources_of(indices, key_sources(first_keys, sources), sources, split)
    assert got.tolist() == [source_of(int(i), k, sources, split) for i, k in zip(indices, first_keys)]


def test_sources_of_key_split_needs_the_first_keys_sources():
    with pytest.raises(ValueError, match="first keys"):
        sources_of(np.arange(3), None, 2, "key")


def test_event_times_are_event_time():
    seq = np.arange(5000, 5400, dtype=np.int64)
    ts = np.array([rng.uniform(0, 100) for _ in seq])
    has = np.array([rng.random() < 0.5 for _ in seq])
    for rate in (1.0, 3.0, 10_000.0):
        assert event_times(seq, rate).tolist() == [event_time(None, int(s), rate) for s in seq]
        assert event_times(seq, rate, ts, has).tolist() == [
            event_time(float(t) if h else None, int(s), rate) for s, t, h in zip(seq, ts, has)]
        assert event_times(seq, rate, ts).tolist() == ts.tolist()
