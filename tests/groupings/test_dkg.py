"""Dynamic Key Grouping (Dalabasmaz & Can): Table 1, the key spaces (Alg. 1-3), scaling (Alg. 4-6), Figs. 10/11."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.datasets import open_dataset
from keysplit.errors import SpecError
from keysplit.groupings import build_grouping, paper_setting
from keysplit.groupings.dkg import ideal_load, max_width, scale_threshold
from keysplit.simulator import simulate

# Table 1. Thresholds of ideal loads: machines, ideal load %, threshold load %, max machines.
TABLE_1 = [(5, 20.00, 24.47, 5), (10, 10.00, 13.16, 8), (20, 5.00, 7.24, 14), (50, 2.00, 3.41, 30),
           (100, 1.00, 2.00, 51)]


@pytest.mark.parametrize(("workers", "ideal", "threshold", "most"), TABLE_1)
def test_table_1_thresholds_and_max_machines(workers, ideal, threshold, most):
    assert round(ideal_load(workers), 2) == ideal
    assert round(scale_threshold(workers), 2) == threshold
    assert max_width(workers) == most
    [g] = build_grouping("dkg", workers=workers)
    assert g.max_width == most


# -- Figs. 10/11 on the synthetic country-skew data, W = 10, S = 5 -------------------------------------------
#
# Event time is seq / rate. The paper's runs last thousands of seconds (10M records at a few thousand records/s
# on Storm), and DKG's timers are 15 s (warm-up, Baby cycle) and 60 s (Old cycle, one scaling step per key),
# so a hot key needs ~6 minutes of event time to reach its width. 100,000 messages at 50 msg/s give 2,000 s,
# the paper's time scale, with 600 messages per source between two scaling checks; the claims below hold
# the same at 1M messages and 500 msg/s, it just takes 10x longer.
MESSAGES, RATE = 100_000, 50.0


def country_runs(ratio: float, specs=("kg", "sg", "pkg", "dkg")):
    ds = open_dataset(f"country-skew:ratio={ratio},messages={MESSAGES},seed=1")
    return {s: simulate(ds, paper_setting(s), workers=10, sources=5, rate=RATE, messages_hint=MESSAGES) for s in specs}


@pytest.fixture(scope="module")
def at_80():
    return country_runs(0.8)


def test_fig11_stddev_dkg_below_half_of_pkg_at_80_percent_skew(at_80):
    std = {s: r.load_stddev for s, r in at_80.items()}
    assert std["dkg"] < std["pkg"] / 2, std
    assert std["sg"] < std["dkg"] < std["pkg"] < std["kg"], std  # Fig. 11.b's order at high skew


def test_fig11_distcost_dkg_close_to_pkg_and_far_below_sg_at_80_percent_skew(at_80):
    """Fig. 11.c: "SG produced worst DistCost values. However, other methods produced very similar results".

    The hot key spreads over up to 8 workers and every other key over its 2 candidates, so DKG's DistCost is
    about 2: close to PKG's (whose tail keys stick to the worker beside the two overloaded ones) and KG's 1,
    far from SG's 10. It is not below 1.5 as one might hope: that would need tail keys to stay on one
    worker, which DKG's per-message least-loaded choice does not do once the workers are balanced.
    """
    cost = {s: r.dist_cost for s, r in at_80.items()}
    assert cost["kg"] == 1.0 and cost["sg"] == 10.0
    assert cost["pkg"] < cost["dkg"] < 2.5, cost
    assert cost["dkg"] < cost["sg"] / 4, cost


def test_table3_on_election_like_data_dkg_balances_and_stays_below_1_5_distcost():
    """Table 3 (twitter-election, one key at 68%): std-dev KG 20.3, PKG 12.4, DKG 4.1, SG 0; DistCost KG 1,
    PKG 1.16, DKG 1.24, SG 2.45. A Zipf stream with z = 2.2 has its top key at 67% and a long tail of rare
    keys, and gives the same picture: DKG below half of PKG's std-dev, its DistCost a little above PKG's and
    below 1.5, SG's the highest. (On country-skew DistCost cannot stay that low: there every tail key recurs
    thousands of times and so is seen on both of its candidates; see the test above.)"""
    ds = open_dataset("zipf:z=2.2,keys=1000000,messages=200000,seed=1")
    assert 0.65 < ds.stats()["p1"] < 0.69
    runs = {s: simulate(ds, s, workers=10, sources=5, rate=100.0, messages_hint=200_000)
            for s in ("kg", "sg", "pkg", "dkg")}
    std = {s: r.load_stddev for s, r in runs.items()}
    cost = {s: r.dist_cost for s, r in runs.items()}
    assert std["sg"] < std["dkg"] < std["pkg"] / 2 < std["pkg"] < std["kg"], std
    assert cost["kg"] == 1.0 < cost["pkg"] < cost["dkg"] < 1.5 < cost["sg"], cost


def test_fig10_pkg_is_enough_below_30_percent_and_dkg_wins_above():
    """§6: "DKG should definitely be preferred if the skewness is higher than 30% whereas PKG can be preferred
    with lower skewness values"; and Fig. 11.c's DistCost peak of DKG at 100% (one key over max_width workers)."""
    low = country_runs(0.2, ("pkg", "dkg"))
    assert low["pkg"].load_stddev < low["dkg"].load_stddev
    for ratio in (0.5, 0.9):
        high = country_runs(ratio, ("pkg", "dkg"))
        assert high["dkg"].load_stddev < high["pkg"].load_stddev / 2, ratio
    only = country_runs(1.0, ("pkg", "dkg"))
    assert only["pkg"].dist_cost == 2.0 and only["dkg"].dist_cost == max_width(10)


