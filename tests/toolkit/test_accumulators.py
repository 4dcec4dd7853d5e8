"""The accumulators obey the contract the merge relies on (Spark's aggregateByKey, Flink's AggregateFunction): any
split of a key's records into partial states, merged in any order, gives the result of one pass over them all."""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.sketches.spacesaving import SpaceSaving
from keysplit.toolkit import Accumulator, AccumulatorError, Count, HeavyHitters, Sum, TopK
from keysplit.toolkit.accumulators import check_accumulator, load_accumulator

ACCUMULATORS = [Count(), Sum("bytes"), TopK("bytes", k=3), HeavyHitters("user", capacity=64, k=5)]
records = st.lists(st.fixed_dictionaries({"bytes": st.integers(0, 10_000).map(str),
                                          "user": st.sampled_from("abcdefgh")}), max_size=60)


def one_pass(acc: Accumulator, rows: list) -> object:
    state = acc.zero()
    for row in rows:
        state = acc.add(state, row)
    return state


@pytest.mark.parametrize("acc", ACCUMULATORS, ids=repr)
@settings(max_examples=60, deadline=None)
@given(rows=records, cuts=st.lists(st.integers(0, 60), max_size=4), order=st.randoms())
def test_merging_partial_states_in_any_order_gives_one_pass(acc, rows, cuts, order):
    bounds = sorted({0, len(rows), *(c for c in cuts if c <= len(rows))})
    parts = [one_pass(acc, rows[a:b]) for a, b in pairwise(bounds)]
    order.shuffle(parts)
    merged = acc.zero()
    for part in parts:
        merged = acc.merge(merged, json.loads(json.dumps(part)))  # states cross processes as JSON text
    if isinstance(acc, HeavyHitters):  # fewer distinct values than counters: the sketch counts exactly
        assert SpaceSaving.from_state(merged).counts() == Counter(r["user"] for r in rows)
    else:
        assert acc.result(merged) == acc.result(one_pass(acc, rows))


def test_heavy_hitters_keep_spacesavings_bound_after_merging():
    """Over more distinct values than counters, each estimate stays within n / capacity above the truth."""
    acc = HeavyHitters("user", capacity=8, k=3)
    rows = [{"user": f"u{i % 40}" if i % 3 else "hot"} for i in range(600)]
    merged = acc.merge(one_pass(acc, rows[:250]), one_pass(acc, rows[250:]))
    truth = Counter(r["user"] for r in rows)
    (top, estimate), *_ = acc.result(merged)
    assert top == "hot" and truth["hot"] <= estimate <= truth["hot"] + len(rows) / 8


@settings(max_examples=60, deadline=None)
@given(users=st.lists(st.sampled_from("abcdefghijklmnop"), max_size=80), back=st.lists(st.integers(0, 79), max_size=5))
def test_heavy_hitters_add_is_the_sketch_rebuilt_from_its_state_and_leaves_its_input_alone(users, back):
    """``add`` keeps a live sketch per state it returned instead of rebuilding one from JSON per row: the states
    are those of the rebuild, whatever order states are added to (a partial goes back to an older state when a
    batch is refused), and no state given to ``add`` changes."""
    acc = HeavyHitters("user", capacity=6, k=3)
    states = [acc.zero()]
    for i, user in enumerate(users):
        start = states[back[i % len(back)] % len(states)] if back and i % 7 == 3 else states[-1]
        before = json.dumps(start)
        reference = SpaceSaving.from_state(json.loads(before))
        reference.update(user)
        out = acc.add(start, {"user": user})
        assert json.dumps(start) == before and out == reference.state()
        states.append(out)


def test_heavy_hitters_rebuild_a_sketch_once_per_run_of_rows_not_once_a_row(monkeypatch):
    built = []
    original = SpaceSaving.from_state.__func__

    def counted(cls, state):
        built.append(1)
        return original(cls, state)

    monkeypatch.setattr(SpaceSaving, "from_state", classmethod(counted))
    acc = HeavyHitters("user", capacity=100)
    state = acc.zero()
    for i in range(1000):
        state = acc.add(state, {"user": f"u{i % 300}"})
    assert len(built) == 1 and state["n"] == 1000


def test_an_accumulator_is_rebuilt_from_its_description():
    for acc in ACCUMULATORS:
        assert load_accumulator(acc.describe()).describe() == acc.describe()


def test_a_value_that_is_not_a_number_is_a_clear_error():
    with pytest.raises(AccumulatorError, match="field 'bytes' holds 'lots', not a number"):
        Sum("bytes").add(0, {"bytes": "lots"})
    with pytest.raises(AccumulatorError, match="not a finite number"):
        Sum("bytes").add(0, {"bytes": "nan"})


class Local:  # not an Accumulator at all
    pass


def test_what_worker_processes_cannot_rebuild_is_refused():
    with pytest.raises(AccumulatorError, match="a function or lambda cannot reach the worker processes"):
        check_accumulator(lambda acc, t: acc + 1, "Aggregate.partial")

    class Inner(Accumulator):
        def zero(self):
            return 0

    with pytest.raises(AccumulatorError, match="top level of an importable module"):
        check_accumulator(Inner(), "Aggregate.partial")
    with pytest.raises(AccumulatorError, match="must be an Accumulator"):
        check_accumulator(Local(), "Aggregate.partial")
