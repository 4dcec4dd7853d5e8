"""The replay's topology model where the answer is known: a saturated worker, Little's law, the flush wait and
an open loop at low load (``spark_replay.topology_model``; pure computation, no processes)."""

from __future__ import annotations

import numpy as np
import pytest

from keysplit.storm.window import WINDOW_START, WindowPolicy, latency_target
from keysplit.topology_model import TopologyParams, line_starts, run_model

FIXED = WindowPolicy(decrease=1.0)


def stream(lines: int, words_per_line: int, workers: int, keys: int = 50, seed: int = 1) -> tuple:
    """``lines`` lines of words dealt round-robin to the workers, keys drawn at random."""
    rng = np.random.default_rng(seed)
    m = lines * words_per_line
    return line_starts(np.full(lines, words_per_line)), np.arange(m) % workers, rng.integers(0, keys, m)


def test_one_saturated_worker_serves_1000_over_d_words_per_second():
    d_ms = 0.5
    durations = []
    for lines in (3000, 7000):  # 1.5 s and 3.5 s of service (off the ticks, whose ties float rounding decides)
        # Storm's fixed max pending (decrease 1): all the lines in flight from the start
        p = TopologyParams(workers=1, aggregators=1, cpu_delay_ms=d_ms, max_pending=lines, aimd=FIXED)
        r = run_model(p, *stream(lines, 1, 1))
        service = lines * d_ms / 1000
        assert r.counter_busy[0] == pytest.approx(service)
        # the stream is all served within [service, service + 2 flush periods] (flush at a tick, ack at the next)
        assert service <= r.duration_s <= service + 2 * p.flush_secs
        durations.append(r.duration_s)
    # the extra 4000 words took exactly 4000 * D: the worker's rate is 1000 / D words/s
    assert 4000 / (durations[1] - durations[0]) == pytest.approx(1000 / d_ms, rel=1e-6)


def test_the_window_grows_past_its_start_until_the_workers_bind():
    # one word a line (the README's `keysplit run` dataset), W = 8, D = 1 ms, batches: 1,000 lines in flight
    # complete at most 1,000 / 0.5 s a second by Little's law, a quarter of W / D; the window starts at what W / D
    # needs at the latency target and grows while lines complete within it, so the counters are the bound
    lines, workers = 60_000, 8
    starts, chosen, keys = stream(lines, 1, workers)
    common = dict(workers=workers, sources=4, aggregators=2, cpu_delay_ms=1.0, batch=100, batch_ms=20.0)
    grown = run_model(TopologyParams(**common, max_pending=50_000), starts, chosen, keys)
    fixed = run_model(TopologyParams(**common, max_pending=WINDOW_START, aimd=FIXED), starts, chosen, keys)
    limit = workers * 1000.0
    assert grown.words_per_second >= 0.9 * limit > 2 * fixed.words_per_second
    window, _lowest, cuts = grown.window
    assert cuts == 0 and window > WINDOW_START
    # it starts at Little's law's lines for W / D at the target, and slow start overshoots by what one round trip adds
    target = latency_target(1.0, 100, 20.0)
    assert np.percentile(grown.latency_ms, 50) / 1000 <= 1.5 * target
    # the fixed cap binds as Little's law says: throughput = lines in flight / latency (start and drain aside)
    assert fixed.words_per_second == pytest.approx(WINDOW_START / (fixed.latency_ms.mean() / 1000), rel=0.1)


def test_closed_loop_obeys_littles_law():
    p = TopologyParams(workers=4, aggregators=2, cpu_delay_ms=2.0, max_pending=200)
    r = run_model(p, *stream(6000, 5, 4))
    lines_per_s = len(r.done) / r.duration_s
    # the spout keeps max pending lines in flight, so mean latency ~ pending / throughput (start and drain aside)
    assert r.latency_ms.mean() / 1000 == pytest.approx(p.max_pending / lines_per_s, rel=0.05)
    # and the bound it implies: throughput <= pending * words per line / mean latency
    assert r.words_per_second <= p.max_pending * 5 / (r.latency_ms.mean() / 1000) * 1.01