# -- key spaces ----------------------------------------------------------------------------------------------


def feed(g, schedule):
    """Route ``(time, key, times)`` batches through one grouping."""
    for now, key, times in schedule:
        for _ in range(times):
            g.choose(key, now)


def test_new_keys_start_in_baby_and_promote_every_15_and_60_seconds():
    [g] = build_grouping("dkg:expected_keys=10", workers=10)  # Old 1, Teenage 4
    assert (g.old_capacity, g.teenage_capacity) == (1, 4)
    feed(g, [(0.0, k, n) for k, n in zip("abcdef", (60, 50, 40, 30, 20, 10))])
    assert {g.space_of(k) for k in "abcdef"} == {"baby"}
    feed(g, [(14.9, "z", 1)])
    assert g.space_of("a") == "baby"
    feed(g, [(15.0, "z", 1)])  # first Baby -> Teenage cycle: the 4 most frequent Baby items
    assert sorted(g.teenage_space) == list("abcd") and g.space_of("e") == "baby"
    feed(g, [(59.9, "z", 1)])
    assert not g.old_space
    feed(g, [(60.0, "z", 1)])  # first Teenage -> Old cycle: the top Teenage item
    assert g.old_space == {"a"} and g.space_of("a") == "old"


def test_algorithm_3_swaps_until_the_destination_item_is_strictly_more_frequent():
    [g] = build_grouping("dkg:expected_keys=10,baby_ttl=none", workers=10)
    feed(g, [(0.0, k, n) for k, n in zip("abcdef", (60, 50, 40, 30, 20, 10))])
    feed(g, [(15.0, "z", 1)])  # Teenage = a b c d (d has 30)
    feed(g, [(20.0, "e", 15), (20.0, "f", 30)])  # e: 35 > 30 (d), f: 40 = c's 40
    feed(g, [(30.0, "z", 1)])
    # top-down Baby (f 40, e 35) meets bottom-up Teenage (d 30, c 40): d (30) is not above f (40), they
    # swap; c (40) is strictly above e (35): the transition is complete.
    assert sorted(g.teenage_space) == list("abcf")
    assert g.space_of("d") == "baby" and g.space_of("e") == "baby"
    feed(g, [(31.0, "e", 6)])  # e: 41 > 40 (c, the least frequent Teenage item with f): they swap
    feed(g, [(45.0, "z", 1)])
    assert sorted(g.teenage_space) == list("abef") and g.space_of("c") == "baby"
    feed(g, [(60.0, "z", 1)])  # Baby's top, c (40), ties with f (40): a tie is not "strictly more", they swap
    assert g.space_of("c") == "teenage" and g.space_of("f") == "baby"
    assert g.old_space == {"a"}  # and the Teenage -> Old cycle at 60 s took the top Teenage item


def test_old_space_demotes_its_least_frequent_item_to_teenage():
    [g] = build_grouping("dkg:expected_keys=10,baby_ttl=none", workers=10)
    feed(g, [(0.0, "a", 50), (0.0, "b", 40)])
    feed(g, [(60.0, "z", 1)])  # Baby -> Teenage (a, b, z) then Teenage -> Old (a)
    assert g.old_space == {"a"}
    feed(g, [(61.0, "b", 20)])  # b: 60 > a's 50
    feed(g, [(120.0, "z", 1)])
    assert g.old_space == {"b"} and g.space_of("a") == "teenage"


