"""A discrete-event model of the word-count topology as ``keysplit run`` runs it (the replay's ``--arrivals closed``
and ``--arrivals open`` estimates).

What the model follows, each a fact of the topology (``keysplit.storm``, ``keysplit.local``):

- **the spout** emits a line (a record with all its words) whenever fewer than ``max_pending`` x ``spouts`` lines
  are in flight (``topology.max.spout.pending``, Storm's back-pressure: apache/storm
  ``storm-client/src/jvm/org/apache/storm/executor/spout/SpoutExecutor.java`` calls ``nextTuple`` only while
  ``pending.size() < maxSpoutPending``); with ``--rate R`` line i is not emitted before ``i / R`` s (open loop,
  max pending still a cap);
- **the runner** (one thread: the multi-lang runner, routers and protocol) handles the words one after the
  other, ``overhead_us`` each: the per-tuple overhead measured by a calibration run with no CPU delay, whose
  throughput is ``1e6 / overhead_us`` words/s (see :func:`calibrate`); a word then reaches its counter
  ``hop_delay_ms`` later (the hops through the router processes, which on a shared machine wait for a core);
- **a counter** serves its words first come first served, ``cpu_delay_ms + counter_overhead_us`` each (the sleep
  and what one tuple costs the counter process); the words it has served wait for its next tick tuple;
- **ticks** reach every counter and aggregator at the same instants ``tick_phase + k * T``, ``T`` the tick period
  (``topology.tick.tuple.freq.secs``, whole seconds: ``max(1, round(flush))``, as
  ``WordCountSettings.tick_secs``); a tick enters the task's input queue behind what is already there (the
  local runner appends it, as Storm's executor receive queue does), so a counter with a backlog flushes late;
- **flush-then-ack**: at its tick a counter emits one partial count per distinct word it served since the last
  tick (``tuple_us`` each), anchored to the words, and then acks the words (``tuple_us`` each), in that order
  (``keysplit.storm.bolts.CounterBolt.process_tick``): the partial counts leave before the acks; each goes to
  the aggregator of its word (the runner's fields hash), which serves it in ``tuple_us`` and holds it until
  the aggregator's next tick; that tick's service (``commit_us`` per partial count: merging, the Redis commit,
  the acks, as the aggregators measure it, see :func:`calibrate`) ends with
  the ack, and the line is complete ``ack_delay_ms`` later (the top-k bolt, the acker, the spout's ack) once
  every word of it is acked.

Complete latency is a line's emit-to-complete time (Storm's complete latency, what the spout measures) and the
throughput is words / (last completion - first emit), both as ``keysplit run`` reports them.

The model streams: :class:`StreamedModel` takes the routed stream in sequence order a chunk of whole lines at a
time, and its event loop (:func:`stream_kernel`) keeps only what is in flight -- rings of the lines from the
oldest one not complete to the last fed, and of their words (at most ``max_pending`` x ``spouts`` lines are in
flight, in closed and open loop) -- plus per-counter, per-aggregator and per-key state; each completed line's
latency goes to a fixed-size histogram (:class:`Latencies`). In the replay it runs in one Spark task fed the
routed pieces in chunk order (:func:`spark_estimate`), so its memory does not grow with the stream.

Not modelled: message timeouts re-emitting a line (the lines that would exceed ``message_timeout`` are counted
in ``timeouts``; a run that replayed lines is outside the model), task restarts, and CPU contention beyond the
runner's serial stage.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

import numba
import numpy as np

from keysplit.errors import KeysplitError

#: Event kinds of the simulation.
_EMIT, _ARRIVE, _TICK, _PARTIAL, _ACK = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class TopologyParams:
    """The knobs of a run (the names of ``keysplit run`` / ``keysplit replay``) and the calibrated overheads."""

    workers: int
    aggregators: int = 2
    cpu_delay_ms: float = 1.0
    max_pending: int = 1000
    spouts: int = 1
    flush_secs: float = 1.0
    message_timeout: float = 30.0
    rate: float | None = None  # lines/s per topology (open loop); None: closed loop
    overhead_us: float = 0.0  # the runner's serial per-word cost (calibrated)
    counter_overhead_us: float = 0.0  # a counter's per-word cost beyond the CPU delay (calibrated)
    tuple_us: float = 0.0  # cost of one emitted or acked tuple in a counter's tick, or received by an aggregator
    commit_us: float | None = None  # an aggregator's time per partial count at its tick (None: tuple_us)
    ack_delay_ms: float = 0.0  # from an aggregator's ack to the spout's ack of a completed line
    hop_delay_ms: float = 0.0  # from the runner to the counter: the processes' hops when nothing queues (calibrated)
    tick_phase_s: float = 0.0  # time of tick 0 relative to the first emit (ticks at phase + k*T, k >= 1)

    def __post_init__(self) -> None:
        for name in ("workers", "aggregators", "max_pending", "spouts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("cpu_delay_ms", "overhead_us", "counter_overhead_us", "tuple_us", "ack_delay_ms", "hop_delay_ms",
                     "commit_us"):
            if (getattr(self, name) or 0.0) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.flush_secs <= 0 or self.message_timeout <= 0:
            raise ValueError("flush_secs and message_timeout must be positive")
        if self.rate is not None and self.rate <= 0:
            raise ValueError(f"rate must be positive, got {self.rate}")

    @property
    def tick_secs(self) -> float:
        """The tick period: Storm's tick frequency is whole seconds, at least 1 (``WordCountSettings.tick_secs``)."""
        return float(max(1, round(self.flush_secs)))

    @property
    def commit_s(self) -> float:
        """An aggregator's time per partial count at its tick."""
        return (self.commit_us if self.commit_us is not None else self.tuple_us) / 1e6

    @property
    def service_s(self) -> float:
        """A counter's time per word."""
        return self.cpu_delay_ms / 1000.0 + self.counter_overhead_us / 1e6