@pytest.mark.parametrize("phase", [0.0, -0.3, -0.75])
def test_the_flush_wait_is_between_one_and_two_periods(phase):
    # no CPU delay and no overheads: only the ticks hold a line (counter tick, then the aggregator's next one);
    # ticks at phase + k*T, k >= 1 (the runner's first tick is one period after it started, before the first emit)
    p = TopologyParams(workers=3, aggregators=2, cpu_delay_ms=0.0, max_pending=10**6, rate=200.0, tick_phase_s=phase)
    r = run_model(p, *stream(2000, 2, 3))
    lat = r.latency_ms / 1000
    assert lat.min() >= p.flush_secs - 1e-9 and lat.max() <= 2 * p.flush_secs + 1e-9
    assert lat.mean() == pytest.approx(1.5 * p.flush_secs, rel=0.02)  # arrivals uniform over the period


def test_open_loop_latency_at_low_load_is_service_plus_flush_wait():
    d_ms, overhead_us, counter_us, rate, phase = 2.0, 300.0, 150.0, 40.0, -0.25
    p = TopologyParams(workers=2, aggregators=1, cpu_delay_ms=d_ms, max_pending=1000, rate=rate,
                       overhead_us=overhead_us, counter_overhead_us=counter_us, tick_phase_s=phase)
    starts, workers, keys = stream(400, 1, 2)
    r = run_model(p, starts, workers, keys)
    emit = starts[:-1] / rate
    assert np.allclose(r.emit, emit)  # open loop: line i leaves the spout at (words before it) / rate
    served = emit + overhead_us / 1e6 + p.service_s  # no queue at this load: runner, then the counter at once
    # the counter flushes at the first tick its word reached it before, the aggregator acks at the next tick
    arrived = emit + overhead_us / 1e6
    k = np.ceil((arrived - phase) / p.flush_secs)
    flush_wait = phase + (k + 1) * p.flush_secs - served
    assert np.allclose(r.done - r.emit, (served - emit) + flush_wait)
    assert ((flush_wait > 0) & (flush_wait <= 2 * p.flush_secs)).all()


def test_a_counters_partial_counts_leave_before_it_acks_its_words():
    # CounterBolt.flush emits its partial counts, then acks the words. 300 words of one key reach one
    # counter before its first tick; at 5 ms a tuple the acks take 1.5 s, the one partial count 5 ms. So the
    # aggregator holds the count before its next tick and every line is acked then, two periods after the start
    # (were the count sent after the acks, it would miss that tick and wait for the third).
    p = TopologyParams(workers=1, aggregators=1, cpu_delay_ms=0.0, max_pending=1000, tuple_us=5000.0,
                       commit_us=20000.0)
    lines, words = 30, 10
    r = run_model(p, line_starts(np.full(lines, words)), np.zeros(lines * words, dtype=np.int64),
                 np.zeros(lines * words, dtype=np.int64))
    assert r.emit.max() < p.flush_secs  # every line left the spout before the counter's first tick
    assert np.allclose(r.done, 2 * p.flush_secs + p.commit_us / 1e6)  # its tick commits the one count, then acks
    assert r.counter_busy[0] == pytest.approx((lines * words + 1) * p.tuple_us / 1e6)  # the counter still paid them


def test_open_loop_rate_is_capped_by_max_pending():
    p = TopologyParams(workers=1, aggregators=1, cpu_delay_ms=0.0, max_pending=10, rate=1000.0)
    r = run_model(p, *stream(100, 1, 1))
    # at most 10 lines in flight: line 10 cannot leave before line 0 is acked (a flush period later at least)
    assert r.emit[10] >= r.done.min() - 1e-12
    in_flight = [(r.emit <= t).sum() - (r.done <= t).sum() for t in r.emit]
    assert max(in_flight) <= 10


