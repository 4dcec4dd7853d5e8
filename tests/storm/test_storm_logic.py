"""The word-count components' logic without Storm: the Redis feed's at-least-once delivery, the latency
histogram, the router's decisions (identical to the simulator's), counting and top-k merging, settings."""

from __future__ import annotations

import json
import random
import time
from collections import Counter

import pytest

from keysplit.datasets import encode_record, open_dataset
from keysplit.errors import KeysplitError
from keysplit.groupings import build_grouping
from keysplit.groupings.hosting import route
from keysplit.latency import LatencyHistogram
from keysplit.runs import redis_server
from keysplit.storm.counting import PartialCounts, Totals, merge_top, top_items
from keysplit.storm.feed import StreamFeed, create_group, feed_done
from keysplit.storm.keys import RunKeys
from keysplit.storm.router import GroupingChannel, Router
from keysplit.storm.settings import RunSettings
from keysplit.storm.streams import decode_words, encode_words, fields_index


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    home = tmp_path_factory.mktemp("redis-home")
    with redis_server.session(home=home) as (client, _):
        yield client


def _fill(conn, keys: RunKeys, n: int) -> None:
    for i in range(n):
        conn.xadd(keys.feed, {"r": encode_record((None, [f"w{i}"])), "n": i, "s": i})
    create_group(conn, keys)


def _drain(feed: StreamFeed) -> list[tuple[str, str]]:
    out = []
    while (item := feed.next()) is not None:
        out.append(item[:2])  # (entry id, record); the line number is item[2]
    return out


def test_feed_acks_remove_entries_and_the_feed_is_done_only_when_all_are_acked(conn):
    keys = RunKeys("feed-ack")
    _fill(conn, keys, 5)
    feed = StreamFeed(conn, keys, "spout-0", ack_flush_secs=0.0, metrics_key=keys.spout(0))
    items = _drain(feed)
    assert [r for _, r in items] == [encode_record((None, [f"w{i}"])) for i in range(5)]
    for entry_id, _ in items[:4]:
        feed.ack(entry_id)
    feed.flush_acks()
    assert not feed_done(conn, keys)
    feed.ack(items[4][0])
    feed.flush_acks()
    assert feed_done(conn, keys)
    assert feed.histogram.count == 5 and feed.replayed == 0
    assert int(conn.hget(keys.spout(0), "acked")) == 5


def test_a_failed_tuple_is_emitted_again_with_the_same_entry_id(conn):
    keys = RunKeys("feed-fail")
    _fill(conn, keys, 3)
    feed = StreamFeed(conn, keys, "spout-0")
    items = _drain(feed)
    feed.fail(items[1][0])
    assert feed.next()[:2] == items[1]
    assert feed.replayed == 1
    feed.fail("no-such-id")  # a fail for a tuple this spout never emitted is ignored
    assert feed.next() is None


def test_a_restarted_spout_replays_what_it_had_emitted_but_not_acked(conn):
    keys = RunKeys("feed-restart")
    _fill(conn, keys, 4)
    before = StreamFeed(conn, keys, "spout-0", ack_flush_secs=0.0)
    items = _drain(before)
    before.ack(items[0][0])
    before.flush_acks()
    after = StreamFeed(conn, keys, "spout-0")  # same consumer name, new process: empty memory
    assert _drain(after) == items[1:]
    assert after.replayed == 3


def test_entries_orphaned_by_a_vanished_consumer_are_claimed(conn):
    keys = RunKeys("feed-orphan")
    _fill(conn, keys, 3)
    gone = StreamFeed(conn, keys, "spout-7")
    taken = _drain(gone)
    time.sleep(0.05)
    survivor = StreamFeed(conn, keys, "spout-0", orphan_idle_ms=20)
    assert _drain(survivor) == taken
    assert survivor.replayed == 3