@dataclass
class Latencies:
    """Complete latencies (ms) folded as they come: count, sum, largest, and a histogram whose bins are 1/16384 of
    their value wide (``_SUB`` bins per power of two), each bin keeping its largest latency; so a percentile is
    within 1/16384 (relative) above the exact nearest-rank value, and exact when its bin holds one value."""

    counts: np.ndarray  # int64 per bin
    top: np.ndarray  # float64: the largest latency seen in each bin
    n: int = 0
    total: float = 0.0
    high: float = 0.0

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile: the largest latency of the bin that holds the rank."""
        from spark_replay.queueing import rank_bin

        return float(self.top[rank_bin(self.counts, self.n, q)]) if self.n else 0.0


@dataclass
class ModelResult:
    """What one simulated run gives (seconds; latencies per line in ms). ``emit``/``done`` (each line's emit and
    completion time) are kept only when asked for (:func:`simulate` keeps them; the Spark task does not)."""

    words: int
    lines: int
    first_emit: float
    last_done: float
    counter_busy: np.ndarray
    timeouts: int
    latencies: Latencies
    params: TopologyParams = field(repr=False, default=None)  # type: ignore[assignment]
    emit: np.ndarray | None = None
    done: np.ndarray | None = None

    @property
    def latency_ms(self) -> np.ndarray:
        if self.emit is None or self.done is None:
            raise ValueError("this run did not keep each line's times (simulate keeps them)")
        return (self.done - self.emit) * 1000.0

    @property
    def duration_s(self) -> float:
        return float(self.last_done - self.first_emit) if self.lines else 0.0

    @property
    def words_per_second(self) -> float:
        d = self.duration_s
        return self.words / d if d > 0 else 0.0

    @property
    def latency_mean_ms(self) -> float:
        if self.emit is not None:
            lat = self.latency_ms
            return float(lat.mean()) if len(lat) else 0.0
        return self.latencies.mean

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile of the complete latency, ms: exact from the lines' times when kept, else from
        the histogram (within 1/16384 above)."""
        if self.emit is None:
            return self.latencies.percentile(q)
        lat = np.sort(self.latency_ms)
        if not len(lat):
            return 0.0
        return float(lat[max(1, math.ceil(q / 100.0 * len(lat))) - 1])

    def summary(self) -> dict:
        d = self.duration_s
        return {
            "throughput_estimate": self.words_per_second,
            "lines_per_second": self.lines / d if d > 0 else 0.0,
            "latency_mean_ms": self.latency_mean_ms,
            "latency_p50_ms": self.percentile(50),
            "latency_p95_ms": self.percentile(95),
            "latency_p99_ms": self.percentile(99),
            "latency_max_ms": self.latencies.high if self.lines else 0.0,
            "duration_s": d,
            "timeouts": self.timeouts,
            "counter_utilisation": (self.counter_busy / d).tolist() if d > 0 else [],
        }


# ------------------------------------------------------------------------------------------------ the kernel

#: The latency histogram: ``_SUB`` bins per power of two of a latency in ms from 2**(_E_MIN - 1) to 2**_E_MAX
#: ms, one bin below (zero included) and one above.
_SUB = 1 << 14
_E_MIN, _E_MAX = -10, 28
_BINS = 2 + (_E_MAX - _E_MIN) * _SUB

#: Slots of the kernel's integer state (``iv``) and float state (``fv``).
_I_HEAP, _I_SEQ, _I_NEXT_LINE, _I_PENDING, _I_COMPLETED, _I_WAITING, _I_TIMEOUTS, _I_STAMP, _I_NEXT_WORD, \
    _I_LINES, _I_OLDEST, _I_STARTED = range(12)
_F_RUNNER, _F_FIRST, _F_LAST, _F_SUM, _F_COMP, _F_MAX = range(6)


@numba.njit(cache=True)
def _push(ht, hs, hk, ha, n, seq, t, kind, arg):
    """Push an event on the binary min-heap ordered by (time, sequence); grows the arrays when full."""
    if n == ht.shape[0]:
        ht = np.concatenate((ht, np.empty_like(ht)))
        hs = np.concatenate((hs, np.empty_like(hs)))
        hk = np.concatenate((hk, np.empty_like(hk)))
        ha = np.concatenate((ha, np.empty_like(ha)))
    i = n
    while i > 0:
        p = (i - 1) // 2
        if ht[p] < t or (ht[p] == t and hs[p] < seq):
            break
        ht[i], hs[i], hk[i], ha[i] = ht[p], hs[p], hk[p], ha[p]
        i = p
    ht[i], hs[i], hk[i], ha[i] = t, seq, kind, arg
    return ht, hs, hk, ha, n + 1


@numba.njit(cache=True)
def _pop(ht, hs, hk, ha, n):
    """Remove the heap's top (the caller read it at index 0)."""
    n -= 1
    t, s, k, a = ht[n], hs[n], hk[n], ha[n]
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and (ht[c + 1] < ht[c] or (ht[c + 1] == ht[c] and hs[c + 1] < hs[c])):
            c += 1
        if t < ht[c] or (t == ht[c] and s < hs[c]):
            break
        ht[i], hs[i], hk[i], ha[i] = ht[c], hs[c], hk[c], ha[c]
        i = c
    ht[i], hs[i], hk[i], ha[i] = t, s, k, a
    return n


@numba.njit(cache=True)
def _append(head, tail, nxt, q, j, mask):
    """Append word j to chain q (one linked list per counter or aggregator: ``head``/``tail`` over ``nxt``, which
    holds word j at slot ``j & mask``: a ring of the words in flight, or every word with ``mask`` -1)."""
    nxt[j & mask] = -1
    if head[q] < 0:
        head[q] = j
    else:
        nxt[tail[q] & mask] = j
    tail[q] = j