def test_a_hot_worker_and_the_overheads_slow_the_run_down():
    starts, _, keys = stream(3000, 10, 8)
    spread = np.arange(len(keys)) % 8
    hot = np.where(np.arange(len(keys)) % 4 == 0, 0, spread)  # worker 0 gets a quarter more of the words
    p = TopologyParams(workers=8, cpu_delay_ms=2.0)
    even, skewed = run_model(p, starts, spread, keys), run_model(p, starts, hot, keys)
    assert skewed.words_per_second < even.words_per_second
    assert skewed.percentile(50) > even.percentile(50)
    slower = TopologyParams(workers=8, cpu_delay_ms=2.0, counter_overhead_us=500.0)
    assert run_model(slower, starts, spread, keys).words_per_second < even.words_per_second


def test_bad_parameters_and_inputs_are_refused():
    with pytest.raises(ValueError, match="workers"):
        TopologyParams(workers=0)
    with pytest.raises(ValueError, match="rate"):
        TopologyParams(workers=1, rate=0.0)
    with pytest.raises(ValueError, match="outside"):
        run_model(TopologyParams(workers=2), line_starts(np.array([2])), np.array([0, 2]), np.array([0, 1]))


def test_run_rate_is_a_setting_of_the_topology_and_checked_before_it_starts(tmp_path):
    from keysplit.errors import KeysplitError
    from keysplit.runs.prepare import RunOptions, prepare_run
    from keysplit.storm.settings import RunSettings

    path = tmp_path / "t.txt"
    path.write_text("a b c\nb c\n")
    prepared = prepare_run(RunOptions("kg", f"text:{path}", sources=1, workers=2, rate=1500.0))
    assert RunSettings.from_conf(prepared.settings.conf()).rate == 1500.0  # what the spouts read
    assert prepare_run(RunOptions("kg", f"text:{path}", sources=1, workers=2)).settings.rate == 0.0  # closed loop
    with pytest.raises(KeysplitError, match="--rate must be positive"):
        prepare_run(RunOptions("kg", f"text:{path}", sources=1, workers=2, rate=0.0))


# -- batches (keysplit.batch / keysplit.batch_ms: storm/router.py Batcher) -----------------------------------

def one_line(words: int) -> tuple:
    """One line of ``words`` words, all of key 0 for worker 0."""
    return line_starts(np.array([words])), np.zeros(words, dtype=np.int64), np.zeros(words, dtype=np.int64)


@pytest.mark.parametrize(("batch", "batch_ms", "words", "done"), [
    (1, 400.0, 1, 1.35),  # one tuple per word: at the counter at once, flushed at 0.35, committed at the 1.35 tick
    (100, 300.0, 1, 0.35),  # the batch waits 0.3 s for more words, leaves alone, still before the 0.35 tick; its
    # flush is committed as it reaches the aggregator (AggregatorBolt.process)
    (100, 400.0, 1, 1.35),  # it waits 0.4 s: after the counter's tick, so a whole period later
    (2, 400.0, 2, 0.35),  # two words fill a batch of two: it leaves at once, whatever batch_ms says
])
def test_a_batch_leaves_when_full_or_batch_ms_after_its_first_word(batch, batch_ms, words, done):
    # no delay, no overheads: the line is emitted at 0; ticks at 0.35, 1.35, 2.35 (phase -0.65, T = 1 s)
    p = TopologyParams(workers=1, aggregators=1, cpu_delay_ms=0.0, tick_phase_s=-0.65, batch=batch, batch_ms=batch_ms)
    r = run_model(p, *one_line(words))
    assert r.emit[0] == 0.0 and r.done[0] == pytest.approx(done)


