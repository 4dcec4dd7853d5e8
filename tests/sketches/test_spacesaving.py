"""SpaceSaving's guarantees (Metwally et al. 2005; merge: Agarwal et al., "Mergeable summaries"), as properties."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.sketches.spacesaving import SpaceSaving

# Small alphabets so that streams repeat keys and the sketch is full most of the time.
keys = st.sampled_from([f"k{i}" for i in range(30)])
streams = st.lists(keys, max_size=400)
capacities = st.integers(min_value=1, max_value=12)


def build(stream: list[str], capacity: int) -> SpaceSaving:
    s = SpaceSaving(capacity)
    s.update_many(stream)
    return s


def assert_guarantees(s: SpaceSaving, truth: Counter) -> None:
    n = sum(truth.values())
    assert s.n == n
    assert len(s) <= s.capacity
    assert sum(s.counts().values()) <= n  # the invariant that keeps min_count <= n/k
    assert s.min_count * s.capacity <= n
    for key in set(truth) | set(s.counts()):
        f = truth[key]
        est = s.estimate(key)
        assert f <= est, f"{key}: estimate {est} below the true {f}"
        assert est - f <= n / s.capacity, f"{key}: estimate {est} exceeds {f} + n/k"
        assert s.guaranteed(key) <= f, f"{key}: lower bound {s.guaranteed(key)} above the true {f}"
        if f * s.capacity > n:
            assert key in s, f"{key} has frequency {f} > n/k = {n / s.capacity} but is not monitored"


@settings(max_examples=300, deadline=None)
@given(streams, capacities)
def test_estimate_minus_true_at_most_n_over_k_and_heavy_keys_present(stream, capacity):
    assert_guarantees(build(stream, capacity), Counter(stream))


@settings(max_examples=300, deadline=None)
@given(streams, streams, capacities)
def test_merge_of_two_sub_streams_keeps_the_bound_for_the_whole_stream(left, right, capacity):
    merged = build(left, capacity).merge(build(right, capacity))
    assert_guarantees(merged, Counter(left) + Counter(right))


@settings(max_examples=150, deadline=None)
@given(streams, streams, streams, capacities)
def test_updates_after_a_merge_and_merging_three_ways_keep_the_bound(a, b, c, capacity):
    merged = build(a, capacity).merge(build(b, capacity))
    merged.update_many(c)
    assert_guarantees(merged, Counter(a) + Counter(b) + Counter(c))
    three = build(a, capacity).merge(build(b, capacity)).merge(build(c, capacity))
    assert_guarantees(three, Counter(a) + Counter(b) + Counter(c))


@settings(max_examples=100, deadline=None)
@given(streams)
def test_with_room_for_every_key_the_counts_are_exact(stream):
    s = build(stream, capacity=30)
    assert s.counts() == dict(Counter(stream))
    assert all(err == 0 for _, _, err in s.items())


def test_offer_returns_the_new_estimate_and_an_unmonitored_key_replaces_the_minimum():
    s = SpaceSaving(capacity=2)
    assert [s.update(k) for k in "aab"] == [1, 2, 1]
    assert s.update("c") == 2  # b (count 1) is replaced; c starts from 1 + 1 with error 1
    assert "b" not in s and s.error("c") == 1 and s.guaranteed("c") == 1
    assert s.top() == [("a", 2), ("c", 2)]


def test_zipf_heavy_hitters_found_within_the_bound_on_a_long_stream():
    from keysplit.datasets import open_dataset

    stream = [k for _, k in open_dataset("zipf:z=1.2,keys=100000,messages=200000,seed=3").messages()]
    truth = Counter(stream)
    s = build(stream, capacity=100)
    assert_guarantees(s, truth)
    # the true top 10 of a skewed stream are the sketch's top 10
    assert {k for k, _ in s.top(10)} == {k for k, _ in truth.most_common(10)}


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        SpaceSaving(0)
