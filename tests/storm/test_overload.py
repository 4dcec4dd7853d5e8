"""Overload (docs/design/overload.md): the spout's adaptive window ends Storm's timeout meltdown.

First the rule alone (storm/window.py), then the spout's feed obeying it against a real Redis, then a real run
whose settings time out every line of its first waves: with Storm's fixed max pending (``--aimd-decrease 1``) the
same run acks 0 of its 600 lines in 60 s (measured, docs/design/overload.md); with the window it ends, exact, in
about 15 s and says where the window settled. Last, the topology model follows the same rule.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from keysplit.errors import KeysplitError
from keysplit.runs import redis_server
from keysplit.storm.feed import StreamFeed
from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import RunSettings
from keysplit.storm.window import AdaptiveWindow, WindowPolicy
from tests.cli.test_hostile_input import one_line
from tests.storm.test_exactly_once import _assert_exact, _feed, _run, home, redis_url  # noqa: F401  (fixtures)
from tests.storm.test_wordcount_topology import write_text

# -- the rule ----------------------------------------------------------------------------------------------


def test_the_window_starts_at_max_pending_and_only_a_timeout_lowers_it():
    window = AdaptiveWindow(WindowPolicy(), limit=100)
    assert window.lines == 100 and window.allows(99) and not window.allows(100)
    for _ in range(1000):
        window.on_ack(in_flight=99, now=1.0)
    assert window.lines == 100, "never above max pending"
    assert window.metrics() == {"window": 100, "window_min": 100, "window_cuts": 0}


def test_a_timeout_halves_the_lines_in_flight_once_per_round():
    window = AdaptiveWindow(WindowPolicy(decrease=0.5), limit=5000)
    # 2,000 lines out, far below max pending: the cut is taken from them, else it would never bite
    assert window.on_timeout(sent_at=0.0, in_flight=2000, now=3.0)
    assert window.lines == 1000
    # the rest of that wave (sent before the cut) changes nothing
    assert not any(window.on_timeout(sent_at=0.5, in_flight=1999 - i, now=3.1) for i in range(500))
    assert window.lines == 1000
    # a line sent under the new window that times out cuts again
    assert window.on_timeout(sent_at=3.2, in_flight=1000, now=6.3) and window.lines == 500
    assert window.metrics() == {"window": 500, "window_min": 500, "window_cuts": 2}


def test_the_window_never_goes_below_its_minimum():
    window = AdaptiveWindow(WindowPolicy(decrease=0.5, minimum=8), limit=64)
    for t in range(20):
        window.on_timeout(sent_at=float(t), in_flight=64, now=t + 0.5)
    assert window.lines == 8 and window.allows(7) and not window.allows(8)


def test_growth_is_slow_start_below_the_threshold_and_additive_above():
    window = AdaptiveWindow(WindowPolicy(increase=1.0, decrease=0.5), limit=10_000)
    for _ in range(10):
        window.on_ack(in_flight=399, now=1.0)  # the topology completes lines at 400...
    window.on_timeout(sent_at=0.0, in_flight=400, now=3.0)  # ...and times out: the threshold is 200
    assert window.lines == 200 and window.threshold == 200
    # cuts with no ack between them (stale copies draining) lower the window, not the threshold
    window.on_timeout(sent_at=3.5, in_flight=200, now=6.5)
    window.on_timeout(sent_at=7.0, in_flight=100, now=10.0)
    assert window.lines == 50 and window.threshold == 200
    for _ in range(150):  # slow start: a line per ack, back to the threshold in two rounds
        window.on_ack(in_flight=window.lines - 1, now=11.0)
    assert window.lines == 200
    for _ in range(210):  # above it, additive: one line per window of acks
        window.on_ack(in_flight=window.lines - 1, now=11.0)
    assert window.lines == 201
    for _ in range(1000):  # fewer than half of it out (the run's last lines): it does not grow
        window.on_ack(in_flight=80, now=12.0)
    assert window.lines == 201


def test_acks_that_come_in_a_flushs_burst_still_double_the_window_each_round_trip():
    # A counter's flush completes every line it holds at once: the lines out fall from the whole window to none
    # within one burst of acks, and the spout refills it from none. Every line of a round was out while the window
    # held a line back, so every ack grows it: slow start doubles it per round trip, in the spout and in the model
    # (counting only the lines out at each ack grew it by half: x1.33 a second, measured on Storm 2.8.8).
    from keysplit.topology_model.window import W_SIZE, new_window, note_full, on_complete

    spout = AdaptiveWindow(WindowPolicy(), 50_000, 30.0, target_secs=1.5, start=1000)
    model = new_window(50_000, 1, 30.0, WindowPolicy(), target=1.5, start=1000)
    for round_ in range(4):
        sent, flushed = float(round_), round_ + 0.9
        size = spout.lines
        assert spout.allows(size - 1, sent) and not spout.allows(size, sent + 0.01)  # refilled; the next held back
        note_full(model, sent + 0.01)
        for out in range(size - 1, -1, -1):  # the flush acks them all, one after the other
            spout.on_ack(out, flushed, flushed - sent)
            on_complete(model, sent, flushed, False, out)
        assert spout.lines == 2 * size == model[W_SIZE]
    assert spout.lines == 16_000
    # a spout whose window never held a line back (it had little to read) does not grow it past what it uses
    idle = AdaptiveWindow(WindowPolicy(), 50_000, 30.0, target_secs=1.5, start=1000)
    for out in range(99, -1, -1):
        idle.on_ack(out, 1.0, 0.5)
    assert idle.lines == 1000


def test_a_cut_never_goes_below_the_lines_acked_within_the_last_timeout():
    window = AdaptiveWindow(WindowPolicy(decrease=0.5), limit=1000, timeout_secs=3.0)
    for i in range(600):  # 600 lines acked over the last 2 s: that many complete within a timeout
        window.on_ack(in_flight=999, now=10.0 + i / 300)
    assert window.on_timeout(sent_at=9.0, in_flight=1000, now=12.0) and window.lines == 600
    assert not window.on_timeout(sent_at=12.5, in_flight=600, now=12.9), "the recent acks hold the cut"
    # no ack for a whole timeout (a meltdown): nothing holds it
    assert window.on_timeout(sent_at=13.0, in_flight=600, now=16.5) and window.lines == 300
    assert window.recent.total(16.5) == 0


def test_decrease_one_is_storms_fixed_max_pending_and_unlimited_stays_unlimited():
    fixed = AdaptiveWindow(WindowPolicy(decrease=1.0), limit=300)
    assert not fixed.on_timeout(sent_at=0.0, in_flight=300, now=9.0) and fixed.lines == 300
    unlimited = AdaptiveWindow(WindowPolicy(), limit=None)
    assert unlimited.lines is None and unlimited.allows(10**9) and unlimited.metrics()["window"] == -1
    assert unlimited.on_timeout(sent_at=0.0, in_flight=600, now=31.0) and unlimited.lines == 300
    assert not math.isinf(unlimited.size)


def test_the_policy_settings_are_checked_with_one_line():
    for field, value, words in (("aimd_decrease", 1.5, "in \\(0, 1\\]"), ("aimd_decrease", 0.0, "in \\(0, 1\\]"),
                                ("aimd_increase", 0.0, "positive"), ("aimd_min", 0, "at least 1")):
        with pytest.raises(KeysplitError, match=f"keysplit.{field} must be {words}"):
            RunSettings(**{field: value})
    assert RunSettings.from_conf({"keysplit.aimd_decrease": "0.8"}).window_policy == WindowPolicy(1.0, 0.8, 1)


def test_keysplit_run_refuses_a_bad_policy_with_one_line_before_it_starts(capsys):
    err = one_line(capsys, ["run", "wordcount", "-g", "pkg", "--dataset", "zipf:messages=10", "--aimd-decrease",
                            "1.5", "--redis", "redis://127.0.0.1:1/0"])
    assert "keysplit.aimd_decrease must be in (0, 1] (1: never cut), got 1.5" in err


# -- the spout's feed, against a real Redis -------------------------------------------------------------------

class Clock:
    """The feed's clock, moved by the test (emit times decide what a timeout is)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_spout_emits_nothing_while_its_window_is_full_and_a_timeout_shrinks_it(redis_url):  # noqa: F811
    conn = redis_server.connect(redis_url)
    keys = RunKeys("overload-feed")
    _feed(conn, keys, 40)
    clock = Clock()
    window = AdaptiveWindow(WindowPolicy(decrease=0.5), limit=8, timeout_secs=3.0)
    feed = StreamFeed(conn, keys, "spout-0", ack_flush_secs=0.0, clock=clock, flow=window, timeout_secs=3.0)
    sent = [feed.next() for _ in range(9)]
    assert all(sent[:8]) and sent[8] is None, "max pending 8: the ninth call emits nothing"
    clock.now += 0.5
    feed.fail(sent[0][0])  # failed younger than the timeout (a bolt's fail): replayed, no cut
    assert window.cuts == 0 and feed.next()[0] == sent[0][0]
    clock.now += 3.0
    for item in sent[1:8]:  # the wave times out
        feed.fail(item[0])
    assert window.cuts == 1 and window.lines == 4  # half of the 8 out, once for the whole wave
    resent = [feed.next() for _ in range(5)]
    assert all(resent[:3]) and resent[3] is None, "the replays wait for the window too (1 + 3 out = 4)"
    feed.ack(sent[0][0])
    feed.ack(resent[0][0])
    # no ack came before the cut, so the threshold is still max pending: slow start, a line per ack (4 -> 6)
    assert window.lines == 6 and feed.next() is not None
    assert feed.metrics()["window_cuts"] == 1


