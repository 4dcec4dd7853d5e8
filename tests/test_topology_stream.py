"""The streamed topology model gives the decisions of the whole-array model it replaced, chunk by chunk.

``reference_kernel`` is that model's event loop as it was (every line's and word's arrays at once), with the
counters' own clock added since (``CounterBolt.process``), kept here only as the reference: the streamed kernel,
fed in chunks of any size (one line, fewer lines than max pending, many), must give the same emit and completion
time of every line, the same counter busy times and timeouts, hence the same summary; without the lines' times (the
Spark task) the percentiles come from its histogram and are within one bin (1/16384) above. The Spark task's own
path (pieces per source merged by sequence number, released in chunk order whatever order they come in) and a real
replay are checked against it too.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numba
import numpy as np
import pytest

from keysplit.storm.window import WindowPolicy
from keysplit.topology_model import TopologyParams, line_starts, route_dataset, simulate
from keysplit.topology_model.kernel import _ACK, _ARRIVE, _EMIT, _PARTIAL, _TICK, _append, _count, _pop, _push
from spark_replay.ingest import SubStream
from spark_replay.model_task import ModelKeyIds as KeyTable
from spark_replay.model_task import estimate_task, model_slices


@numba.njit(cache=True)
def reference_flush(w, start, c_head, c_tail, c_free, c_busy, c_last, nxt, word_key, stamp, stamp_no, tuple_cost,
                    ht, hs, hk, ha, n, seq):
    """Counter ``w`` flushes at ``start``: a partial count per distinct word, then an ack per word."""
    head = c_head[w]
    c_head[w] = -1
    c_tail[w] = -1
    c_last[w] = start
    stamp_no += 1
    words, distinct = _count(head, nxt, word_key, stamp, stamp_no, -1)
    c_free[w] = start + tuple_cost * (words + distinct)
    c_busy[w] += tuple_cost * (words + distinct)
    if head >= 0:  # the partial counts leave as emitted, before the words' acks (CounterBolt)
        ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, start + tuple_cost * distinct, _PARTIAL, head)
        seq += 1
    return ht, hs, hk, ha, n, seq, stamp_no


@numba.njit(cache=True)
def reference_kernel(line_start, word_worker, word_agg, word_key, n_keys, n_workers, n_aggs, service, runner,
                    tuple_cost, commit_cost, ack_delay, tick, phase, cap, rate, timeout, hop, period):
    """The event loop (see the module docstring). Times in seconds; ``rate`` 0 means closed loop; a counter also
    flushes after a word that ends ``period`` or more after its last flush (its own clock).

    Returns ``(emit, done, counter_busy, timeouts)``; ``done[i]`` is line i's completion time."""
    n_lines = line_start.shape[0] - 1
    m = word_worker.shape[0]
    emit = np.full(n_lines, np.nan)
    done = np.full(n_lines, np.nan)
    remaining = np.empty(n_lines, dtype=np.int64)
    for i in range(n_lines):
        remaining[i] = line_start[i + 1] - line_start[i]
    line_of = np.empty(m, dtype=np.int64)
    for i in range(n_lines):
        for j in range(line_start[i], line_start[i + 1]):
            line_of[j] = i
    nxt = np.full(m, -1, dtype=np.int64)  # one chain per word at a time: counter's open batch, then aggregator's
    c_head = np.full(n_workers, -1, dtype=np.int64)
    c_tail = np.full(n_workers, -1, dtype=np.int64)
    c_free = np.zeros(n_workers)
    c_busy = np.zeros(n_workers)
    c_last = np.zeros(n_workers)
    a_head = np.full(n_aggs, -1, dtype=np.int64)
    a_tail = np.full(n_aggs, -1, dtype=np.int64)
    a_free = np.zeros(n_aggs)
    stamp = np.zeros(n_keys, dtype=np.int64)
    a_seen = np.zeros(n_aggs, dtype=np.int64)
    stamp_no = 0
    size = 1024 + 4 * (n_workers + n_aggs)
    ht = np.empty(size)
    hs = np.empty(size, dtype=np.int64)
    hk = np.empty(size, dtype=np.int64)
    ha = np.empty(size, dtype=np.int64)
    n = 0
    seq = 0
    ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, 0.0, _EMIT, 0)
    seq += 1
    ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, phase + tick, _TICK, 1)
    seq += 1
    next_line = 0
    pending = 0
    completed = 0
    runner_free = 0.0
    emit_waiting = False  # the spout is blocked on max pending
    timeouts = 0
    while completed < n_lines and n > 0:
        now, kind, arg = ht[0], hk[0], ha[0]
        n = _pop(ht, hs, hk, ha, n)
        if kind == _EMIT:
            if next_line >= n_lines:
                continue
            if pending >= cap:
                emit_waiting = True
                continue
            due = line_start[next_line] / rate if rate > 0 else 0.0  # rate: words/s, as sequence / rate
            if now < due:
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, due, _EMIT, 0)
                seq += 1
                continue
            i = next_line
            next_line += 1
            pending += 1
            emit[i] = now
            # the runner routes the line's words one after the other; the spout's next call is served by the
            # same runner (the single thread of the local runner, and the cores the processes share), so the
            # spout does not run ahead of it
            runner_free = max(runner_free, now)
            for j in range(line_start[i], line_start[i + 1]):
                runner_free += runner
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, runner_free + hop, _ARRIVE, j)
                seq += 1
            ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, max(runner_free, now + tuple_cost), _EMIT, 0)
            seq += 1
        elif kind == _ARRIVE:
            j = arg
            w = word_worker[j]
            start = max(now, c_free[w])
            c_free[w] = start + service
            c_busy[w] += service
            _append(c_head, c_tail, nxt, w, j, -1)
            if c_free[w] - c_last[w] >= period:
                ht, hs, hk, ha, n, seq, stamp_no = reference_flush(w, c_free[w], c_head, c_tail, c_free, c_busy,
                                                                   c_last, nxt, word_key, stamp, stamp_no,
                                                                   tuple_cost, ht, hs, hk, ha, n, seq)
        elif kind == _TICK:
            # every counter's tick, queued behind its backlog: it flushes the words that arrived before it
            for w in range(n_workers):
                ht, hs, hk, ha, n, seq, stamp_no = reference_flush(w, max(now, c_free[w]), c_head, c_tail, c_free,
                                                                   c_busy, c_last, nxt, word_key, stamp, stamp_no,
                                                                   tuple_cost, ht, hs, hk, ha, n, seq)
            # every aggregator's tick: acks what reached it before the tick (its partial counts, FIFO)
            for a in range(n_aggs):
                head = a_head[a]
                a_head[a] = -1
                a_tail[a] = -1
                if head < 0:
                    continue
                stamp_no += 1
                _, distinct = _count(head, nxt, word_key, stamp, stamp_no, -1)
                start = max(now, a_free[a])
                a_free[a] = start + commit_cost * distinct
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, a_free[a] + ack_delay, _ACK, head)
                seq += 1
            if completed < n_lines:
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, now + tick, _TICK, arg + 1)
                seq += 1
        elif kind == _PARTIAL:
            # one counter's flushed batch reaches the aggregators: one partial count per distinct word each
            stamp_no += 1
            for a in range(n_aggs):
                a_seen[a] = 0
            j = arg
            while j >= 0:
                after = nxt[j]
                k = word_key[j]
                a = word_agg[j]
                if stamp[k] != stamp_no:
                    stamp[k] = stamp_no
                    a_seen[a] += 1
                _append(a_head, a_tail, nxt, a, j, -1)
                j = after
            for a in range(n_aggs):
                if a_seen[a]:
                    a_free[a] = max(now, a_free[a]) + tuple_cost * a_seen[a]
        else:  # _ACK: the words of an aggregator's tick are acked; a line whose last word this is completes
            j = arg
            freed = 0
            while j >= 0:
                i = line_of[j]
                remaining[i] -= 1
                if remaining[i] == 0:
                    done[i] = now
                    if now - emit[i] > timeout:
                        timeouts += 1
                    completed += 1
                    freed += 1
                j = nxt[j]
            pending -= freed
            if freed and emit_waiting:
                emit_waiting = False
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, now, _EMIT, 0)
                seq += 1
    return emit, done, c_busy, timeouts