def test_baby_items_unseen_for_baby_ttl_are_dropped_so_memory_stays_bounded():
    """A stream of only new keys: with the default 60 s TTL the key items stay near the keys seen in the
    last 60-75 s (plus 50 Teenage/Old items); with baby_ttl=none they grow with the stream (the paper)."""
    rate, n = 1000.0, 200_000  # 200 s of distinct keys
    bounded, unbounded = (build_grouping(s, workers=10)[0] for s in ("dkg", "dkg:baby_ttl=none"))
    for i in range(n):
        key = f"u{i}"
        bounded.choose(key, i / rate)
        unbounded.choose(key, i / rate)
    assert len(unbounded.key_items) == n
    assert len(bounded.key_items) <= (60 + 15) * rate + 50
    assert bounded.dropped == n - len(bounded.key_items)
    assert "u0" not in bounded.key_items and f"u{n - 1}" in bounded.key_items


# -- scaling -------------------------------------------------------------------------------------------------


def hot_stream(g, seconds: float, rate: float = 100.0, tail: int = 50, hot_tenths: int = 9):
    """``hot_tenths``/10 of the messages carry "hot", the rest cycle over ``tail`` keys; returns the
    (time, width) changes of the hot key."""
    changes = []
    width = g.min_width
    for i in range(int(seconds * rate)):
        now = i / rate
        key = "hot" if i % 10 < hot_tenths else f"t{i % tail}"
        g.choose(key, now)
        item = g.key_items.get("hot")
        if item is not None and item[3] != width:
            changes.append((now, item[3]))
            width = item[3]
    return changes


def test_hot_key_scales_out_only_from_old_space_after_warmup_once_per_60_s_up_to_max_width():
    [g] = build_grouping("dkg", workers=10)
    changes = hot_stream(g, seconds=900)
    assert changes, "a key with half of the load must scale out"
    assert changes[0][0] >= 60.0  # first Old cycle at 60 s; warm-up (15 s) is already over
    times = [t for t, _ in changes]
    assert all(times[i + 1] - times[i] >= 60.0 for i in range(len(times) - 1))
    assert max(w for _, w in changes) == g.max_width == 8
    assert len(set(g.candidates("hot"))) == g.key_items["hot"][3] >= 5
    assert g.candidates("hot")[0] == g.base("hot")
    assert g.scale_outs >= 6


def test_no_scale_out_before_warmup_nor_outside_old_space():
    [g] = build_grouping("dkg:warmup=1000", workers=10)
    assert hot_stream(g, seconds=300) == []
    [g] = build_grouping("dkg:promote_old=100000", workers=10)  # nothing ever reaches Old space
    assert hot_stream(g, seconds=300) == []
    assert all(item[3] == 2 for item in g.key_items.values())


def test_scale_down_when_the_hot_key_cools():
    [g] = build_grouping("dkg", workers=10)
    hot_stream(g, seconds=600)
    wide = g.key_items["hot"][3]
    assert wide > 2
    # the key becomes rare: its workers fall below L_s, it sheds one worker per check
    for i in range(600 * 100):
        g.choose("hot" if i % 200 == 0 else f"t{i % 500}", 600 + i / 100)
    assert g.key_items["hot"][3] < wide and g.scale_downs >= 1


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(["hot", "hot", "hot", "a", "b", "c", "d", "e"]), min_size=1, max_size=400),
    st.integers(min_value=2, max_value=12),
    st.floats(min_value=0.5, max_value=20.0),
)
def test_every_worker_is_within_the_keys_consecutive_candidates(stream, workers, step):
    [g] = build_grouping("dkg:warmup=1,promote_teenage=2,promote_old=4,check_interval=3", workers=workers)
    for i, key in enumerate(stream):
        before = g.candidates(key)
        w = g.choose(key, i * step)
        after = g.candidates(key)
        assert w in (before if len(before) >= len(after) else after)
        assert len(after) <= g.max_width
    assert sum(g.local_loads) == g.sent == len(stream)


