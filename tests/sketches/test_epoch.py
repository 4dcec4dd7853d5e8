"""FISH's epoch-based hot-key counter (FISH §4.1.1, Algorithm 1): counting, replacement, decay, drift."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.datasets import open_dataset
from keysplit.sketches.epoch import EpochCounter

DRIFT = "drift:z=1.0,keys=1000,messages=60000,seed=3,change=0.5"


def drift_keys() -> list[str]:
    return [k for _, ks in open_dataset(DRIFT).records() for k in ks]


def test_alpha_one_never_forgets_and_counts_exactly_while_the_table_has_room():
    """alpha = 1: no decay; with fewer distinct keys than capacity the counters are the exact counts."""
    keys = [f"k{i % 37}" for i in range(5000)] + ["k0"] * 100
    c = EpochCounter(epoch=100, capacity=50, alpha=1.0)
    for k in keys:
        c.update(k)
    assert c.epochs == len(keys) // 100 - 1  # the last epoch is still open
    assert c.counts == {k: float(n) for k, n in Counter(keys).items()}
    assert c.total == len(keys)
    assert c.frequency("k0") == Counter(keys)["k0"] / len(keys)


def test_alpha_zero_forgets_everything_at_each_epoch_end():
    c = EpochCounter(epoch=10, capacity=100, alpha=0.0)
    for _ in range(10):
        c.update("old")
    assert c.frequency("old") == 1.0
    c.update("new")  # opens epoch 2: everything before is gone
    assert c.counts == {"new": 1.0}
    assert c.frequency("old") == 0.0 and c.frequency("new") == 1.0


def test_decay_multiplies_every_counter_by_alpha_at_the_epoch_end():
    c = EpochCounter(epoch=6, capacity=10, alpha=0.25)
    for k in "aaaabb":
        c.update(k)
    assert c.counts == {"a": 4.0, "b": 2.0}
    c.update("c")
    assert c.counts == {"a": 1.0, "b": 0.5, "c": 1.0}
    assert c.total == 2.5 and c.max_count == 1.0


def test_a_new_key_replaces_the_minimum_and_starts_from_it_plus_one():
    """ReplaceMin (Alg. 1): the least counted key leaves; the new key starts at its count + 1, not 1."""
    c = EpochCounter(epoch=1000, capacity=3, alpha=0.5)
    for k in "aaabbc":
        c.update(k)
    assert c.update("d") == 2.0  # replaced "c" (count 1)
    assert set(c.counts) == {"a", "b", "d"}
    assert c.update("e") == 3.0  # now the minimum is 2 ("b" or "d"; ties by key: "b")
    assert set(c.counts) == {"a", "d", "e"}
    assert c.total == 8.0  # a replacement adds exactly one to the sum of counters


def test_memory_is_bounded_by_capacity_on_a_stream_of_many_distinct_keys():
    c = EpochCounter(epoch=1000, capacity=200, alpha=0.5)
    for i in range(50_000):
        c.update(f"key{i * 7919 % 40_000}")
        assert len(c) <= 200
    assert len(c._heap) == len(c.counts)


def test_frequencies_sum_to_one_and_f_max_is_the_top_keys():
    c = EpochCounter(epoch=300, capacity=50, alpha=0.5)
    for k in drift_keys()[:7000]:
        c.update(k)
    assert sum(c.frequency(k) for k in c.counts) == pytest.approx(1.0)
    top_key, top_count = c.top(1)[0]
    assert c.f_max == pytest.approx(c.frequency(top_key)) and top_count == c.max_count


def _tuples_until_top(keys: list[str], start: int, key: str, alpha: float, epoch: int = 1000) -> int:
    c = EpochCounter(epoch=epoch, capacity=1000, alpha=alpha)
    for i, k in enumerate(keys):
        c.update(k)
        if i >= start and c.counts.get(key) == c.max_count:
            return i - start
    return len(keys) - start


def test_a_new_hot_key_is_detected_within_an_epoch_or_two_after_a_drift():
    """Observation 1 / §4.1: with decay the new top key overtakes the old one within 2 epochs of the drift;
    without decay (alpha = 1, lifetime counting as in D-/W-Choices) it takes many epochs."""
    keys = drift_keys()
    change = len(keys) // 2
    new_top = Counter(keys[change:]).most_common(1)[0][0]
    assert Counter(keys[:change]).most_common(1)[0][0] != new_top
    decayed = _tuples_until_top(keys, change, new_top, alpha=0.5)
    lifetime = _tuples_until_top(keys, change, new_top, alpha=1.0)
    assert decayed <= 2 * 1000
    assert lifetime > 10 * 1000


def test_rejects_bad_parameters():
    with pytest.raises(ValueError, match="epoch"):
        EpochCounter(epoch=0)
    with pytest.raises(ValueError, match="capacity"):
        EpochCounter(capacity=0)
    with pytest.raises(ValueError, match="alpha"):
        EpochCounter(alpha=1.5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=1, max_size=400), st.integers(1, 12))
def test_without_decay_it_is_space_saving(stream, capacity):
    """alpha = 1 within one epoch is SpaceSaving: counters never under-count, sum to n, and every key with
    more than n/capacity occurrences is kept."""
    keys = [f"k{x}" for x in stream]
    c = EpochCounter(epoch=10**9, capacity=capacity, alpha=1.0)
    for k in keys:
        c.update(k)
    true = Counter(keys)
    assert len(c) <= capacity
    assert c.total == len(keys) == sum(c.counts.values())
    assert c.max_count == max(c.counts.values())
    for k, v in c.counts.items():
        assert v >= true[k]
    for k, n in true.items():
        if n > len(keys) / capacity:
            assert k in c.counts