def test_an_idle_spout_rests_only_with_nothing_out_and_nothing_to_read(redis_url):  # noqa: F811
    # Storm calls an idle spout's nextTuple every millisecond (its spout wait strategy); each call is a round trip
    # to the Python spout and here a read of the feed. The spout rests (doubling up to a tenth of a second) only
    # when no line is out, buffered or unflushed and the feed had nothing more: then nothing can come to it.
    from keysplit.storm.feed import IDLE_REST_MAX_SECS, IDLE_REST_SECS

    conn = redis_server.connect(redis_url)
    keys = RunKeys("idle-feed")
    _feed(conn, keys, 3)
    slept: list[float] = []
    feed = StreamFeed(conn, keys, "spout-0", ack_flush_secs=0.0, sleep=slept.append)
    assert feed.rest() == 0.0, "nothing read yet: the feed may hold lines"
    sent = [feed.next() for _ in range(3)]
    assert all(sent) and feed.next() is None and feed.drained
    assert feed.rest() == 0.0 and not slept, "three lines out: their acks must not wait"
    for item in sent[:2]:
        feed.ack(item[0])
    feed.fail(sent[2][0])  # a replay waits to be sent: not idle
    assert feed.rest() == 0.0 and feed.next()[0] == sent[2][0]
    feed.ack(sent[2][0])
    feed.flush_acks()
    assert feed.next() is None and feed.idle
    rests = [feed.rest() for _ in range(9)]
    assert rests[0] == IDLE_REST_SECS and rests == slept and rests[-1] == IDLE_REST_MAX_SECS
    assert all(b == min(IDLE_REST_MAX_SECS, 2 * a) for a, b in itertools.pairwise(rests))
    conn.xadd(keys.feed, {"r": "\tz", "n": 3, "s": 3})  # the feed grows: the next read takes it, no rest
    assert feed.next()[2] == 3 and feed.rest() == 0.0 and not feed.idle