@numba.njit(cache=True)
def _count(head, nxt, word_key, stamp, stamp_no, mask):
    """Words and distinct keys of the chain starting at ``head`` (``stamp`` marks keys seen with ``stamp_no``)."""
    words = 0
    distinct = 0
    j = head
    while j >= 0:
        words += 1
        k = word_key[j & mask]
        if stamp[k] != stamp_no:
            stamp[k] = stamp_no
            distinct += 1
        j = nxt[j & mask]
    return words, distinct


@numba.njit(cache=True)
def _bin(ms):
    """The histogram bin of a latency in ms (see ``_SUB``)."""
    if not ms > 0.0:
        return 0
    m, e = math.frexp(ms)  # ms = m * 2**e, 0.5 <= m < 1
    if e < _E_MIN:
        return 0
    if e >= _E_MAX:
        return _BINS - 1
    return 1 + (e - _E_MIN) * _SUB + int((m - 0.5) * 2 * _SUB)


@numba.njit(cache=True)
def stream_kernel(iv, fv, ht, hs, hk, ha, c_head, c_tail, c_free, c_busy, a_head, a_tail, a_free, a_seen, stamp,
                  l_left, l_emit, lm, w_worker, w_agg, w_key, w_line, w_nxt, wm, h_count, h_top, rec_emit, rec_done,
                  final, service, runner, tuple_cost, commit_cost, ack_delay, tick, phase, cap, rate, timeout, hop):
    """The event loop (see the module docstring) over the lines fed so far, resumable. Times in seconds; ``rate``
    0 means closed loop.

    Lines are numbered globally; line i's words left to ack and emit time are at slot ``i & lm`` of ``l_left``
    and ``l_emit``, word j's worker, aggregator, key, line and chain link at slot ``j & wm`` of the ``w_`` rings
    (the caller sizes the rings for the lines and words from the oldest line not complete to the last fed).
    The scalars live in ``iv``/``fv`` between calls. The loop stops before the spout would emit a line that has
    not been fed yet (returns 0: feed more), or, ``final``, once every line fed is complete (returns 1).
    A completed line's latency goes to the histogram ``h_count``/``h_top``, its times to ``rec_emit``/``rec_done``
    when they are long enough. Returns ``(status, ht, hs, hk, ha)`` (the heap arrays may have grown)."""
    n, seq, next_line, pending = iv[_I_HEAP], iv[_I_SEQ], iv[_I_NEXT_LINE], iv[_I_PENDING]
    completed, emit_waiting, timeouts, stamp_no = iv[_I_COMPLETED], iv[_I_WAITING] != 0, iv[_I_TIMEOUTS], iv[_I_STAMP]
    next_word, lines, oldest = iv[_I_NEXT_WORD], iv[_I_LINES], iv[_I_OLDEST]
    runner_free, first_emit, last_done = fv[_F_RUNNER], fv[_F_FIRST], fv[_F_LAST]
    lat_sum, lat_comp, lat_max = fv[_F_SUM], fv[_F_COMP], fv[_F_MAX]
    n_workers = c_head.shape[0]
    n_aggs = a_head.shape[0]
    if iv[_I_STARTED] == 0:
        iv[_I_STARTED] = 1
        ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, 0.0, _EMIT, 0)
        seq += 1
        ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, phase + tick, _TICK, 1)
        seq += 1
    status = 1
    while n > 0:
        if final and completed >= lines:
            break
        if not final and hk[0] == _EMIT and next_line >= lines:
            status = 0  # the spout's next call needs a line not fed yet: back to the caller, the event stays
            break
        now, kind, arg = ht[0], hk[0], ha[0]
        n = _pop(ht, hs, hk, ha, n)
        if kind == _EMIT:
            if next_line >= lines:
                continue
            if pending >= cap:
                emit_waiting = True
                continue
            due = next_word / rate if rate > 0 else 0.0  # rate: words/s, as sequence / rate
            if now < due:
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, due, _EMIT, 0)
                seq += 1
                continue
            i = next_line
            next_line += 1
            pending += 1
            l_emit[i & lm] = now
            if i < rec_emit.shape[0]:
                rec_emit[i] = now
            if i == 0:
                first_emit = now
            # the runner routes the line's words one after the other; the spout's next call is served by the
            # same runner (the single thread of the local runner, and the cores the processes share), so the
            # spout does not run ahead of it
            runner_free = max(runner_free, now)
            length = l_left[i & lm]
            for j in range(next_word, next_word + length):
                runner_free += runner
                w_line[j & wm] = i
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, runner_free + hop, _ARRIVE, j)
                seq += 1
            next_word += length
            ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, max(runner_free, now + tuple_cost), _EMIT, 0)
            seq += 1
        elif kind == _ARRIVE:
            j = arg
            w = w_worker[j & wm]
            start = max(now, c_free[w])
            c_free[w] = start + service
            c_busy[w] += service
            _append(c_head, c_tail, w_nxt, w, j, wm)
        elif kind == _TICK:
            # every counter's tick, queued behind its backlog: it flushes the words that arrived before it
            for w in range(n_workers):
                head = c_head[w]
                c_head[w] = -1
                c_tail[w] = -1
                stamp_no += 1
                words, distinct = _count(head, w_nxt, w_key, stamp, stamp_no, wm)
                start = max(now, c_free[w])
                c_free[w] = start + tuple_cost * (words + distinct)
                c_busy[w] += tuple_cost * (words + distinct)
                if head >= 0:  # the partial counts leave as emitted, before the words' acks (CounterBolt)
                    ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, start + tuple_cost * distinct, _PARTIAL, head)
                    seq += 1
            # every aggregator's tick: acks what reached it before the tick (its partial counts, FIFO)
            for a in range(n_aggs):
                head = a_head[a]
                a_head[a] = -1
                a_tail[a] = -1
                if head < 0:
                    continue
                stamp_no += 1
                _, distinct = _count(head, w_nxt, w_key, stamp, stamp_no, wm)
                start = max(now, a_free[a])
                a_free[a] = start + commit_cost * distinct
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, a_free[a] + ack_delay, _ACK, head)
                seq += 1
            if not final or completed < lines:  # before the last chunk, some line is always still to complete
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, now + tick, _TICK, arg + 1)
                seq += 1
        elif kind == _PARTIAL:
            # one counter's flushed batch reaches the aggregators: one partial count per distinct word each
            stamp_no += 1
            for a in range(n_aggs):
                a_seen[a] = 0
            j = arg
            while j >= 0:
                after = w_nxt[j & wm]
                k = w_key[j & wm]
                a = w_agg[j & wm]
                if stamp[k] != stamp_no:
                    stamp[k] = stamp_no
                    a_seen[a] += 1
                _append(a_head, a_tail, w_nxt, a, j, wm)
                j = after
            for a in range(n_aggs):
                if a_seen[a]:
                    a_free[a] = max(now, a_free[a]) + tuple_cost * a_seen[a]
        else:  # _ACK: the words of an aggregator's tick are acked; a line whose last word this is completes
            j = arg
            freed = 0
            while j >= 0:
                i = w_line[j & wm]
                l_left[i & lm] -= 1
                if l_left[i & lm] == 0:
                    latency = now - l_emit[i & lm]
                    if latency > timeout:
                        timeouts += 1
                    if i < rec_done.shape[0]:
                        rec_done[i] = now
                    ms = latency * 1000.0
                    b = _bin(ms)
                    h_count[b] += 1
                    if h_count[b] == 1 or ms > h_top[b]:
                        h_top[b] = ms
                    total = lat_sum + ms  # Neumaier's compensated sum: the mean does not drift over long runs
                    if abs(lat_sum) >= abs(ms):
                        lat_comp += (lat_sum - total) + ms
                    else:
                        lat_comp += (ms - total) + lat_sum
                    lat_sum = total
                    lat_max = max(lat_max, ms)
                    last_done = max(last_done, now)
                    completed += 1
                    freed += 1
                j = w_nxt[j & wm]
            pending -= freed
            while oldest < next_line and l_left[oldest & lm] == 0:
                oldest += 1
            if freed and emit_waiting:
                emit_waiting = False
                ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, now, _EMIT, 0)
                seq += 1
    iv[_I_HEAP], iv[_I_SEQ], iv[_I_NEXT_LINE], iv[_I_PENDING] = n, seq, next_line, pending
    iv[_I_COMPLETED], iv[_I_WAITING], iv[_I_TIMEOUTS], iv[_I_STAMP] = completed, emit_waiting, timeouts, stamp_no
    iv[_I_NEXT_WORD], iv[_I_OLDEST] = next_word, oldest
    fv[_F_RUNNER], fv[_F_FIRST], fv[_F_LAST] = runner_free, first_emit, last_done
    fv[_F_SUM], fv[_F_COMP], fv[_F_MAX] = lat_sum, lat_comp, lat_max
    return status, ht, hs, hk, ha


