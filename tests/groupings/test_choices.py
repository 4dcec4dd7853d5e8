"""D-Choices and W-Choices (Nasir et al., ICDE 2016): the head gets more than two choices, the tail stays PKG."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.datasets import open_dataset
from keysplit.errors import SpecError
from keysplit.groupings import build_grouping, paper_setting
from keysplit.groupings.choices import choose_d
from keysplit.hashing import choices, distinct_choices
from keysplit.simulator import simulate


def zipf(z: float, messages: int = 100_000, keys: int = 10_000, seed: int = 1):
    return open_dataset(f"zipf:z={z},keys={keys},messages={messages},seed={seed}")


@pytest.fixture(scope="module")
def skewed_runs():
    """Zipf z=1.4 (p1 ~ 0.33): with W = 20 and 50 workers, W > 2/p1, so two choices cannot hold the top key."""
    ds = zipf(1.4)
    return {
        (spec, w): simulate(ds, paper_setting(spec), w, sources=5, messages_hint=100_000)
        for w in (20, 50)
        for spec in ("pkg", "dchoices", "wchoices", "sg")
    }


@pytest.mark.parametrize("workers", [20, 50])
def test_dchoices_and_wchoices_keep_imbalance_low_where_pkg_collapses(skewed_runs, workers):
    pkg = skewed_runs["pkg", workers].avg_imbalance_fraction
    assert pkg > 0.05, f"PKG should collapse at W={workers} on zipf 1.4, got {pkg:.3g}"
    for spec in ("dchoices", "wchoices"):
        imb = skewed_runs[spec, workers].avg_imbalance_fraction
        assert imb < 0.01, f"{spec} W={workers}: average imbalance {imb:.3g}"
        assert imb < pkg / 50


def test_memory_order_wchoices_above_dchoices_above_pkg_below_sg(skewed_runs):
    cost = {spec: skewed_runs[spec, 50].dist_cost for spec in ("pkg", "dchoices", "wchoices", "sg")}
    assert cost["pkg"] < cost["dchoices"] < cost["wchoices"] < cost["sg"], cost


def test_d_chosen_grows_with_skew():
    ds_d = {}
    for z in (0.8, 1.2, 1.6, 2.0):
        [g] = build_grouping("dchoices", workers=50)
        for i, (_, key) in enumerate(zipf(z, messages=30_000).messages()):
            g.choose(key, i / 10_000)
        ds_d[z] = g.d
    values = [ds_d[z] for z in sorted(ds_d)]
    assert values == sorted(set(values)), ds_d  # strictly more choices with more skew
    assert values[0] <= 6 and values[-1] >= 40, ds_d  # z = 0.8: a few choices; z = 2 (p1 ~ 0.6): nearly all


def test_choose_d_satisfies_the_bound_and_grows_with_p1():
    def holds(p1, ph, h, w, d, eps=1e-4):
        b = (w - 1) / w
        x, y = b ** (h * d), 1 - b**d
        return (ph + (1 - ph) * (1 - x) ** 2 <= 1 - x + eps
                and p1 + (ph - p1) * y**d + (1 - ph) * y**2 <= y + eps)

    previous = 2
    for p1 in (0.02, 0.05, 0.1, 0.15, 0.2, 0.3):
        d = choose_d(p1, p_head=p1 + 0.1, head_size=4, workers=100)
        assert d >= previous
        assert 2 <= d <= 100
        if d < 100:
            assert holds(p1, p1 + 0.1, 4, 100, d)
            # d is the smallest acceptable value at or above the starting point round(p1*W)
            start = max(2, round(p1 * 100))
            assert all(not holds(p1, p1 + 0.1, 4, 100, k) for k in range(start, d))
        previous = d


def test_tail_is_pkg_when_nothing_is_in_the_head():
    """theta = 1: no key's frequency exceeds it, so every decision is PKG's (same hashes, same loads)."""
    keys = [k for _, k in zipf(1.2, messages=20_000).messages()]
    [d], [w], [p] = (build_grouping(s, workers=7) for s in ("dchoices:theta=1", "wchoices:theta=1", "pkg"))
    for i, key in enumerate(keys):
        expected = p.choose(key, i / 1000)
        assert d.choose(key, i / 1000) == expected == w.choose(key, i / 1000)
    assert not d.head_keys and not w.head_keys


def test_head_holds_the_keys_above_theta():
    [g] = build_grouping("dchoices", workers=10)  # theta = 1/50
    stream = [k for _, k in zipf(1.0, messages=50_000).messages()]
    for i, key in enumerate(stream):
        g.choose(key, i / 10_000)
    g.refresh_head()
    freq = {k: stream.count(k) / len(stream) for k in {"k1", "k2", "k3", "k4", "k5", "k10"}}
    assert {k for k, f in freq.items() if f > 0.025} <= g.head_keys  # clearly above theta: in the head
    assert not {k for k, f in freq.items() if f < 0.015} & g.head_keys  # clearly below: out
    assert g.theta == pytest.approx(1 / 50)


def test_a_sketch_smaller_than_1_over_theta_cannot_tell_the_head_from_the_tail():
    """SpaceSaving overestimates by at most n/capacity. With 100 counters and theta = 1/(5*64) < 1/100 the least
    counter passes theta*n, so keys that appear once or twice enter the head; ``capacity=auto`` (ceil(1/theta) =
    320 counters) keeps them out while still holding every key clearly above theta."""
    stream = [k for _, k in zipf(1.0, messages=50_000).messages()]
    heads = {}
    for spec in ("wchoices", "wchoices:capacity=auto"):
        [g] = build_grouping(spec, workers=64)
        for i, key in enumerate(stream):
            g.choose(key, i / 10_000)
        g.refresh_head()
        heads[spec] = g.head_keys
    [auto] = build_grouping("wchoices:capacity=auto", workers=64)
    assert auto.capacity == 320
    freq = {k: c / len(stream) for k, c in Counter(stream).items()}
    theta = 1 / 320
    assert any(freq[k] < theta / 4 for k in heads["wchoices"])  # rare keys counted as hot
    assert all(freq[k] > theta / 4 for k in heads["wchoices:capacity=auto"])
    assert {k for k, f in freq.items() if f > 2 * theta} <= heads["wchoices:capacity=auto"]


skewed_keys = st.lists(
    st.one_of(st.just("hot"), st.just("warm"), st.sampled_from([f"t{i}" for i in range(40)])), min_size=1,
    max_size=300,
)


@settings(max_examples=60, deadline=None)
@given(skewed_keys, st.integers(min_value=1, max_value=16),
       st.sampled_from(["dchoices", "wchoices", "dchoices:distinct=false", "wchoices:distinct=false"]))
def test_every_worker_is_one_of_the_keys_candidates(stream, workers, spec):
    [g] = build_grouping(spec, workers=workers)
    for i, key in enumerate(stream):
        w = g.choose(key, float(i))
        assert w in g.candidates(key)
        if key not in g.head_keys:
            assert w in g.tail_candidates(key)
            if g.distinct:  # PKG's H_1, H_2: different workers, or the paper's independent hashes
                assert g.tail_candidates(key) == distinct_choices(key, min(2, workers), workers)
            else:
                assert g.tail_candidates(key) == choices(key, 2, workers)
        elif spec == "dchoices" and g.d < workers:
            assert len(g.candidates(key)) == g.d
    assert sum(g.local_loads) == len(stream)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("dchoices:theta=0", "out of range"),
        ("wchoices:theta=1.5", "out of range"),
        ("dchoices:capacity=0", "out of range"),
        ("wchoices:capacity=many", "not a valid integer \\(or auto\\)"),
        ("dchoices:eps=-1", "out of range"),
        ("dchoices:eps=2", "every d acceptable"),
        ("wchoices:eps=0.1", "no parameter 'eps'"),
        ("dchoices:theta=abc", "not a valid"),
    ],
)
def test_bad_parameters_are_one_line_spec_errors(spec, message):
    with pytest.raises(SpecError, match=message):
        build_grouping(spec, workers=10)


def test_describe_and_help_show_the_parameters():
    [g] = build_grouping("dchoices:capacity=50,theta=0.01", workers=10)
    assert g.describe() == "dchoices:capacity=50,theta=0.01"
    from keysplit.commands.simulate import grouping_help

    text = grouping_help()
    assert "dchoices" in text and "wchoices" in text and "eps=0.0001" in text