# -- a real run that melts down on Storm --------------------------------------------------------------------

def test_a_run_that_would_time_out_every_line_settles_and_ends_exact(redis_url, tmp_path):  # noqa: F811
    # 2 counters at 5 ms a word: the first wave (all 600 lines, max pending 5,000) needs ~8 s of counting
    # behind a flush, against a 3 s timeout, so most lines of it time out, and with Storm's fixed max
    # pending each replay then waits behind the stale copies and times out too (docs/design/overload.md)
    path = tmp_path / "overload.txt"
    write_text(path, 600, seed=7)
    conn, summary = _run(redis_url, path, [], workers=2, sources=2, cpu_delay_ms=5.0, max_pending=5000,
                         message_timeout=3, worker_processes=1, timeout=90)
    _assert_exact(conn, summary, path, [])
    assert summary["timed_out"] > 0 and summary["window_cuts"] >= 1
    (spout,) = summary["spout_windows"]
    assert spout["window"] == summary["window"] and 0 < spout["window_min"] <= spout["window"] < 600
    assert summary["duration_s"] < 60


def test_an_open_loop_rate_the_topology_cannot_serve_settles_and_ends_exact(redis_url, tmp_path):  # noqa: F811
    # the same shape open loop: 3,000 words/s offered to 2 counters that serve ~400 at 5 ms a word. With Storm's
    # fixed max pending the 2,000-line open-loop run of docs/design/overload.md acked 655 lines in 120 s
    path = tmp_path / "overload.txt"
    write_text(path, 600, seed=7)
    conn, summary = _run(redis_url, path, [], workers=2, sources=2, cpu_delay_ms=5.0, max_pending=5000,
                         message_timeout=3, rate=3000.0, worker_processes=1, timeout=90)
    _assert_exact(conn, summary, path, [])
    assert summary["timed_out"] > 0 and summary["window_cuts"] >= 1 and 0 < summary["window"] < 600
    assert summary["duration_s"] < 60