def reference(params: TopologyParams, starts: np.ndarray, workers: np.ndarray, keys: np.ndarray) -> tuple:
    """``(emit, done, counter_busy, timeouts)`` of the whole-array model, as ``simulate`` called it."""
    p = params
    return reference_kernel(
        starts, workers.astype(np.int64), (keys % p.aggregators).astype(np.int64), keys.astype(np.int64),
        int(keys.max()) + 1, p.workers, p.aggregators, p.service_s, p.overhead_us / 1e6, p.tuple_us / 1e6,
        p.commit_s, p.ack_delay_ms / 1000.0, p.tick_secs, p.tick_phase_s, p.max_pending * p.spouts, p.rate or 0.0,
        p.message_timeout, p.hop_delay_ms / 1000.0, p.flush_secs)


def old_summary(params: TopologyParams, emit, done, busy, timeouts, words: int) -> dict:
    """``ModelResult.summary()`` as it was, from every line's times."""
    lat = (done - emit) * 1000.0
    duration = float(done.max() - emit.min())
    ranked = np.sort(lat)

    def pct(q: float) -> float:
        return float(ranked[max(1, math.ceil(q / 100.0 * len(ranked))) - 1])

    return {"throughput_estimate": words / duration, "lines_per_second": len(done) / duration,
            "latency_mean_ms": float(lat.mean()), "latency_p50_ms": pct(50), "latency_p95_ms": pct(95),
            "latency_p99_ms": pct(99), "latency_max_ms": float(lat.max()), "duration_s": duration,
            "timeouts": int(timeouts),
            # the reference keeps max pending fixed: in these cases the spouts' window never cuts (none times out
            # closed loop; open loop keeps max pending), so it stays where it starts
            "window": params.max_pending * params.spouts, "window_min": params.max_pending * params.spouts,
            "window_cuts": 0, "counter_utilisation": (busy / duration).tolist()}