def _pow2(n: int) -> int:
    return 1 << max(4, int(n - 1).bit_length())


def _regrow(arrays: list[np.ndarray], lo: int, hi: int, size: int) -> list[np.ndarray]:
    """The rings ``arrays`` at a new power-of-two size >= ``size``, the entries of global indices [lo, hi) kept."""
    new = _pow2(size)
    idx = np.arange(lo, hi, dtype=np.int64)
    out = []
    for a in arrays:
        b = np.zeros(new, dtype=a.dtype)
        b[idx & (new - 1)] = a[idx & (len(a) - 1)]
        out.append(b)
    return out


#: Lines :meth:`StreamedModel.feed` hands the kernel at a time (a bigger chunk is cut).
FEED_LINES = 1 << 13


class StreamedModel:
    """The model fed its routed stream in sequence order, a chunk of whole lines at a time (:meth:`feed`), then
    :meth:`finish`. It holds the lines and words from the oldest line in flight to the last fed (in closed and
    open loop at most ``max_pending x spouts`` lines are in flight), the counters' and aggregators' state, one
    stamp per key, the event heap and a fixed-size latency histogram: not the stream."""

    def __init__(self, params: TopologyParams, keep_lines: int = 0) -> None:
        self.params = params
        self.iv = np.zeros(12, dtype=np.int64)
        self.fv = np.zeros(6)
        self.fv[_F_MAX] = -math.inf
        size = 1024 + 4 * (params.workers + params.aggregators)
        self.heap = (np.empty(size), np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
                     np.empty(size, dtype=np.int64))
        w, a = params.workers, params.aggregators
        self.counters = (np.full(w, -1, dtype=np.int64), np.full(w, -1, dtype=np.int64), np.zeros(w), np.zeros(w))
        self.aggs = (np.full(a, -1, dtype=np.int64), np.full(a, -1, dtype=np.int64), np.zeros(a),
                     np.zeros(a, dtype=np.int64))
        self.stamp = np.zeros(1024, dtype=np.int64)
        ring = _pow2(params.max_pending * params.spouts)
        # lines: words left to ack, emit time, first word; words: worker, aggregator, key, line, next in chain
        self.lines = [np.zeros(ring, dtype=np.int64), np.zeros(ring), np.zeros(ring, dtype=np.int64)]
        self.words = [np.zeros(ring * 4, dtype=np.int64) for _ in range(5)]
        self.words_fed = 0
        self.h_count = np.zeros(_BINS, dtype=np.int64)
        self.h_top = np.zeros(_BINS)
        self.rec_emit = np.full(keep_lines, np.nan)
        self.rec_done = np.full(keep_lines, np.nan)

    def feed(self, lengths: np.ndarray, workers: np.ndarray, aggregators: np.ndarray, key_ids: np.ndarray) -> None:
        """The next lines: ``lengths[i]`` words each (empty lines dropped), their words' workers, aggregators and
        key ids (ids any integers >= 0 equal for equal keys) in feed order; runs the model as far as they go."""
        lengths = np.asarray(lengths, dtype=np.int64)
        lengths = lengths[lengths > 0]
        m = len(workers)
        if int(lengths.sum()) != m or len(aggregators) != m or len(key_ids) != m:
            raise ValueError("workers, key ids and line lengths disagree on the number of words")
        if m and (int(workers.min()) < 0 or int(workers.max()) >= self.params.workers):
            raise ValueError(f"a worker id is outside 0..{self.params.workers - 1}")
        bounds = line_starts(lengths)
        for a in range(0, len(lengths), FEED_LINES):  # the rings hold at most FEED_LINES lines not yet emitted
            b = min(a + FEED_LINES, len(lengths))
            words = slice(int(bounds[a]), int(bounds[b]))
            self._feed(lengths[a:b], workers[words], aggregators[words], key_ids[words])

    def _feed(self, lengths: np.ndarray, workers: np.ndarray, aggregators: np.ndarray, key_ids: np.ndarray) -> None:
        m = len(workers)
        fed, oldest, k = int(self.iv[_I_LINES]), int(self.iv[_I_OLDEST]), len(lengths)
        left, _, first = self.lines
        if fed + k - oldest > len(left):
            self.lines = _regrow(self.lines, oldest, fed, fed + k - oldest)
        left, _, first = self.lines
        low = int(first[oldest & (len(first) - 1)]) if oldest < fed else self.words_fed
        if self.words_fed + m - low > len(self.words[0]):
            self.words = _regrow(self.words, low, self.words_fed, self.words_fed + m - low)
        li = np.arange(fed, fed + k, dtype=np.int64) & (len(left) - 1)
        left[li] = lengths
        first[li] = self.words_fed + np.cumsum(lengths) - lengths
        wi = np.arange(self.words_fed, self.words_fed + m, dtype=np.int64) & (len(self.words[0]) - 1)
        for ring, values in zip(self.words, (workers, aggregators, key_ids)):
            ring[wi] = values
        top = int(key_ids.max())
        if top >= len(self.stamp):
            self.stamp = np.concatenate((self.stamp, np.zeros(_pow2(top + 1) - len(self.stamp), dtype=np.int64)))
        self.iv[_I_LINES] += k
        self.words_fed += m
        self._run(False)

    def _run(self, final: bool) -> None:
        p = self.params
        status, *self.heap = stream_kernel(
            self.iv, self.fv, *self.heap, *self.counters, *self.aggs, self.stamp, self.lines[0], self.lines[1],
            len(self.lines[0]) - 1, *self.words, len(self.words[0]) - 1, self.h_count, self.h_top, self.rec_emit,
            self.rec_done, final, p.service_s, p.overhead_us / 1e6, p.tuple_us / 1e6, p.commit_s,
            p.ack_delay_ms / 1000.0, p.tick_secs, p.tick_phase_s, p.max_pending * p.spouts, p.rate or 0.0,
            p.message_timeout, p.hop_delay_ms / 1000.0)
        assert final or status == 0, "the model stopped before the stream's end"

    def finish(self) -> ModelResult:
        """Run to the last line's completion; the result (each line's times only when ``keep_lines`` covers it)."""
        self._run(True)
        lines = int(self.iv[_I_LINES])
        lat = Latencies(self.h_count, self.h_top, int(self.iv[_I_COMPLETED]), float(self.fv[_F_SUM] + self.fv[_F_COMP]),
                        float(self.fv[_F_MAX]) if lines else 0.0)
        kept = len(self.rec_emit) >= lines
        return ModelResult(self.words_fed, lines, float(self.fv[_F_FIRST]), float(self.fv[_F_LAST]),
                           self.counters[3], int(self.iv[_I_TIMEOUTS]), lat, self.params,
                           self.rec_emit[:lines] if kept else None, self.rec_done[:lines] if kept else None)