# -- the topology model follows the rule ----------------------------------------------------------------------

def test_the_model_of_a_saturated_closed_loop_settles_below_the_timeout():
    from keysplit.topology_model import TopologyParams, run_model
    from tests.topology_model.test_topology_model import stream

    # 2 counters at 3 ms a word serve ~130 lines of 5 words a second: the first 1,000 lines in flight (the window's
    # start, storm/window.py WINDOW_START) wait up to ~8 s, behind each other
    p = TopologyParams(workers=2, aggregators=1, cpu_delay_ms=3.0, max_pending=5000, message_timeout=3.0)
    r = run_model(p, *stream(16000, 5, 2))
    window, lowest, cuts = r.window
    assert cuts >= 2 and lowest <= window < 1000
    assert r.summary()["window"] == window
    # the model replays nothing, so the first wave stays late; the lines sent under the settled window are not
    # (their acks, and so their emits, come at the aggregator's ticks: they complete in exactly 3 s, the timeout)
    assert np.percentile(r.latency_ms[:1000], 50) > 3000 >= np.percentile(r.latency_ms[-2000:], 99)
    # a loop that never times out keeps max pending, as before the rule
    calm = run_model(TopologyParams(workers=4, aggregators=2, cpu_delay_ms=2.0, max_pending=200), *stream(6000, 5, 4))
    assert calm.window == (200, 200, 0)