@pytest.mark.parametrize(
    ("spec", "workers", "message"),
    [
        ("dkg:choices=3", 2, "exceeds the number of workers"),
        ("dkg:choices=0", 10, "out of range"),
        ("dkg:expected_keys=0", 10, "out of range"),
        ("dkg:promote_old=0", 10, "out of range"),
        ("dkg:baby_ttl=-1", 10, "out of range"),
        ("dkg:warmup=soon", 10, "not a valid"),
        ("dkg:threshold=3", 10, "no parameter 'threshold'"),
    ],
)
def test_bad_parameters_are_one_line_spec_errors(spec, workers, message):
    with pytest.raises(SpecError, match=message):
        build_grouping(spec, workers=workers)


def test_same_stream_same_decisions():
    ds = open_dataset("country-skew:ratio=0.6,messages=30000,seed=4")
    a, b = (simulate(ds, "dkg", 10, 3, rate=20.0, messages_hint=30_000) for _ in range(2))
    assert a.loads == b.loads and a.distinct_per_worker == b.distinct_per_worker


# -- the Baby cycle's bookkeeping against a plain reading of Algorithms 1-3 -------------------------------------


class NaiveKeySpaces:
    """Algorithms 1-3 by full scans: drop stale Baby items, sort, truncate, swap. The reference for DKG's
    incremental bookkeeping (TTL generations and promotion candidates)."""

    def __init__(self, old: int, teenage: int, ttl: float, every: float = 15.0, old_every: float = 60.0):
        self.old_cap, self.teen_cap, self.ttl = old, teenage, ttl
        self.every, self.old_every = every, old_every
        self.count: dict[str, int] = {}
        self.seen: dict[str, float] = {}
        self.space: dict[str, str] = {}
        self.start = None

    def observe(self, key: str, now: float) -> None:
        if self.start is None:
            self.start, self.next_baby, self.next_old = now, now + self.every, now + self.old_every
        while now >= min(self.next_baby, self.next_old):
            if self.next_baby <= now:
                while self.next_baby + self.every <= now:  # the latest tick reached
                    self.next_baby += self.every
                self.baby_cycle(self.next_baby)
                self.next_baby += self.every
            if self.next_old <= now:
                self.swap("teenage", "old", self.old_cap)
                while self.next_old <= now:
                    self.next_old += self.old_every
        if key not in self.count:
            self.count[key], self.space[key] = 0, "baby"
        self.count[key] += 1
        self.seen[key] = now

    def baby_cycle(self, now: float) -> None:
        for k in [k for k, s in self.space.items() if s == "baby" and self.seen[k] < now - self.ttl]:
            del self.count[k], self.seen[k], self.space[k]
        self.swap("baby", "teenage", self.teen_cap)

    def swap(self, src: str, dst: str, cap: int) -> None:
        down = {"teenage": "baby", "old": "teenage"}[dst]
        source = sorted((k for k, s in self.space.items() if s == src), key=lambda k: (-self.count[k], k))
        dest = [k for k, s in self.space.items() if s == dst]
        bottom_up = sorted(dest, key=lambda k: (self.count[k], k))
        size, j = len(dest), 0
        for f in source[:cap]:
            if size < cap:
                size += 1
            else:
                if j >= len(bottom_up) or self.count[bottom_up[j]] > self.count[f]:
                    break
                self.space[bottom_up[j]] = down
                j += 1
            self.space[f] = dst


@settings(max_examples=40, deadline=None)
@given(
    # half-second steps: the ticks and cut-offs are exact, so both sides see the same boundaries
    st.lists(st.tuples(st.integers(min_value=0, max_value=59), st.integers(min_value=0, max_value=8)),
             min_size=1, max_size=600),
    st.sampled_from([(10, 15.0), (20, 30.0), (10, 45.0)]),
)
def test_key_spaces_match_a_full_scan_reading_of_algorithms_1_to_3(events, setup):
    expected_keys, ttl = setup
    [g] = build_grouping(f"dkg:expected_keys={expected_keys},baby_ttl={ttl}", workers=4)
    naive = NaiveKeySpaces(g.old_capacity, g.teenage_capacity, ttl)
    now = 0.0
    for rank, halves in events:
        now += halves / 2
        key = f"k{rank * rank // 60}"  # skewed: low ranks share keys
        g.choose(key, now)
        naive.observe(key, now)
    assert {k: it[0] for k, it in g.key_items.items()} == naive.count
    assert {k: g.space_of(k) for k in g.key_items} == naive.space