# ------------------------------------------------------------------------------------------------- the API


def line_starts(words_per_line: np.ndarray) -> np.ndarray:
    """Offsets of each line's first word (and the total at the end) from words per line; empty lines dropped."""
    lens = np.asarray(words_per_line, dtype=np.int64)
    lens = lens[lens > 0]
    return np.concatenate(([0], np.cumsum(lens))).astype(np.int64)


#: Lines :func:`simulate` feeds the model at a time.
SIMULATE_CHUNK = 1 << 16


def simulate(params: TopologyParams, line_start: np.ndarray, workers: np.ndarray, key_ids: np.ndarray,
             aggregators: np.ndarray | None = None, *, chunk_lines: int = SIMULATE_CHUNK,
             keep_lines: bool = True) -> ModelResult:
    """Run the model over a routed stream: ``workers[j]``/``key_ids[j]`` of word j in feed order, lines cut at
    ``line_start``; ``aggregators[j]`` the aggregator of word j (default: key id mod A). The stream goes to the
    model ``chunk_lines`` lines at a time; ``keep_lines`` keeps each line's emit and completion time (then the
    summary's mean and percentiles are exact)."""
    workers = np.ascontiguousarray(workers, dtype=np.int64)
    key_ids = np.ascontiguousarray(key_ids, dtype=np.int64)
    line_start = np.ascontiguousarray(line_start, dtype=np.int64)
    if len(workers) != len(key_ids) or int(line_start[-1]) != len(workers):
        raise ValueError("workers, key ids and line starts disagree on the number of words")
    if len(workers) and (workers.min() < 0 or workers.max() >= params.workers):
        raise ValueError(f"a worker id is outside 0..{params.workers - 1}")
    if aggregators is None:
        aggregators = key_ids % params.aggregators
    aggregators = np.ascontiguousarray(aggregators, dtype=np.int64)
    lengths = np.diff(line_start)
    lengths = lengths[lengths > 0]
    bounds = line_starts(lengths)
    model = StreamedModel(params, len(lengths) if keep_lines else 0)
    for a in range(0, len(lengths), max(1, chunk_lines)):
        b = min(a + max(1, chunk_lines), len(lengths))
        words = slice(int(bounds[a]), int(bounds[b]))
        model.feed(lengths[a:b], workers[words], aggregators[words], key_ids[words])
    return model.finish()