def test_each_router_keeps_its_own_batches():
    # two one-word lines for the same counter, batches of two: through one router they fill a batch and leave at
    # once (flushed at the first tick), through two routers each waits batch_ms alone and misses the first tick
    p = TopologyParams(workers=1, aggregators=1, cpu_delay_ms=0.0, tick_phase_s=-0.65, batch=2, batch_ms=400.0,
                       max_pending=10, sources=2)
    starts, workers, keys = line_starts(np.array([1, 1])), np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64)
    together = run_model(p, starts, workers, keys, sources=np.array([1, 1]))
    apart = run_model(p, starts, workers, keys, sources=np.array([0, 1]))
    assert np.allclose(together.done, 0.35) and np.allclose(apart.done, 1.35)
    with pytest.raises(ValueError, match="router"):
        run_model(p, starts, workers, keys, sources=np.array([0, 2]))


def test_the_per_tuple_costs_are_paid_once_per_batch():
    # closed loop, lines of 10 words for one counter, batches of 10: every line leaves as one tuple. The spout's
    # next line waits for the runner (10 words and one tuple, not 10 tuples), and the counter pays its per-tuple
    # cost once per line
    lines, words, d_ms = 200, 10, 0.5
    common = dict(workers=1, aggregators=1, cpu_delay_ms=d_ms, max_pending=lines, overhead_us=300.0, word_us=20.0,
                  counter_overhead_us=150.0)
    starts = line_starts(np.full(lines, words))
    zeros = np.zeros(lines * words, dtype=np.int64)
    single = run_model(TopologyParams(**common, batch=1), starts, zeros, zeros)
    batched = run_model(TopologyParams(**common, batch=words), starts, zeros, zeros)
    assert np.diff(single.emit) == pytest.approx(words * (20.0 + 300.0) / 1e6)
    assert np.diff(batched.emit) == pytest.approx((words * 20.0 + 300.0) / 1e6)
    assert single.counter_busy[0] == pytest.approx(lines * words * (d_ms / 1e3 + 150.0 / 1e6))
    assert batched.counter_busy[0] == pytest.approx(lines * (words * d_ms / 1e3 + 150.0 / 1e6))


def test_a_counter_acks_a_batch_once_and_sends_one_flush_per_aggregator():
    # tick costs only (tuple_us): 40 one-word lines of 40 keys over 2 aggregators reach one counter before its tick.
    # One tuple per word: 40 acks and 40 partial counts; batches of 40: one ack and two flushes (one per aggregator)
    keys = np.arange(40, dtype=np.int64)
    starts, workers = line_starts(np.ones(40, dtype=np.int64)), np.zeros(40, dtype=np.int64)
    aggs = keys % 2
    base = dict(workers=1, aggregators=2, cpu_delay_ms=0.0, max_pending=100, tuple_us=1000.0, batch_ms=1000.0)
    single = run_model(TopologyParams(**base, batch=1), starts, workers, keys, aggs)
    batched = run_model(TopologyParams(**base, batch=40), starts, workers, keys, aggs)
    assert single.counter_busy[0] == pytest.approx((40 + 40) * 1e-3)
    assert batched.counter_busy[0] == pytest.approx((1 + 2) * 1e-3)


@pytest.mark.parametrize("chunk", [1, 13, 10**9])
def test_batches_wait_across_the_chunks_the_stream_is_fed_in(chunk):
    # a batch open when the model runs out of fed lines waits for the next chunk (or its batch_ms): the result does
    # not depend on how the stream was cut
    starts, workers, keys = stream(3000, 7, 4, keys=300)
    p = TopologyParams(workers=4, sources=3, aggregators=2, cpu_delay_ms=0.3, max_pending=200, overhead_us=40.0,
                       word_us=5.0, counter_overhead_us=30.0, tuple_us=10.0, batch=16, batch_ms=15.0,
                       tick_phase_s=-0.4)
    whole = run_model(p, starts, workers, keys)
    cut = run_model(p, starts, workers, keys, chunk_lines=chunk)
    assert np.array_equal(cut.emit, whole.emit) and np.array_equal(cut.done, whole.done)
    assert whole.summary() == cut.summary()