def test_merged_histograms_equal_one_histogram_of_everything():
    rng = random.Random(3)
    values = [rng.lognormvariate(2, 1.5) for _ in range(5000)]
    whole, a, b = LatencyHistogram(), LatencyHistogram(), LatencyHistogram()
    for i, v in enumerate(values):
        whole.record(v)
        (a if i % 2 else b).record(v)
    a.merge(LatencyHistogram.from_json(b.to_json()))
    assert a.buckets == whole.buckets and a.count == whole.count
    values.sort()
    for q in (50, 95, 99):
        exact = values[int(len(values) * q / 100) - 1]
        assert abs(whole.percentile(q) - exact) / exact < 0.03
    assert whole.mean == pytest.approx(sum(values) / len(values))


@pytest.mark.parametrize("spec", ["kg", "sg", "pkg", "pkg:d=3", "dchoices", "wchoices", "dkg", "fish", "gedik"])
def test_router_makes_the_simulators_decisions(spec):
    """Router s of S gives every word the worker that source s of the simulator gives it (task ids mapped)."""
    dataset = open_dataset("zipf:z=1.2,keys=300,messages=3000,seed=5")
    sources, workers = 3, 5
    tasks = [11, 12, 13, 14, 15]
    expected: dict[int, list] = {s: [] for s in range(sources)}
    for _, s, key, w in route(dataset, build_grouping(spec, workers, sources)):
        expected[s].append((key, tasks[w]))
    routers = [Router(spec, workers, s, sources, tasks) for s in range(sources)]
    got: dict[int, list] = {s: [] for s in range(sources)}
    seq = 0
    for index, record in enumerate(dataset.records()):
        s = index % sources
        got[s].extend(routers[s].route(encode_record(record), seq / 10_000.0))
        seq += len(record[1])
    assert got == expected


def test_router_feeds_pkg_probing_with_true_loads_on_its_own_clock():
    """PKG's L P_T variant in the topology: every T seconds since the router started it reads the counters'
    true loads (from Redis in the bolt; a plain function here) and resets its local estimate from them."""
    calls = []

    def probe() -> list[int]:
        calls.append(1)
        return [0, 3000, 3000]

    router = Router("pkg:probe=0.05", 3, 0, 1, [1, 2, 3], probe=probe)
    first = router.route(encode_record((None, ["x"] * 20)), router.elapsed())
    assert router.elapsed() < 1.0 and len(first) == 20
    time.sleep(0.06)
    router.route(encode_record((None, ["y"])), router.elapsed())
    assert calls  # probed, and without catching up through Unix time
    assert router.grouping.local_loads[1:] == [3000, 3000]


def test_router_uses_the_first_w_counter_tasks_and_rejects_too_few():
    router = Router("sg", 2, 0, 1, [4, 7, 9])
    assert {t for _, t in router.route(encode_record((None, list("abcdef"))), 0.0)} == {4, 7}
    with pytest.raises(KeysplitError, match="more than the 2 counter tasks"):
        Router("kg", 3, 0, 1, [4, 7])


def test_partial_counts_cover_each_input_exactly_once_and_totals_merge_them():
    rng = random.Random(1)
    words = [f"w{int(rng.paretovariate(1.0))}" for _ in range(2000)]
    partial, totals = PartialCounts(), Totals()
    covered, occurrences = [], []
    for i, w in enumerate(words):
        partial.add(w, i, (i // 10, i % 10))  # line i // 10, position i % 10
        if i % 300 == 299:
            for word, count, tuples, occ in partial.drain():
                assert count == len(tuples) == len(occ) // 2
                totals.add(word, count)
                covered.extend(tuples)
                occurrences.extend((word, line * 10 + pos) for line, pos in zip(occ[::2], occ[1::2]))
    for word, count, tuples, occ in partial.drain():
        totals.add(word, count)
        covered.extend(tuples)
        occurrences.extend((word, line * 10 + pos) for line, pos in zip(occ[::2], occ[1::2]))
    assert sorted(covered) == list(range(len(words)))
    assert sorted(occurrences, key=lambda o: o[1]) == list(zip(words, range(len(words))))
    assert totals.totals == Counter(words)
    assert partial.distinct == len(set(words)) and totals.words == len(words)


def test_the_components_fields_hash_is_the_runners_fields_grouping():
    """The aggregator a counter expects a word at (streams.fields_index) is the task the local runner's fields
    grouping on the word delivers it to, and Storm's formula: floorMod(31 + String.hashCode, n) in int32."""
    from keysplit.javahash import string_hash
    from keysplit.local.grouper import FieldsGrouper

    rng = random.Random(4)
    groupers = {n: FieldsGrouper(range(100, 100 + n), [0]) for n in (1, 2, 3, 7)}
    for _ in range(3000):
        word = "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0xE0, 0x24F), rng.randint(0x4E00, 0x9FFF),
                                       rng.randint(0x1F600, 0x1F64F)])) for _ in range(rng.randint(1, 15)))
        h = (31 + string_hash(word)) & 0xFFFFFFFF
        for n, grouper in groupers.items():
            assert fields_index(word, n) == grouper.choose([word])[0] - 100
            assert fields_index(word, n) == (h - (1 << 32) if h & 0x80000000 else h) % n
    assert decode_words(encode_words(["a b", "c", "ü"])) == ["a b", "c", "ü"]