def aggregator_of(keys: list[str], aggregators: int) -> np.ndarray:
    """The aggregator task index of each word: the local runner's fields grouping on ``word``."""
    from keysplit.local.grouper import fields_index

    return np.asarray([fields_index([k], aggregators) for k in keys], dtype=np.int64)


def stream_arrays(lengths: np.ndarray, workers: np.ndarray, keys: list[str], aggregators: int) -> tuple:
    """``(line_start, workers, key ids, aggregator ids)`` for :func:`simulate` from words in feed order."""
    vocab, key_ids = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    aggs = aggregator_of(vocab.tolist(), aggregators)[key_ids]
    return line_starts(lengths), np.asarray(workers, dtype=np.int64), key_ids.astype(np.int64), aggs


def route_dataset(spec: str, grouping: str, workers: int, sources: int, aggregators: int, *,
                  rate: float | None = None, capacities: list[float] | None = None) -> tuple:
    """Route a dataset with the simulator's groupings in process (no Spark): the model's input arrays.

    Records go to sources as ``keysplit simulate`` deals them; event time is ``sequence / rate``."""
    from keysplit.datasets import open_dataset
    from keysplit.groupings.hosting import prepare_groupings, route
    from keysplit.stream import DEFAULT_RATE

    dataset = open_dataset(spec)
    groupings = prepare_groupings(grouping, workers, sources, dataset, capacities=capacities)
    chosen, keys = [], []
    for _, _, key, w in route(dataset, groupings, rate=rate or DEFAULT_RATE):
        chosen.append(w)
        keys.append(key)
    lengths = [len(k) for _, k in dataset.records() if k]
    return stream_arrays(np.asarray(lengths), np.asarray(chosen), keys, aggregators)


# --------------------------------------------------------------------------------------------- Spark