def test_a_line_emitted_before_the_first_ack_does_not_end_slow_start_in_the_spout_or_the_model():
    # On Storm the first wave waits for the worker JVM to start the Python components (over a second, measured:
    # docs/benchmarks/storm-cluster.md): its latency says nothing about a queue. The lines after it still do.
    from keysplit.topology_model.window import W_SIZE, W_THRESHOLD, new_window, on_complete

    spout = AdaptiveWindow(WindowPolicy(), 50_000, 30.0, target_secs=1.5, start=1000)
    model = new_window(50_000, 1, 30.0, WindowPolicy(), target=1.5, start=1000)

    def complete(emitted: float, now: float, in_flight: int) -> None:
        spout.on_ack(in_flight, now, now - emitted)
        on_complete(model, emitted, now, False, in_flight)
        assert (spout.size, spout.threshold) == (model[W_SIZE], model[W_THRESHOLD])

    for i in range(500):  # the start-up wave: emitted at 0, acked from 2.5 s on, over the 1.5 s target
        complete(0.0, 2.5 + i / 1000, 999 - i)
    assert spout.size == 1000 and spout.threshold == 50_000, "still in slow start"
    for i in range(200):  # lines sent after the first ack complete within the target: a line per ack
        complete(2.6, 3.2 + i / 1000, 999)
    assert spout.size == 1200 and spout.threshold == 50_000
    complete(3.0, 5.0, 1199)  # a line sent after the first ack, late: a queue now bounds, slow start ends
    assert spout.threshold == 1200 == model[W_THRESHOLD]


def test_the_model_of_an_overloaded_open_loop_settles_and_forgives_the_schedule():
    from keysplit.storm.window import WindowPolicy
    from keysplit.topology_model import TopologyParams, run_model
    from tests.topology_model.test_topology_model import stream

    # 3,000 words/s offered to 2 counters that serve ~330 words/s at 3 ms a word
    p = TopologyParams(workers=2, aggregators=1, cpu_delay_ms=3.0, max_pending=5000, message_timeout=3.0,
                       rate=3000.0)
    r = run_model(p, *stream(8000, 5, 2))
    window, _lowest, cuts = r.window
    assert cuts >= 1 and window < 1000
    assert np.percentile(r.latency_ms[-1000:], 99) <= 3000  # the lines sent under the settled window: none late
    # Storm's fixed max pending: the queue holds max pending lines, each waiting far longer than the timeout
    storm = run_model(TopologyParams(**{**p.__dict__, "aimd": WindowPolicy(decrease=1.0)}), *stream(8000, 5, 2))
    assert storm.window == (5000, 5000, 0) and np.percentile(storm.latency_ms[-1000:], 50) > 3000


@pytest.mark.parametrize("seed", range(4))
def test_the_spouts_window_and_the_models_follow_one_rule(seed):
    # two pieces of code (the spout's in Python, in the jar; the model's in numba, in the kernel) for one rule:
    # the same acks and timeouts, one spout, leave both at the same window, threshold, lowest and cuts
    import random

    from keysplit.topology_model.window import W_CUTS, W_LOWEST, W_SIZE, W_THRESHOLD, new_window, on_complete

    rng = random.Random(seed)
    policy = WindowPolicy(increase=rng.choice([1.0, 2.0]), decrease=rng.choice([0.5, 0.7]), minimum=rng.randint(1, 5))
    spout, model = AdaptiveWindow(policy, 400, timeout_secs=3.0), new_window(400, 1, 3.0, policy)
    now, in_flight = 0.0, 400
    for _ in range(20_000):
        now += rng.expovariate(200.0) if rng.random() < 0.99 else rng.uniform(1.0, 4.0)  # gaps past a timeout too
        in_flight = max(1, min(400, in_flight + rng.choice([-1, 0, 1])))
        if rng.random() < 0.02:  # a timeout of a line sent a timeout or more ago, the line still out
            sent = now - rng.uniform(3.0, 6.0)
            spout.on_timeout(sent, in_flight, now)
            on_complete(model, sent, now, True, in_flight - 1)
        else:  # an ack leaving in_flight - 1 lines out
            spout.on_ack(in_flight - 1, now)
            on_complete(model, now - 0.5, now, False, in_flight - 1)
        assert (spout.size, spout.threshold) == pytest.approx((model[W_SIZE], model[W_THRESHOLD]), rel=1e-12)
    assert spout.cuts == model[W_CUTS] > 3 and spout.lowest == pytest.approx(model[W_LOWEST])
