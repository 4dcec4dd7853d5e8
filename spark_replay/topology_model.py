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
  tick (``tuple_us`` each, and ``tuple_us`` per word it acks), anchored to the words; each partial count goes to
  the aggregator of its word (the runner's fields hash), which serves it in ``tuple_us`` and holds it until
  the aggregator's next tick; that tick's service (``tuple_us`` per partial count, the Redis write) ends with
  the ack, and the line is complete ``ack_delay_ms`` later (the top-k bolt, the acker, the spout's ack) once
  every word of it is acked.

Complete latency is a line's emit-to-complete time (Storm's complete latency, what the spout measures) and the
throughput is words / (last completion - first emit), both as ``keysplit run`` reports them.

Not modelled: message timeouts re-emitting a line (the lines that would exceed ``message_timeout`` are counted
in ``timeouts``; a run that replayed lines is outside the model), task restarts, and CPU contention beyond the
runner's serial stage.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import asdict, dataclass, field, replace
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
    tuple_us: float = 0.0  # cost of one emitted or acked tuple in a counter's or aggregator's tick
    ack_delay_ms: float = 0.0  # from an aggregator's ack to the spout's ack of a completed line
    hop_delay_ms: float = 0.0  # from the runner to the counter: the processes' hops when nothing queues (calibrated)
    tick_phase_s: float = 0.0  # time of tick 0 relative to the first emit (ticks at phase + k*T, k >= 1)

    def __post_init__(self) -> None:
        for name in ("workers", "aggregators", "max_pending", "spouts"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in ("cpu_delay_ms", "overhead_us", "counter_overhead_us", "tuple_us", "ack_delay_ms", "hop_delay_ms"):
            if getattr(self, name) < 0:
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
    def service_s(self) -> float:
        """A counter's time per word."""
        return self.cpu_delay_ms / 1000.0 + self.counter_overhead_us / 1e6


@dataclass
class ModelResult:
    """What one simulated run gives (seconds; latencies per line)."""

    emit: np.ndarray
    done: np.ndarray
    words: int
    counter_busy: np.ndarray
    timeouts: int
    params: TopologyParams = field(repr=False, default=None)  # type: ignore[assignment]

    @property
    def latency_ms(self) -> np.ndarray:
        return (self.done - self.emit) * 1000.0

    @property
    def duration_s(self) -> float:
        return float(self.done.max() - self.emit.min()) if len(self.done) else 0.0

    @property
    def words_per_second(self) -> float:
        d = self.duration_s
        return self.words / d if d > 0 else 0.0

    def percentile(self, q: float) -> float:
        """Nearest-rank percentile of the complete latency, ms (as the spout's histogram, without its buckets)."""
        lat = np.sort(self.latency_ms)
        if not len(lat):
            return 0.0
        return float(lat[max(1, math.ceil(q / 100.0 * len(lat))) - 1])

    def summary(self) -> dict:
        lat = self.latency_ms
        return {
            "throughput_estimate": self.words_per_second,
            "lines_per_second": len(self.done) / self.duration_s if self.duration_s > 0 else 0.0,
            "latency_mean_ms": float(lat.mean()) if len(lat) else 0.0,
            "latency_p50_ms": self.percentile(50),
            "latency_p95_ms": self.percentile(95),
            "latency_p99_ms": self.percentile(99),
            "latency_max_ms": float(lat.max()) if len(lat) else 0.0,
            "duration_s": self.duration_s,
            "timeouts": self.timeouts,
            "counter_utilisation": (self.counter_busy / self.duration_s).tolist() if self.duration_s > 0 else [],
        }


# ------------------------------------------------------------------------------------------------ the kernel


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
def _append(head, tail, nxt, q, j):
    """Append word j to chain q (one linked list per counter or aggregator: ``head``/``tail`` over ``nxt``)."""
    nxt[j] = -1
    if head[q] < 0:
        head[q] = j
    else:
        nxt[tail[q]] = j
    tail[q] = j


@numba.njit(cache=True)
def _count(head, nxt, word_key, stamp, stamp_no):
    """Words and distinct keys of the chain starting at ``head`` (``stamp`` marks keys seen with ``stamp_no``)."""
    words = 0
    distinct = 0
    j = head
    while j >= 0:
        words += 1
        k = word_key[j]
        if stamp[k] != stamp_no:
            stamp[k] = stamp_no
            distinct += 1
        j = nxt[j]
    return words, distinct


@numba.njit(cache=True)
def simulate_kernel(line_start, word_worker, word_agg, word_key, n_keys, n_workers, n_aggs, service, runner,
                    tuple_cost, ack_delay, tick, phase, cap, rate, timeout, hop):
    """The event loop (see the module docstring). Times in seconds; ``rate`` 0 means closed loop.

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
            _append(c_head, c_tail, nxt, w, j)
        elif kind == _TICK:
            # every counter's tick, queued behind its backlog: it flushes the words that arrived before it
            for w in range(n_workers):
                head = c_head[w]
                c_head[w] = -1
                c_tail[w] = -1
                stamp_no += 1
                words, distinct = _count(head, nxt, word_key, stamp, stamp_no)
                start = max(now, c_free[w])
                c_free[w] = start + tuple_cost * (words + distinct)
                c_busy[w] += tuple_cost * (words + distinct)
                if head >= 0:
                    ht, hs, hk, ha, n = _push(ht, hs, hk, ha, n, seq, c_free[w], _PARTIAL, head)
                    seq += 1
            # every aggregator's tick: acks what reached it before the tick (its partial counts, FIFO)
            for a in range(n_aggs):
                head = a_head[a]
                a_head[a] = -1
                a_tail[a] = -1
                if head < 0:
                    continue
                stamp_no += 1
                _, distinct = _count(head, nxt, word_key, stamp, stamp_no)
                start = max(now, a_free[a])
                a_free[a] = start + tuple_cost * distinct
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
                _append(a_head, a_tail, nxt, a, j)
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


# ------------------------------------------------------------------------------------------------- the API


def line_starts(words_per_line: np.ndarray) -> np.ndarray:
    """Offsets of each line's first word (and the total at the end) from words per line; empty lines dropped."""
    lens = np.asarray(words_per_line, dtype=np.int64)
    lens = lens[lens > 0]
    return np.concatenate(([0], np.cumsum(lens))).astype(np.int64)


def simulate(params: TopologyParams, line_start: np.ndarray, workers: np.ndarray, key_ids: np.ndarray,
             aggregators: np.ndarray | None = None) -> ModelResult:
    """Run the model over a routed stream: ``workers[j]``/``key_ids[j]`` of word j in feed order, lines cut at
    ``line_start``; ``aggregators[j]`` the aggregator of word j (default: key id mod A)."""
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
    n_keys = int(key_ids.max()) + 1 if len(key_ids) else 1
    emit, done, busy, timeouts = simulate_kernel(
        line_start, workers, aggregators, key_ids, n_keys, params.workers, params.aggregators, params.service_s,
        params.overhead_us / 1e6, params.tuple_us / 1e6, params.ack_delay_ms / 1000.0, params.tick_secs,
        params.tick_phase_s, params.max_pending * params.spouts, params.rate or 0.0, params.message_timeout,
        params.hop_delay_ms / 1000.0)
    return ModelResult(emit, done, len(workers), busy, int(timeouts), params)


def params_dict(params: TopologyParams) -> dict:
    return asdict(params)


def aggregator_of(keys: list[str], aggregators: int) -> np.ndarray:
    """The aggregator task index of each word: the local runner's fields grouping on ``word``."""
    from keysplit.local.routing import fields_index

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
    from keysplit.simulate import DEFAULT_RATE, prepare_groupings, route

    dataset = open_dataset(spec)
    groupings = prepare_groupings(grouping, workers, sources, dataset, capacities=capacities)
    chosen, keys = [], []
    for _, _, key, w in route(dataset, groupings, rate=rate or DEFAULT_RATE):
        chosen.append(w)
        keys.append(key)
    lengths = [len(k) for _, k in dataset.records() if k]
    return stream_arrays(np.asarray(lengths), np.asarray(chosen), keys, aggregators)


def record_lengths(spec: str) -> np.ndarray:
    """Words per record of a dataset, in feed order (records without a key skipped, as the feed skips them)."""
    from keysplit.datasets import open_dataset

    spec = re.sub(r"^([a-z-]+):file:(//)?", r"\1:", spec)  # a file: URI is a local path (others: see job.py)
    return np.fromiter((len(k) for _, k in open_dataset(spec).records() if k), dtype=np.int64)


# --------------------------------------------------------------------------------------------- Spark


def spark_estimate(routed: object, dataset_spec: str, params: TopologyParams) -> dict:
    """Run the model for one grouping in ONE Spark task: the routed partitions (``(SubStream, workers, fast)``)
    are gathered in sequence order with their keys, the record lengths are read from the dataset in the
    same task, and only the summary comes back to the driver."""

    def piece(r: tuple) -> tuple:
        sub, chosen = r[0], r[1]
        return sub.seq, np.asarray(chosen, dtype=np.int64), sub.key_ids, list(sub.vocab)

    def task(pieces: list) -> dict:
        seq = np.concatenate([p[0] for p in pieces])
        chosen = np.concatenate([p[1] for p in pieces])
        keys: list[str] = []
        for p in pieces:
            vocab = p[3]
            keys.extend(vocab[k] for k in p[2].tolist())
        order = np.argsort(seq, kind="stable")
        ordered_keys = [keys[i] for i in order.tolist()]
        arrays = stream_arrays(record_lengths(dataset_spec), chosen[order], ordered_keys, params.aggregators)
        return simulate(params, *arrays).summary()

    return (routed.map(lambda r: (0, [piece(r)]))  # type: ignore[attr-defined]
            .reduceByKey(lambda a, b: a + b, numPartitions=1)
            .map(lambda kv: task(kv[1]))
            .collect()[0])


# ---------------------------------------------------------------------------------------- calibration


#: The calibration file ``keysplit replay`` reads when ``--calibration`` is not given, in the project's state
#: directory (``$KEYSPLIT_HOME``, else ``./.keysplit``).
CALIBRATION_NAME = "calibration.json"


def default_calibration() -> str:
    from keysplit.redis_server import keysplit_home

    return str(keysplit_home() / CALIBRATION_NAME)
#: The calibrated quantities a calibration file holds (microseconds, seconds).
CALIBRATED = ("overhead_us", "counter_overhead_us", "tuple_us", "tick_phase_s", "hop_delay_ms")


def model_params(opts: Any, workers: int | None = None) -> TopologyParams:
    """The model's parameters for a replay (``spark_replay.job.ReplayOptions``); a SpecError when invalid."""
    from keysplit.errors import SpecError

    o = getattr(opts, "overheads", None) or {}
    try:
        return TopologyParams(
            workers=workers or opts.workers, aggregators=opts.aggregators, cpu_delay_ms=opts.cpu_delay_ms,
            max_pending=opts.max_pending, spouts=opts.spouts, flush_secs=opts.flush_secs,
            message_timeout=opts.message_timeout, rate=opts.rate if opts.arrivals == "open" else None,
            **{k: float(o.get(k, 0.0)) for k in CALIBRATED})
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


def calibrate(ceiling: dict, ceiling_arrays: tuple, saturation: dict, saturation_arrays: tuple) -> dict:
    """The model's overheads from two calibration runs of ``keysplit run`` (their ``--json`` summaries) and the
    routed streams of their datasets (:func:`route_dataset`):

    - ``ceiling``: no CPU delay and a max pending high enough that Little's law does not bind (the ceiling
      ``benchmarks/topology_throughput.py`` measures): ``overhead_us``, the runner's serial time per word, and
      ``tuple_us`` (the same per-tuple cost for what ticks emit and ack) are fitted so that the model reproduces
      its words/s;
    - ``saturation``: a CPU delay with every counter saturated (shuffle grouping, high max pending):
      ``counter_overhead_us``, what a counter spends per word beyond the delay (the sleep's overshoot when the
      cores are shared, reading and parsing the tuple), is fitted so that the model reproduces its words/s;
    - ``hop_delay_ms``: the delay from the runner to a counter when nothing queues (the hops through the router
      processes, which wait for a core on a shared machine), fitted so that the model reproduces the ceiling
      run's mean complete latency;
    - ``tick_phase_s``: the mean, over both runs, of where their ticks fell relative to the first emit.
    """
    if ceiling.get("cpu_delay_ms"):
        raise ValueError("the ceiling calibration run must have no CPU delay (keysplit run --cpu-delay 0)")
    if not saturation.get("cpu_delay_ms"):
        raise ValueError("the saturation calibration run needs a CPU delay")
    phase = float(np.mean([float(r.get("tick_phase_s") or 0.0) for r in (ceiling, saturation)]))
    base = params_of_run(ceiling, tick_phase_s=phase)
    per_word = fit_overhead("overhead_us", ceiling["words_per_second"], replace(base, tuple_us=0.0), ceiling_arrays)
    hop = fit_delay("hop_delay_ms", ceiling["latency_ms"]["mean"],
                    replace(base, overhead_us=per_word, tuple_us=per_word), ceiling_arrays)
    sat = params_of_run(saturation, overhead_us=per_word, tuple_us=per_word, tick_phase_s=phase, hop_delay_ms=hop)
    counter = fit_overhead("counter_overhead_us", saturation["words_per_second"], sat, saturation_arrays)
    return {"overhead_us": per_word, "counter_overhead_us": counter, "tuple_us": per_word, "tick_phase_s": phase,
            "hop_delay_ms": hop,
            "runs": {"ceiling": {k: ceiling.get(k) for k in _RUN_FIELDS},
                     "saturation": {k: saturation.get(k) for k in _RUN_FIELDS}},
            "how": "fitted so that the model reproduces the words/s and mean latency of a `keysplit run` with no CPU "
                   "delay (runner and protocol per word, hop delay) and the words/s of one with every counter "
                   "saturated (counter per word)"}


_RUN_FIELDS = ("run_id", "grouping", "dataset", "workers", "sources", "aggregators", "cpu_delay_ms", "max_pending",
               "flush_secs", "words_per_second", "tick_phase_s")


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
    return {k: float(data[k]) for k in CALIBRATED} | {"source": os.path.abspath(target)}
