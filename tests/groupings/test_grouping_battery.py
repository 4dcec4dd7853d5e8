"""One battery over every registered grouping (river's ``checks/``, Storm's grouping tests): the protocol's
promises and those of each optional hook the grouping has (``groupings/base.py``).

- every choice is a worker index in ``[0, W)``;
- two builds with the same spec, the same keys and the same ``now``s decide the same (no clock, no ``hash()``);
- ``describe`` round trip: spec -> grouping -> ``describe()`` -> grouping decides as the first one did;
- :class:`Candidates`: every choice is among the key's candidates (asked just before or just after it);
- :class:`SharedState`: a fresh instance that imports the exported state decides as the exporter does;
- :class:`Resizable`: after ``resize(W')`` every choice is below ``W'``, shrinking and growing.

A grouping joins the battery by being registered: the specs below add variants (probing, global loads) to each
registered name, and the first test fails when a registered name has none.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from keysplit.groupings import REGISTRY
from keysplit.groupings.base import BaseGrouping, Candidates, Resizable, SharedState
from keysplit.groupings.hosting import prepare_groupings

WORKERS, SOURCES = 7, 3
#: Every registered grouping with its defaults, and variants that reach other code paths or hooks.
SPECS = [*REGISTRY, "pkg:d=3", "pkg:load=global", "pkg:probe=0.05", "salt:k=3", "gedik:period=0.2,window=200",
         "fish:epoch=50", "dkg:warmup=0.1,check_interval=0.1,promote_teenage=0.05,promote_old=0.1"]


def stream(n: int = 3000, seed: int = 7) -> list[tuple[str, float]]:
    """Skewed keys (a few hot ones and a long tail) with rising event times."""
    rng = random.Random(seed)
    keys = [f"k{int(rng.paretovariate(1.1))}" if rng.random() < 0.7 else f"t{rng.randrange(5000)}" for _ in range(n)]
    return [(k, i / 1000.0) for i, k in enumerate(keys)]


STREAM = stream()


def build(spec: str, workers: int = WORKERS, sources: int = SOURCES) -> list[BaseGrouping]:
    """One instance per source, with the hooks a host connects (frequencies, a probe, capacities)."""
    true_loads = [0] * workers  # the probe reads what the battery routed so far

    groupings = prepare_groupings(spec, workers, sources, true_loads=lambda: list(true_loads),
                                  capacities=[100.0 + 10 * w for w in range(workers)],
                                  frequencies=Counter(k for k, _ in STREAM))
    for g in groupings:
        g.battery_loads = true_loads  # type: ignore[attr-defined]
    return groupings


def decide(groupings: list[BaseGrouping], messages: list[tuple[str, float]], first: int = 0) -> list[int]:
    """The choices for ``messages``, message i at source ``(first + i) % S``."""
    out = []
    for i, (key, now) in enumerate(messages):
        g = groupings[(first + i) % len(groupings)]
        w = g.choose(key, now)
        loads = g.battery_loads  # type: ignore[attr-defined]
        if w < len(loads):
            loads[w] += 1
        out.append(w)
    return out


def test_every_registered_grouping_is_in_the_battery():
    assert set(REGISTRY) <= {spec.partition(":")[0] for spec in SPECS}


@pytest.mark.parametrize("spec", SPECS)
def test_choices_are_in_range_and_two_builds_decide_alike(spec):
    first, second = decide(build(spec), STREAM), decide(build(spec), STREAM)
    assert all(isinstance(w, int) and 0 <= w < WORKERS for w in first)
    assert first == second


@pytest.mark.parametrize("spec", SPECS)
def test_describe_round_trips(spec):
    original = build(spec)
    described = original[0].describe()
    again = build(described)
    assert again[0].describe() == described
    assert decide(again, STREAM) == decide(original, STREAM)


@pytest.mark.parametrize("spec", [s for s in SPECS if isinstance(build(s)[0], Candidates)])
def test_every_choice_is_among_the_keys_candidates(spec):
    groupings = build(spec)
    for i, (key, now) in enumerate(STREAM):
        g = groupings[i % SOURCES]
        before = set(g.candidates(key))  # type: ignore[attr-defined]
        w = g.choose(key, now)
        assert w in before | set(g.candidates(key)), (key, w)  # type: ignore[attr-defined]


@pytest.mark.parametrize("spec", [s for s in SPECS if isinstance(build(s)[0], SharedState)])
def test_a_fresh_instance_that_imports_the_state_decides_the_same(spec):
    [leader] = build(spec, sources=1)
    leader.set_role("leader")  # type: ignore[attr-defined]
    half = len(STREAM) // 2
    decide([leader], STREAM[:half])
    state = leader.export_state()  # type: ignore[attr-defined]
    if "period=0.2" in spec:  # the variant that rebuilds within the stream: the state exported is not the first
        assert leader.state_version > 0  # type: ignore[attr-defined]
    [fresh] = build(spec, sources=1)
    fresh.set_role("follower")  # type: ignore[attr-defined]
    fresh.import_state(state)  # type: ignore[attr-defined]
    assert fresh.state_version == leader.state_version  # type: ignore[attr-defined]
    leader.set_role("follower")  # type: ignore[attr-defined]
    assert decide([fresh], STREAM[half:]) == decide([leader], STREAM[half:])


@pytest.mark.parametrize("spec", [s for s in SPECS if isinstance(build(s)[0], Resizable)])
@pytest.mark.parametrize("new_workers", [3, 11])
def test_after_a_resize_every_choice_is_below_the_new_worker_count(spec, new_workers):
    groupings = build(spec)
    third = len(STREAM) // 3
    decide(groupings, STREAM[:third])
    for g in groupings:
        g.resize(new_workers)  # type: ignore[attr-defined]
    after = decide(groupings, STREAM[third:], first=third)
    assert all(0 <= w < new_workers for w in after)
    if new_workers > WORKERS:
        assert max(after) >= WORKERS, "the new workers get messages"