def assert_like(got: dict, expected: dict) -> None:
    """The summary of a run without the lines' times: the percentiles at most one histogram bin above, the mean
    summed in another order, everything else the same."""
    assert got["latency_mean_ms"] == pytest.approx(expected["latency_mean_ms"], rel=1e-12)
    for name in ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms"):
        assert expected[name] <= got[name] <= expected[name] * (1 + 2.0**-14), name
    rest = {k: v for k, v in expected.items() if not k.startswith(("latency_p", "latency_mean"))}
    assert {k: got[k] for k in rest} == rest


def words_stream(lines: int, workers: int, keys: int = 60, seed: int = 3, skew: bool = False) -> tuple:
    """Lines of 1 to 8 words (some empty, which the feed drops), keys at random, workers by key or at random."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 9, lines)
    m = int(lengths.sum())
    key_ids = rng.integers(0, keys, m)
    chosen = key_ids % workers if skew else rng.integers(0, workers, m)
    return line_starts(lengths), chosen, key_ids


CASES = {
    # closed loop, a hot worker (key grouping) with every overhead set: the back-pressure binds
    "closed": (TopologyParams(workers=4, aggregators=2, cpu_delay_ms=1.5, max_pending=40, overhead_us=80.0,
                              counter_overhead_us=60.0, tuple_us=20.0, commit_us=45.0, ack_delay_ms=3.0,
                              hop_delay_ms=2.0, tick_phase_s=-0.3), 3000, True),
    # open loop below saturation, max pending high
    "open": (TopologyParams(workers=3, aggregators=3, cpu_delay_ms=1.0, max_pending=5000, rate=3000.0,
                            overhead_us=50.0, tuple_us=10.0, tick_phase_s=-0.6), 4000, False),
    # open loop above what the workers serve: the queue grows, lines time out, max pending caps the spout
    # (the reference has Storm's fixed max pending: no adaptive window)
    "overload": (TopologyParams(workers=2, aggregators=1, cpu_delay_ms=2.0, max_pending=300, rate=20000.0,
                                message_timeout=1.0, aimd=WindowPolicy(decrease=1.0)), 2500, True),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("chunk", [1, 7, 500, 10**9])
def test_streamed_model_equals_the_whole_array_model(case, chunk):
    params, lines, skew = CASES[case]
    starts, workers, keys = words_stream(lines, params.workers, skew=skew)
    emit, done, busy, timeouts = reference(params, starts, workers, keys)
    expected = old_summary(params, emit, done, busy, timeouts, len(workers))
    kept = simulate(params, starts, workers, keys, chunk_lines=chunk)
    assert np.array_equal(kept.emit, emit) and np.array_equal(kept.done, done)  # every line, to the bit
    assert np.array_equal(kept.counter_busy, busy) and kept.timeouts == timeouts
    assert kept.summary() == expected
    if case == "overload":
        assert timeouts > 0
    # the Spark task keeps no line's times: the same numbers but the percentiles, one histogram bin above at most
    # (and the mean, summed in another order); the key ids are any numbering that keeps equal keys equal
    relabel = np.random.default_rng(9).permutation(int(keys.max()) + 1)
    streamed = simulate(params, starts, workers, relabel[keys], keys % params.aggregators, chunk_lines=chunk,
                        keep_lines=False).summary()
    assert_like(streamed, expected)


@pytest.mark.parametrize("batch", [1, 8])
def test_the_spark_task_merges_sources_in_sequence_order_whatever_order_pieces_come_in(batch):
    params, lines, _ = CASES["closed"]
    sources = 3
    params = replace(params, sources=sources, batch=batch, batch_ms=5.0)
    starts, workers, keys = words_stream(lines, params.workers, seed=5)
    vocab = [f"k{i}" for i in range(int(keys.max()) + 1)]
    table = KeyTable(params.aggregators)
    table.lookup(vocab)
    aggs = table._agg  # the runner's fields hash of every key
    # records dealt round-robin to 3 sources (the routers, whose batches the model keeps apart), cut into chunks of
    # about 1000 messages, one piece per (chunk, source); the empty records are dealt too, as the spout deals them
    n_lines = len(starts) - 1
    record_source = (np.arange(n_lines) + 1) % sources  # not the non-empty lines' round-robin: the task must carry it
    expected = simulate(params, starts, workers, keys, aggs[keys], record_source).summary()
    bounds = [0]
    while bounds[-1] < n_lines:
        bounds.append(int(np.searchsorted(starts, starts[bounds[-1]] + 1000)))
        bounds[-1] = min(max(bounds[-1], bounds[-2] + 1), n_lines)
    pieces = []
    for n, (a, b) in enumerate(itertools.pairwise(bounds)):
        for s in range(sources):
            recs = [i for i in range(a, b) if record_source[i] == s]
            idx = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in recs] or [np.zeros(0, int)])
            used, local = np.unique(keys[idx], return_inverse=True)
            order = np.random.default_rng(n).permutation(len(used))  # any order of the piece's vocabulary
            sub = SubStream(s, idx.astype(np.int64), order[local.reshape(-1)].astype(np.int32),
                            [vocab[k] for k in used[np.argsort(order)].tolist()], None, None,
                            rec_len=np.diff(starts)[recs].astype(np.int32))
            pieces += [((n, s, q), part) for q, part in enumerate(model_slices(sub, workers[idx]))]
    rng = np.random.default_rng(2)
    shuffled = [pieces[i] for i in rng.permutation(len(pieces))]
    got = estimate_task(iter(shuffled), len(bounds) - 1, list(range(sources)), params)
    assert_like(got, expected)


@pytest.mark.parametrize("groupings", [["kg", "pkg:load=global"]])
def test_replay_estimate_equals_the_model_over_the_simulators_routing(spark, tmp_path, groupings):
    from keysplit.topology_model import model_params
    from spark_replay.job import ReplayOptions, run_replay

    path = tmp_path / "t.txt"
    rng = np.random.default_rng(4)
    words = [f"w{i}" for i in range(80)]
    with open(path, "w") as fh:
        for n in range(3000):
            fh.write(" ".join(rng.choice(words, int(rng.integers(0, 7)))) + ("\n" if n % 50 else "\n\n"))
    opts = ReplayOptions(dataset=f"text:{path}", groupings=groupings, workers=4, sources=3, partitions=3,
                         out=str(tmp_path / "out"), cpu_delay_ms=1.0, max_pending=50)
    summary = run_replay(spark, opts)
    for run in summary["runs"]:
        spec = next(g for g in groupings if run["grouping"].startswith(g.split(":")[0]) and
                    ("global" in run["grouping"]) == ("global" in g))
        arrays = route_dataset(f"text:{path}", spec, 4, 3, opts.aggregators)
        assert_like(run, simulate(model_params(opts), *arrays).summary())
