"""Lossy counting (Manku & Motwani) and Gedik's 3-counter sliding-window emulation (Fig. 2): the guarantees."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.errors import KeysplitError
from keysplit.sketches.lossy import LossyCounter, SlidingLossyCounter


def zipf_stream(n: int, keys: int, z: float = 1.0, seed: int = 7) -> list[str]:
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, keys + 1) ** z
    return [f"k{i}" for i in rng.choice(keys, size=n, p=w / w.sum())]


@pytest.mark.parametrize("epsilon", [0.01, 0.002])
def test_undercount_at_most_epsilon_n_and_no_false_negatives(epsilon):
    stream = zipf_stream(40_000, 5_000)
    lc = LossyCounter(epsilon)
    lc.update_many(stream)
    truth = Counter(stream)
    n = len(stream)
    for key, true in truth.items():
        est = lc.count(key)
        assert est <= true  # never overcounts
        assert true - est <= epsilon * n  # undercount <= eps * N
        if true > epsilon * n:
            assert key in lc  # every item above eps*N is in memory
    for support in (epsilon, 2 * epsilon, 0.05):  # lossy counting answers supports s >= epsilon
        reported = lc.frequent(support)
        assert {k for k, c in truth.items() if c >= support * n} <= set(reported)  # no false negatives
        assert all(truth[k] >= (support - epsilon) * n for k in reported)  # nothing far below the threshold


def test_size_is_bounded_by_one_over_epsilon_log_epsilon_n():
    epsilon = 0.005
    lc = LossyCounter(epsilon)
    peak = 0
    for i, key in enumerate(zipf_stream(60_000, 50_000, z=0.7), 1):
        lc.update(key)
        peak = max(peak, len(lc))
        if i % 5_000 == 0:
            assert len(lc) <= (1 / epsilon) * math.log(epsilon * i) + 1 / epsilon
    assert peak < 60_000 / 4  # far below the distinct keys seen
    assert peak <= lc.peak <= peak + 1  # the sketch's own peak is taken just before a bucket closes


def test_all_distinct_keys_never_hold_more_than_one_bucket():
    lc = LossyCounter(0.01)
    for i in range(10_000):
        lc.update(f"x{i}")
        assert len(lc) <= lc.width  # each entry dies at the end of its bucket
    assert lc.width == 100


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=600), st.sampled_from([0.05, 0.1, 0.2]))
def test_guarantees_hold_on_any_stream(keys, epsilon):
    lc = LossyCounter(epsilon)
    lc.update_many(keys)
    truth = Counter(keys)
    for key, true in truth.items():
        assert true - epsilon * len(keys) <= lc.count(key) <= true
        assert lc.count(key) + lc.error(key) >= true or key not in lc


def test_bad_epsilon_is_refused():
    for eps in (0, 1, -0.1, 1.5):
        with pytest.raises(KeysplitError, match="epsilon must be strictly between 0 and 1"):
            LossyCounter(eps)
    with pytest.raises(KeysplitError, match="at least 2 counters"):
        SlidingLossyCounter(0.1, 100, counters=1)


def test_sliding_active_counter_covers_between_w_and_three_halves_w():
    window = 300
    s = SlidingLossyCounter(0.01, window)
    for i in range(3_000):
        s.update(f"k{i % 17}")
        n = i + 1
        if n >= window:
            assert window <= s.active.n <= 1.5 * window
        else:
            assert s.active.n == n  # initialisation: everything seen so far (footnote 2)


def test_x_counters_approach_a_true_sliding_window():
    window = 400
    for x in (2, 3, 5):
        s = SlidingLossyCounter(0.01, window, counters=x)
        sizes = []
        for i in range(5_000):
            s.update(i % 7)
            if i >= window:
                sizes.append(s.active.n)
        assert max(sizes) <= math.ceil((1 + 1 / (x - 1)) * window)  # (1 + 1/(x-1)) W upper range
        assert min(sizes) >= window


def test_sliding_window_forgets_old_hot_keys_and_finds_new_ones():
    window = 1_000
    s = SlidingLossyCounter(0.01, window)
    first = zipf_stream(5_000, 200, seed=1)
    second = [k.replace("k", "n") for k in zipf_stream(5_000, 200, seed=2)]
    s.update_many(first)
    assert "k0" in s.frequent(0.05)
    s.update_many(second[: int(1.5 * window)])
    hot = s.frequent(0.05)
    assert "n0" in hot and "k0" not in hot
    # the active counter's answers obey the guarantees for the items it covers
    covered = (first + second[: int(1.5 * window)])[-s.active.n:]
    truth = Counter(covered)
    assert {k for k, c in truth.items() if c >= 0.05 * len(covered)} <= set(hot)
