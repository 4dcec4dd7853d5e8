"""Properties every grouping must have, and the spec language's errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.errors import SpecError
from keysplit.groupings import available, build_grouping
from keysplit.hashing import choices, distinct_choices

keys = st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=200)


@pytest.mark.parametrize("name", [n for n in available() if n != "offgreedy"])
@settings(max_examples=30, deadline=None)
@given(stream=keys, workers=st.integers(2, 40), sources=st.integers(1, 4))
def test_every_grouping_returns_a_worker_in_range(name, stream, workers, sources):
    groupings = build_grouping(name, workers, sources)
    for i, key in enumerate(stream):
        w = groupings[i % sources].choose(key, i / 100.0)
        assert isinstance(w, int) and 0 <= w < workers


@settings(max_examples=50, deadline=None)
@given(stream=keys, workers=st.integers(1, 40), d=st.integers(1, 6))
def test_kg_and_pkg_never_leave_the_keys_candidates(stream, workers, d):
    d = min(d, workers)
    [kg] = build_grouping("kg", workers)
    [pkg] = build_grouping(f"pkg:d={d}", workers)
    [paper] = build_grouping(f"pkg:d={d},distinct=false", workers)
    for i, key in enumerate(stream):
        assert kg.choose(key, i) == choices(key, 1, workers)[0]
        assert pkg.choose(key, i) in distinct_choices(key, d, workers)
        assert paper.choose(key, i) in choices(key, d, workers)


def test_offgreedy_uses_the_full_pass():
    [g] = build_grouping("offgreedy", 3)
    g.fit({"a": 10, "b": 6, "c": 5, "d": 1})
    assert [g.choose(k, 0) for k in "abcd"] == [0, 1, 2, 2]


def test_pkg_splits_a_hot_key_over_its_two_choices():
    [g] = build_grouping("pkg", 10)
    sent = {g.choose("the", i) for i in range(100)}
    assert sent == set(distinct_choices("the", 2, 10)) and len(sent) == 2


def test_with_distinct_false_a_key_whose_choices_coincide_is_not_split():
    """The demo's k1 at W=8: its two independent hashes are both worker 7 (docs/groupings/index.md, hash choices)."""
    assert choices("k1", 2, 8) == [7, 7]
    [paper] = build_grouping("pkg:distinct=false", 8)
    [storm] = build_grouping("pkg", 8)
    assert {paper.choose("k1", i) for i in range(50)} == {7}
    assert {storm.choose("k1", i) for i in range(50)} == set(distinct_choices("k1", 2, 8)) and len(
        distinct_choices("k1", 2, 8)) == 2


def test_global_oracle_shares_one_load_vector():
    a, b = build_grouping("pkg:load=global", 4, 2)
    a.choose("x", 0)
    assert a.local_loads is b.local_loads and sum(b.local_loads) == 1


def test_probe_resets_the_estimate_to_the_true_loads():
    [g] = build_grouping("pkg:probe=10,probe_scale=total", 3)
    g.attach_probe(lambda: [100, 0, 0])
    g.choose("k", 5.0)
    assert sum(g.local_loads) == 1  # no probe before t = 10 s
    g.choose("k", 10.0)
    assert sum(g.local_loads) == 101  # probed at t = 10, then routed one


@pytest.mark.parametrize(
    ("spec", "workers", "message"),
    [
        ("nope", 4, "unknown grouping 'nope'; valid groupings: kg, sg, pkg"),
        ("pkg:d=5", 4, "d=5 exceeds the number of workers (4)"),
        ("pkg:d=0", 4, "d=0 is out of range"),
        ("pkg:x=1", 4, "pkg has no parameter 'x'; valid parameters: d, load, probe"),
        ("pkg:d=two", 4, "d='two' is not a valid int"),
        ("pkg:load=global,probe=5", 4, "probe applies to load=local only"),
        ("kg", 0, "number of workers must be at least 1"),
        ("pkg:d", 4, "expected key=value"),
        ("pkg:distinct=maybe", 4, "distinct='maybe' is not a valid boolean"),
        ("salt:k=5", 4, "salt: k=5 exceeds the number of workers (4)"),
        ("salt:seed=-1", 4, "seed=-1 is out of range"),
    ],
)
def test_bad_specs_say_what_is_wrong(spec, workers, message):
    with pytest.raises(SpecError, match=None) as err:
        build_grouping(spec, workers, 1)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_describe_round_trips_to_the_same_grouping():
    [g] = build_grouping("PKG: d=4 , load=global", 8)
    assert g.describe() == "pkg:d=4,load=global"
    [again] = build_grouping(g.describe(), 8)
    assert again.describe() == g.describe()
    [paper] = build_grouping("pkg:distinct=FALSE", 8)
    assert paper.describe() == "pkg:distinct=false" and not build_grouping(paper.describe(), 8)[0].distinct


def test_salt_picks_each_candidate_at_random_without_load_information():
    [a, b] = build_grouping("salt:k=4", 10, 2)
    sent = [a.choose("hot", i) for i in range(4000)]
    cands = a.candidates("hot")
    assert len(set(cands)) == 4 and set(sent) == set(cands)
    shares = [sent.count(c) / len(sent) for c in cands]
    assert max(shares) - min(shares) < 0.06  # uniform, not steered by loads
    assert [b.choose("hot", i) for i in range(50)] != sent[:50]  # each source has its own generator
    [again] = build_grouping("salt:k=4", 10, 1)
    assert [again.choose("hot", i) for i in range(4000)] == sent  # seeded: the same run twice


def test_probing_from_a_unix_clock_jumps_to_the_next_probe_instead_of_walking():
    """A Storm router passes wall-clock time: the first probe must not step through 10^8 intervals."""
    [g] = build_grouping("pkg:probe=10", 3)
    g.attach_probe(lambda: [0, 0, 0])
    g.choose("k", 1.7e9 + 3.0)
    assert g._next_probe == 1.7e9 + 10.0
    g.choose("k", 1.7e9 + 25.0)
    assert g._next_probe == 1.7e9 + 30.0