class KeyTable:
    """Global key ids (equal keys, equal ids: what the model's distinct counts need) and each key's aggregator
    (the runner's fields hash, :func:`aggregator_of`), computed once per key: memory grows with keys, not
    messages."""

    def __init__(self, aggregators: int) -> None:
        self.aggregators = aggregators
        self.ids: dict[str, int] = {}
        self.agg: list[int] = []
        self._agg = np.zeros(0, dtype=np.int64)

    def lookup(self, vocab: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, aggregators)`` of every entry of ``vocab``."""
        fresh = [k for k in dict.fromkeys(vocab) if k not in self.ids]
        if fresh:
            for k in fresh:
                self.ids[k] = len(self.ids)
            self.agg.extend(aggregator_of(fresh, self.aggregators).tolist())
            self._agg = np.asarray(self.agg, dtype=np.int64)
        ids = np.fromiter((self.ids[k] for k in vocab), dtype=np.int64, count=len(vocab))
        return ids, self._agg[ids]


#: Slices a routed piece is cut into for the model's shuffle: PySpark's shuffle writes and reads its items in
#: batches of up to ten, so an item must be small (a merged piece of 2^19 messages gives slices of 2^14).
SLICES = 32


def model_slices(sub: Any, chosen: np.ndarray) -> list[tuple]:
    """What the model task needs of one routed piece, in :data:`SLICES` slices of whole records (some may be
    empty): per slice its sequence numbers, workers, key ids into its own vocabulary, that vocabulary, and the
    messages of each of its records (in order)."""
    assert sub.rec_len is not None, "the ingest gives every piece its records' lengths"
    rec = sub.rec_len.astype(np.int64)
    rec_start = np.cumsum(rec) - rec
    which = rec_start * SLICES // max(1, len(sub.seq))  # a record goes to the slice where it starts
    cuts = np.searchsorted(which, np.arange(SLICES + 1))  # record bounds of each slice
    out = []
    chosen = np.asarray(chosen, dtype=np.int32)
    for q in range(SLICES):
        r0, r1 = int(cuts[q]), int(cuts[q + 1])
        a = int(rec_start[r0]) if r0 < len(rec) else len(sub.seq)
        b = int(rec_start[r1]) if r1 < len(rec) else len(sub.seq)
        used, local = np.unique(sub.key_ids[a:b], return_inverse=True)
        out.append((sub.seq[a:b].copy(), chosen[a:b].copy(), local.astype(np.int32).reshape(-1),
                    [sub.vocab[k] for k in used.tolist()], sub.rec_len[r0:r1].copy()))
    return out


def merge_pieces(pieces: list[tuple], keys: KeyTable) -> tuple:
    """One chunk's pieces (one per source, each sorted) as the model's feed: ``(line lengths, workers,
    aggregators, key ids)`` in sequence order. A record's messages are consecutive and in one piece, so the
    merged order keeps every record whole."""
    seq = np.concatenate([p[0] for p in pieces])
    workers = np.concatenate([p[1] for p in pieces]).astype(np.int64)
    starts = np.zeros(len(seq), dtype=bool)
    ids, aggs, at = [], [], 0
    for p in pieces:
        rec = p[4].astype(np.int64)
        starts[at + np.cumsum(rec) - rec] = True  # a record's first message
        at += len(p[0])
        gid, gagg = keys.lookup(p[3])
        ids.append(gid[p[2]])
        aggs.append(gagg[p[2]])
    order = np.argsort(seq, kind="stable")
    first = np.flatnonzero(starts[order])
    lengths = np.diff(np.append(first, len(seq)))
    return lengths, workers[order], np.concatenate(aggs)[order], np.concatenate(ids)[order]


def estimate_task(items: Any, chunks: int, sources: list[int], params: TopologyParams) -> dict:
    """The model's one task: the slices ``((chunk number, source, slice), slice)`` of every source's routed
    pieces (:func:`model_slices`), released in chunk order (:func:`spark_replay.ordered.in_order`: early ones
    wait in a bounded buffer, then on disk); each chunk's slices are merged by sequence number and fed to a
    :class:`StreamedModel`."""
    from spark_replay.ordered import in_order

    model = StreamedModel(params)
    keys = KeyTable(params.aggregators)
    held: list[tuple] = []
    order = [(n, s, q) for n in range(chunks) for s in sources for q in range(SLICES)]
    for piece in in_order(items, order):
        held.append(piece)
        if len(held) == len(sources) * SLICES:  # every slice of the chunk: merge and feed
            model.feed(*merge_pieces(held, keys))
            held = []
    return model.finish().summary()


def spark_estimate(routed: Any, chunks: int, sources: list[int], params: TopologyParams) -> dict:
    """Run the model for one grouping in ONE Spark task, streaming: ``routed``'s partition for source s (or the
    one merged partition, ``sources`` [0]) yields ``(SubStream, workers, fast)`` for chunk 0, 1, ... in order;
    each piece goes, compacted, through a shuffle to the model's task, which takes them in chunk order, and only
    the summary comes back to the driver."""

    def tag(index: int, pieces: Any) -> Any:
        for n, (sub, chosen, _fast) in enumerate(pieces):
            for q, part in enumerate(model_slices(sub, chosen)):
                yield 0, ((n, index, q), part)

    return (routed.mapPartitionsWithIndex(tag)
            .partitionBy(1, lambda _key: 0)
            .mapPartitions(lambda items: [estimate_task((kv[1] for kv in items), chunks, sources, params)])
            .collect()[0])


# ---------------------------------------------------------------------------------------- calibration


#: The calibration file ``keysplit replay`` reads when ``--calibration`` is not given, in the project's state
#: directory (``$KEYSPLIT_HOME``, else ``./.keysplit``).
CALIBRATION_NAME = "calibration.json"


def default_calibration() -> str:
    from keysplit.home import keysplit_home

    return str(keysplit_home() / CALIBRATION_NAME)
#: The calibrated quantities a calibration file holds (microseconds, seconds).
CALIBRATED = ("overhead_us", "counter_overhead_us", "tuple_us", "tick_phase_s", "hop_delay_ms")
#: Calibrated quantities a file may lack (made before they were measured): the model's default then applies.
OPTIONAL_CALIBRATED = ("commit_us", "ack_delay_ms")


def model_params(opts: Any, workers: int | None = None) -> TopologyParams:
    """The model's parameters for a replay (``spark_replay.job.ReplayOptions``); a SpecError when invalid."""
    from keysplit.errors import SpecError

    o = getattr(opts, "overheads", None) or {}
    try:
        return TopologyParams(
            workers=workers or opts.workers, aggregators=opts.aggregators, cpu_delay_ms=opts.cpu_delay_ms,
            max_pending=opts.max_pending, spouts=opts.spouts, flush_secs=opts.flush_secs,
            message_timeout=opts.message_timeout, rate=opts.rate if opts.arrivals == "open" else None,
            **{k: float(o.get(k, 0.0)) for k in CALIBRATED},
            **{k: float(o[k]) for k in OPTIONAL_CALIBRATED if o.get(k) is not None})
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def params_of_run(run: dict, **overheads: float) -> TopologyParams:
    """The model's knobs as a ``keysplit run`` summary records them, with the given overheads."""
    return TopologyParams(
        workers=int(run["workers"]), aggregators=int(run.get("aggregators") or 2),
        cpu_delay_ms=float(run.get("cpu_delay_ms") or 0.0), max_pending=int(run.get("max_pending") or 1000),
        spouts=int(run.get("spouts") or 1), flush_secs=float(run.get("flush_secs") or 1.0),
        message_timeout=float(run.get("message_timeout_secs") or 30), rate=run.get("rate") or None, **overheads)


def _bisect(below: Any, high: float, steps: int) -> float:
    """The threshold in [0, high] where the monotone predicate ``below(value)`` turns false: 0 when it is false at 0,
    ``high`` when it is still true there, else the smallest value found where it is false."""
    if not below(0.0):
        return 0.0
    if below(high):
        return high
    lo, hi = 0.0, high
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if below(mid) else (lo, mid)
    return hi


def fit_overhead(name: str, measured_wps: float, params: TopologyParams, arrays: tuple, high: float = 20_000.0,
                 steps: int = 30) -> float:
    """The value of overhead ``name`` (microseconds) at which the model's throughput equals ``measured_wps``.

    The model's throughput does not increase with any overhead, so bisection finds it. The ticks quantise a
    run's duration, so the throughput is flat over a range of overheads: the result is the start of the range
    that reproduces the run (0 when the model is already slower at 0, ``high`` when still faster there)."""
    return _bisect(lambda v: simulate(replace(params, **{name: v}), *arrays).words_per_second > measured_wps,
                   high, steps)


def fit_delay(name: str, measured_mean_ms: float, params: TopologyParams, arrays: tuple, high: float = 5000.0,
              steps: int = 30) -> float:
    """The value of delay ``name`` (ms) at which the model's mean complete latency equals ``measured_mean_ms``
    (a pure delay only lengthens a line's trip, so bisection finds it); 0 when the model is already slower."""
    return _bisect(lambda v: float(simulate(replace(params, **{name: v}), *arrays).latency_ms.mean())
                   < measured_mean_ms, high, steps)