def test_global_top_k_from_aggregators_equals_the_top_k_of_all_counts():
    rng = random.Random(2)
    counts = Counter(f"w{int(rng.paretovariate(0.8))}" for _ in range(5000))
    aggregators: list[dict[str, int]] = [{}, {}, {}]
    for word, c in counts.items():
        aggregators[sum(map(ord, word)) % 3][word] = c  # fields grouping: each word at one aggregator
    local = [top_items(a, 10) for a in aggregators]
    assert merge_top(local, 10) == top_items(dict(counts), 10)


def test_settings_from_env_and_conf_and_w_larger_than_counter_tasks():
    s = RunSettings.from_env({"KEYSPLIT_WORKERS": "6", "KEYSPLIT_GROUPING": "kg", "KEYSPLIT_FLUSH_SECS": "2"})
    assert (s.workers, s.counter_tasks, s.grouping, s.tick_secs) == (6, 6, "kg", 2)
    t = RunSettings.from_conf({**s.conf(), "keysplit.grouping": "pkg:d=3", "keysplit.cpu_delay_ms": "0.4"})
    assert (t.grouping, t.cpu_delay_ms, t.workers) == ("pkg:d=3", 0.4, 6)
    with pytest.raises(KeysplitError, match="W=8 workers is more than the 4 counter tasks"):
        RunSettings(workers=8, counter_tasks=4)
    with pytest.raises(KeysplitError, match="not a valid int"):
        RunSettings.from_env({"KEYSPLIT_SOURCES": "many"})


def _route_dealt(routers, dataset, rate: float = 10_000.0) -> float:
    """Deal records round-robin to the routers (shuffle) with event time seq / rate; returns the last time."""
    seq, now = 0, 0.0
    for index, record in enumerate(dataset.records()):
        now = seq / rate
        routers[index % len(routers)].route(encode_record(record), now)
        seq += len(record[1])
    return now