def calibrate(ceiling: dict, ceiling_arrays: tuple, saturation: dict, saturation_arrays: tuple, light: dict,
              light_arrays: tuple) -> dict:
    """The model's overheads from three calibration runs of ``keysplit run`` (their ``--json`` summaries) and the
    routed streams of their datasets (:func:`route_dataset`):

    - ``ceiling``: no CPU delay and a max pending high enough that Little's law does not bind (the ceiling
      ``benchmarks/topology_throughput.py`` measures): ``overhead_us``, the runner's serial time per word, and
      ``tuple_us`` (the same per-tuple cost for what ticks emit and ack) are fitted so that the model reproduces
      its words/s;
    - ``light``: no CPU delay, open loop well below the ceiling, so that nothing queues: ``commit_us`` is what
      its aggregators measured per partial count at their ticks (the run's ``aggregator_us``), ``hop_delay_ms``
      what it measured from the first emit to the first word at a counter (``first_hop_ms``: the spout, the
      router and the hops between), and ``ack_delay_ms``, from an aggregator's ack to the line's completion
      (the top-k bolt, the runner's acker, the spout's completion in Redis), is fitted so that the model
      reproduces its mean complete latency (the ticks' waits, which make up most of it, are in the model). A
      run from before these measurements fits the hop instead, with no ack delay;
    - ``saturation``: a CPU delay with every counter saturated (shuffle grouping, high max pending):
      ``counter_overhead_us``, what a counter spends per word beyond the delay (the sleep's overshoot when the
      cores are shared, reading and parsing the tuple), is fitted so that the model reproduces its words/s;
    - ``tick_phase_s``: the mean, over the runs, of where their ticks fell relative to the first emit.

    The hop used to be fitted to a mean latency (the ceiling's, then the light run's): 161 ms, then 51 to 76 ms,
    while a word reaches its counter 7 to 9 ms after its emit; the rest of a line's trip comes after the
    aggregators' tick, where a delay cannot push a counter's flush past a tick (kg at 1 ms in the agreement
    table).
    """
    if ceiling.get("cpu_delay_ms") or light.get("cpu_delay_ms"):
        raise ValueError("the ceiling and light calibration runs must have no CPU delay (keysplit run --cpu-delay 0)")
    if not light.get("rate"):
        raise ValueError("the light calibration run must be open loop (keysplit run --rate R)")
    if not saturation.get("cpu_delay_ms"):
        raise ValueError("the saturation calibration run needs a CPU delay")
    runs = (ceiling, light, saturation)
    phase = float(np.mean([float(r.get("tick_phase_s") or 0.0) for r in runs]))
    base = params_of_run(ceiling, tick_phase_s=phase)
    per_word = fit_overhead("overhead_us", ceiling["words_per_second"], replace(base, tuple_us=0.0), ceiling_arrays)
    commit = float(light.get("aggregator_us") or per_word)  # a run from before the aggregators measured it
    light_params = params_of_run(light, overhead_us=per_word, tuple_us=per_word, commit_us=commit,
                                 tick_phase_s=phase)
    if light.get("first_hop_ms") is not None:
        hop = float(light["first_hop_ms"])
        ack = fit_delay("ack_delay_ms", light["latency_ms"]["mean"], replace(light_params, hop_delay_ms=hop),
                        light_arrays)
    else:
        hop, ack = fit_delay("hop_delay_ms", light["latency_ms"]["mean"], light_params, light_arrays), 0.0
    sat = params_of_run(saturation, overhead_us=per_word, tuple_us=per_word, commit_us=commit, tick_phase_s=phase,
                        hop_delay_ms=hop, ack_delay_ms=ack)
    counter = fit_overhead("counter_overhead_us", saturation["words_per_second"], sat, saturation_arrays)
    return {"overhead_us": per_word, "counter_overhead_us": counter, "tuple_us": per_word, "commit_us": commit,
            "tick_phase_s": phase, "hop_delay_ms": hop, "ack_delay_ms": ack,
            "runs": {name: {k: r.get(k) for k in _RUN_FIELDS} for name, r in zip(("ceiling", "light", "saturation"),
                                                                                 runs)},
            "how": "fitted so that the model reproduces the words/s of a `keysplit run` with no CPU delay (runner "
                   "and protocol per word), the mean latency of one with no CPU delay at a light open-loop rate "
                   "(ack delay; that run measured the first hop and its aggregators' commit per partial count) and "
                   "the words/s of one with every counter saturated (counter per word)"}


_RUN_FIELDS = ("run_id", "grouping", "dataset", "workers", "sources", "aggregators", "cpu_delay_ms", "max_pending",
               "flush_secs", "rate", "words_per_second", "tick_phase_s", "aggregator_us", "first_hop_ms")


def load_calibration(path: str | None) -> dict:
    """A calibration file's overheads; ``path`` None reads :func:`default_calibration` if it exists, else zeros."""
    import json

    target = path or default_calibration()
    if path is None and not os.path.exists(target):
        return {name: 0.0 for name in CALIBRATED} | {"source": None}
    try:
        with open(target, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise KeysplitError(f"cannot read the calibration {target}: {exc}") from None
    if not isinstance(data, dict) or any(not isinstance(data.get(k), (int, float)) for k in CALIBRATED):
        raise KeysplitError(f"{target} is not a keysplit calibration (needs numbers {', '.join(CALIBRATED)})")
    optional = {k: float(data[k]) for k in OPTIONAL_CALIBRATED if isinstance(data.get(k), (int, float))}
    return {k: float(data[k]) for k in CALIBRATED} | optional | {"source": os.path.abspath(target)}