def test_gedik_routers_agree_on_every_key_once_followers_install_the_leaders_rebuild(conn):
    """Issue 4 + 5: separate router processes cannot share one partitioner, so router 0 rebuilds and publishes
    the function to Redis and the others install it: then every router sends every key to the same worker."""
    keys = RunKeys("gedik-sync")
    dataset = open_dataset("zipf:z=1.2,keys=400,messages=30000,seed=4")
    tasks = [21, 22, 23, 24]
    # each router its own channel, as in separate processes; followers poll once at the start, then only on demand
    routers = [Router("gedik:period=1,window=4000", 4, s, 3, tasks,
                      channel=GroupingChannel(conn, keys, poll_secs=0.0 if s == 0 else 3600.0)) for s in range(3)]
    leader, followers = routers[0], routers[1:]
    assert [r.role for r in routers] == ["leader", "follower", "follower"]
    now = _route_dealt(routers, dataset)
    assert now > 2.0 and leader.grouping.rebuilds >= 2
    words = sorted({w for _, ws in dataset.records() for w in ws})

    def placement(router: Router) -> list[int]:
        return [router.grouping.function.lookup(w) for w in words]

    # before syncing, the followers still use the initial function (the consistent hash): hot keys differ
    assert all(placement(f) != placement(leader) for f in followers)
    assert all(f.sync(force=True) for f in followers)
    assert all(placement(f) == placement(leader) for f in followers)
    assert all(f.version == leader.version == leader.grouping.state_version for f in followers)
    # and routing through each router now gives the same counter task for every word
    record = encode_record((None, words))
    assert followers[0].route(record, now) == followers[1].route(record, now) == leader.route(record, now)
    # followers never rebuilt nor counted anything themselves
    assert all(f.grouping.rebuilds == 0 and not f.grouping.partitioner.window_counts() for f in followers)
    # a router (re)started now begins with the published function
    late = Router("gedik:period=1,window=4000", 4, 2, 3, tasks, channel=GroupingChannel(conn, keys))
    assert placement(late) == placement(leader)
    # the leader's stats (rebuilds, migration) are in Redis for the run's summary
    leader.report(force=True)
    stats = GroupingChannel(conn, keys).read_stats()
    assert stats == json.loads(json.dumps(leader.grouping.stats()))
    assert stats["rebuilds"] == leader.grouping.rebuilds and stats["migrated_keys"] > 0


def test_a_gedik_follower_never_rebuilds_on_its_own(conn):
    keys = RunKeys("gedik-lonely-follower")
    follower = Router("gedik:period=0.1,window=2000", 3, 1, 2, [1, 2, 3], channel=GroupingChannel(conn, keys, 0.0))
    ring = follower.grouping.function.ring
    dataset = open_dataset("zipf:z=1.4,keys=100,messages=5000,seed=2")
    got = [t for i, (_, ws) in enumerate(dataset.records())  # 0.05 s per record: many periods pass
           for _, t in follower.route(encode_record((None, ws)), i * 0.05)]
    assert follower.grouping.rebuilds == 0 and follower.version == 0 and not follower.grouping.function.explicit_hash
    assert got == [[1, 2, 3][ring.lookup(w)] for _, ws in dataset.records() for w in ws]  # the consistent hash
    assert GroupingChannel(conn, keys).read_stats() is None  # only the leader reports
    follower.grouping.resize(4)
    assert follower.grouping.rebuilds == 0


def test_without_a_channel_the_router_keeps_the_in_process_semantics():
    router = Router("gedik:period=1", 3, 1, 2, [1, 2, 3])
    assert router.role is None and not router.reports
    router.route(encode_record((None, ["a"] * 10)), 0.0)
    router.route(encode_record((None, ["a"])), 1.5)
    assert router.grouping.rebuilds == 1  # every source rebuilds its (process-local) shared partitioner


def test_replayed_counts_lines_sent_again_not_failures_cancelled_by_a_late_ack(conn):
    """A fail queues a replay; an ack arriving before it is sent cancels it: nothing was re-sent, so nothing
    is counted (a bug once fixed: "replayed lines" counted lines that were never sent again)."""
    keys = RunKeys("feed-late-ack")
    _fill(conn, keys, 3)
    feed = StreamFeed(conn, keys, "spout-0")
    items = _drain(feed)
    feed.fail(items[0][0])
    feed.fail(items[0][0])  # failed twice before it could be replayed
    feed.ack(items[0][0])  # ... and acked late: no replay happens
    assert feed.next() is None and feed.replayed == 0
    feed.fail(items[1][0])
    feed.fail(items[1][0])
    assert feed.next()[:2] == items[1] and feed.next() is None
    assert feed.replayed == 1  # queued twice, sent once


def test_a_pending_entry_already_in_flight_is_neither_sent_nor_counted_twice(conn):
    keys = RunKeys("feed-in-flight")
    _fill(conn, keys, 2)
    feed = StreamFeed(conn, keys, "spout-0")
    items = _drain(feed)
    feed._read_own_pending()  # re-reads both entries, which this process still has in flight
    assert feed.next() is None and feed.replayed == 0
    assert [i for i, _ in items] == list(feed.in_flight)
