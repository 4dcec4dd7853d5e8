"""The topology model's driver: the stream in, the result out, and the in-process routing of a dataset.

The model streams: :class:`StreamedModel` takes the routed stream in sequence order a chunk of whole lines at a
time, and its event loop (:func:`~keysplit.topology_model.kernel.stream_kernel`) keeps only what is in flight --
rings of the lines from the oldest one not complete to the last fed, and of their words (at most ``max_pending``
x ``spouts`` lines are in flight, in closed and open loop) -- plus per-counter, per-aggregator and per-key state;
each completed line's latency goes to a fixed-size histogram (:mod:`keysplit.latency`'s bins, counted at the
finest). In the replay it runs in one Spark task fed the routed pieces in chunk order
(``spark_replay.model_task.spark_estimate``), so its memory does not grow with the stream.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from keysplit import latency
from keysplit.errors import KeysplitError
from keysplit.latency import LatencyHistogram
from keysplit.storm.streams import fields_index
from keysplit.storm.window import latency_target, window_start
from keysplit.topology_model.kernel import (
    _F_COMP,
    _F_FIRST,
    _F_LAST,
    _F_MAX,
    _F_MIN,
    _F_SUM,
    _I_COMPLETED,
    _I_LINES,
    _I_OLDEST,
    _I_TIMEOUTS,
    _S_ACK,
    _S_BATCH,
    _S_CAP,
    _S_COMMIT,
    _S_CTUPLE,
    _S_HOP,
    _S_MERGE_ENTRY,
    _S_PHASE,
    _S_RATE,
    _S_RUNNER,
    _S_SERVICE,
    _S_SHAPE,
    _S_SPOUT,
    _S_TICK,
    _S_TICKS,
    _S_TIMEOUT,
    _S_TUPLE,
    _S_WAIT,
    _S_WORD,
    stream_kernel,
)
from keysplit.topology_model.params import SHAPES, ModelResult, TopologyParams
from keysplit.topology_model.window import W_CUTS, W_LOWEST, new_window, window_lines


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


#: The model's bound on its own work: task visits at ticks (every tick visits every counter and aggregator, and
#: ticks go on for as long as the simulated run lasts): 2^28, about 45 s of the event loop (2 us a tick at W=10,
#: A=2, measured), 22 million ticks there, 259 days of topology time at 1 s a tick. A run the costs make longer
#: (NaN or 1e300 us a tuple never ended) is refused in one line, not followed.
MAX_TICK_VISITS = 1 << 28


def kernel_settings(p: TopologyParams, tick_visits: int = MAX_TICK_VISITS) -> np.ndarray:
    """The kernel's settings (its ``_S_*`` slots) from the parameters: times in seconds."""
    out = np.zeros(_S_MERGE_ENTRY + 1)
    out[_S_SERVICE], out[_S_RUNNER], out[_S_TUPLE], out[_S_COMMIT] = (p.cpu_delay_ms / 1000.0, p.overhead_us / 1e6,
                                                                      p.tuple_us / 1e6, p.commit_s)
    out[_S_ACK], out[_S_TICK], out[_S_PHASE] = p.ack_delay_ms / 1000.0, p.flush_secs, p.tick_phase_s
    out[_S_CAP], out[_S_RATE], out[_S_TIMEOUT] = p.max_pending * p.spouts, p.rate or 0.0, p.message_timeout
    out[_S_HOP], out[_S_WORD], out[_S_CTUPLE] = p.hop_delay_ms / 1000.0, p.word_us / 1e6, p.counter_overhead_us / 1e6
    out[_S_BATCH], out[_S_WAIT] = p.batch, p.batch_ms / 1000.0
    out[_S_TICKS] = tick_visits // (p.workers + p.aggregators)
    out[_S_SHAPE] = SHAPES.index(p.shape)
    out[_S_SPOUT] = p.spout_us / 1e6
    out[_S_MERGE_ENTRY] = p.merge_entry_us / 1e6
    return out


#: Lines :meth:`StreamedModel.feed` hands the kernel at a time (a bigger chunk is cut).
FEED_LINES = 1 << 13


class StreamedModel:
    """The model fed its routed stream in sequence order, a chunk of whole lines at a time (:meth:`feed`), then
    :meth:`finish`. It holds the lines and words from the oldest line in flight to the last fed (in closed and
    open loop at most ``max_pending x spouts`` lines are in flight), the counters' and aggregators' state, one
    stamp per key, the event heap and a fixed-size latency histogram: not the stream."""

    def __init__(self, params: TopologyParams, keep_lines: int = 0, tick_visits: int = MAX_TICK_VISITS) -> None:
        self.params = params
        self.iv = np.zeros(12, dtype=np.int64)
        self.fv = np.zeros(8)
        self.fv[_F_MAX] = -math.inf
        self.fv[_F_MIN] = math.inf
        self.settings = kernel_settings(params, tick_visits)
        # the spouts' AIMD window (storm/window.py), open loop too (storm/spout_pacing.py)
        # starting where the spouts' window does for the feed's words a line
        target = latency_target(params.flush_secs, params.batch, params.batch_ms)
        self.window = new_window(params.max_pending, params.spouts, params.message_timeout, params.aimd, target,
                                 window_start(params.workers, params.cpu_delay_ms, target, params.words_per_line,
                                              params.spouts), slow_start=params.cpu_delay_ms <= 0)
        size = 1024 + 4 * (params.workers + params.aggregators)
        self.heap = (np.empty(size), np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64),
                     np.empty(size, dtype=np.int64))
        w, a, b = params.workers, params.aggregators, params.sources * params.workers
        self.counters = (np.full(w, -1, dtype=np.int64), np.full(w, -1, dtype=np.int64), np.zeros(w), np.zeros(w),
                         np.zeros(w, dtype=np.int64), np.zeros(w))
        self.aggs = (np.full(a, -1, dtype=np.int64), np.full(a, -1, dtype=np.int64), np.zeros(a),
                     np.zeros(a, dtype=np.int64), np.full(a, -math.inf), np.zeros(a), np.zeros(a, dtype=np.int64))
        # each router's batch for each counter: chain of its words, their number, the batches it sent
        self.batches = (np.full(b, -1, dtype=np.int64), np.full(b, -1, dtype=np.int64), np.zeros(b, dtype=np.int64),
                        np.zeros(b, dtype=np.int64))
        self.stamp = np.zeros(1024, dtype=np.int64)
        ring = _pow2(params.max_pending * params.spouts)
        # lines: words left to ack, emit time, router, first word; words: worker, aggregator, key, line, next in chain
        self.lines = [np.zeros(ring, dtype=np.int64), np.zeros(ring), np.zeros(ring, dtype=np.int64),
                      np.zeros(ring, dtype=np.int64)]
        self.words = [np.zeros(ring * 4, dtype=np.int64) for _ in range(5)]
        self.words_fed = 0
        self.h_count = np.zeros(latency.BINS, dtype=np.int64)
        self.rec_emit = np.full(keep_lines, np.nan)
        self.rec_done = np.full(keep_lines, np.nan)

    def feed(self, lengths: np.ndarray, workers: np.ndarray, aggregators: np.ndarray, key_ids: np.ndarray,
             sources: np.ndarray | None = None) -> None:
        """The next lines: ``lengths[i]`` words each (empty lines dropped), their words' workers, aggregators and
        key ids (ids any integers >= 0 equal for equal keys) in feed order, and each line's router (``sources``,
        as the spout deals them; default: round-robin by line number, ``--split shuffle`` over a dataset with no
        record without keys); runs the model as far as they go."""
        lengths = np.asarray(lengths, dtype=np.int64)
        if sources is None:
            fed = int(self.iv[_I_LINES])
            sources = np.arange(fed, fed + int((lengths > 0).sum()), dtype=np.int64) % self.params.sources
        else:
            sources = np.asarray(sources, dtype=np.int64)[lengths > 0]
            if len(sources) and (int(sources.min()) < 0 or int(sources.max()) >= self.params.sources):
                raise ValueError(f"a line's router is outside 0..{self.params.sources - 1}")
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
            self._feed(lengths[a:b], workers[words], aggregators[words], key_ids[words], sources[a:b])

    def _feed(self, lengths: np.ndarray, workers: np.ndarray, aggregators: np.ndarray, key_ids: np.ndarray,
              sources: np.ndarray) -> None:
        m = len(workers)
        fed, oldest, k = int(self.iv[_I_LINES]), int(self.iv[_I_OLDEST]), len(lengths)
        left = self.lines[0]
        if fed + k - oldest > len(left):
            self.lines = _regrow(self.lines, oldest, fed, fed + k - oldest)
        left, _, source, first = self.lines
        low = int(first[oldest & (len(first) - 1)]) if oldest < fed else self.words_fed
        if self.words_fed + m - low > len(self.words[0]):
            self.words = _regrow(self.words, low, self.words_fed, self.words_fed + m - low)
        li = np.arange(fed, fed + k, dtype=np.int64) & (len(left) - 1)
        left[li] = lengths
        source[li] = sources
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
        status, self.heap = stream_kernel((self.iv, self.fv, self.window), self.heap, self.counters, self.aggs,
                                          self.batches, self.stamp, (self.lines[0], self.lines[1], self.lines[2]),
                                          tuple(self.words), self.h_count,
                                          (self.rec_emit, self.rec_done), self.settings, final)
        if status == 2:
            ticks = int(self.settings[_S_TICKS])
            days = ticks * self.params.flush_secs / 86400
            left = int(self.iv[_I_LINES] - self.iv[_I_COMPLETED])
            raise KeysplitError(f"the topology model gave up after {ticks:,} ticks ({days:,.0f} days of topology "
                                f"time) with {left:,} line(s) not complete: the costs (CPU delay, calibration) make "
                                "the run longer than the model follows; check them")
        assert final or status == 0, "the model stopped before the stream's end"

    def finish(self) -> ModelResult:
        """Run to the last line's completion; the result (each line's times only when ``keep_lines`` covers it)."""
        self._run(True)
        lines = int(self.iv[_I_LINES])
        used = np.flatnonzero(self.h_count)
        lat = LatencyHistogram.from_bins(dict(zip(used.tolist(), self.h_count[used].tolist())),
                                         float(self.fv[_F_SUM] + self.fv[_F_COMP]),
                                         float(self.fv[_F_MIN]) if lines else math.inf,
                                         float(self.fv[_F_MAX]) if lines else 0.0)
        assert lat.count == int(self.iv[_I_COMPLETED])
        kept = len(self.rec_emit) >= lines
        return ModelResult(self.words_fed, lines, float(self.fv[_F_FIRST]), float(self.fv[_F_LAST]),
                           self.counters[3], int(self.iv[_I_TIMEOUTS]), lat, self.params,
                           self.rec_emit[:lines] if kept else None, self.rec_done[:lines] if kept else None,
                           window=(window_lines(self.window), int(self.window[W_LOWEST]), int(self.window[W_CUTS])),
                           aggregator_busy=self.aggs[5], aggregator_entries=self.aggs[6])


def line_starts(words_per_line: np.ndarray) -> np.ndarray:
    """Offsets of each line's first word (and the total at the end) from words per line; empty lines dropped."""
    lens = np.asarray(words_per_line, dtype=np.int64)
    lens = lens[lens > 0]
    return np.concatenate(([0], np.cumsum(lens))).astype(np.int64)


#: Lines :func:`run_model` feeds the model at a time.
SIMULATE_CHUNK = 1 << 16


def run_model(params: TopologyParams, line_start: np.ndarray, workers: np.ndarray, key_ids: np.ndarray,
             aggregators: np.ndarray | None = None, sources: np.ndarray | None = None, *,
             chunk_lines: int = SIMULATE_CHUNK, keep_lines: bool = True) -> ModelResult:
    """Run the model over a routed stream: ``workers[j]``/``key_ids[j]`` of word j in feed order, lines cut at
    ``line_start``; ``aggregators[j]`` the aggregator of word j (default: key id mod A); ``sources[i]`` the router
    of non-empty line i (default: round-robin). The stream goes to the model ``chunk_lines`` lines at a time;
    ``keep_lines`` keeps each line's emit and completion time (then the summary's mean and percentiles are
    exact)."""
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
    if sources is not None:
        sources = np.asarray(sources, dtype=np.int64)
        if len(sources) == len(lengths):  # one per line of line_start, empty ones included: keep the non-empty
            sources = sources[lengths > 0]
    lengths = lengths[lengths > 0]
    if sources is not None and len(sources) != len(lengths):
        raise ValueError("sources and line starts disagree on the number of lines")
    bounds = line_starts(lengths)
    if not params.words_per_line:  # the stream's own, as the spouts read the feed's
        params = replace(params, words_per_line=len(workers) / max(1, len(lengths)))
    model = StreamedModel(params, len(lengths) if keep_lines else 0)
    for a in range(0, len(lengths), max(1, chunk_lines)):
        b = min(a + max(1, chunk_lines), len(lengths))
        words = slice(int(bounds[a]), int(bounds[b]))
        model.feed(lengths[a:b], workers[words], aggregators[words], key_ids[words],
                   None if sources is None else sources[a:b])
    return model.finish()


def aggregator_of(keys: list[str], aggregators: int, shape: str = "wordcount") -> np.ndarray:
    """The aggregator task index of each word: in the word count the task Storm's fields grouping on ``word`` picks,
    as the counters compute it (:func:`keysplit.storm.streams.fields_index`); in a toolkit topology the merge task
    that owns the key, as the partials compute it (:func:`keysplit.hashing.merge_index` of the key's JSON
    text, the merge's key identity)."""
    if shape == "toolkit":
        import json

        from keysplit.hashing import merge_index

        return np.asarray([merge_index(json.dumps(k), aggregators) for k in keys], dtype=np.int64)
    return np.asarray([fields_index(k, aggregators) for k in keys], dtype=np.int64)


def stream_arrays(lengths: np.ndarray, workers: np.ndarray, keys: list[str], aggregators: int,
                  sources: np.ndarray | None = None, shape: str = "wordcount") -> tuple:
    """``(line_start, workers, key ids, aggregator ids, line sources)`` for :func:`run_model` from words in feed
    order (``sources`` None: round-robin)."""
    vocab, key_ids = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    aggs = aggregator_of(vocab.tolist(), aggregators, shape)[key_ids]
    return (line_starts(lengths), np.asarray(workers, dtype=np.int64), key_ids.astype(np.int64), aggs,
            None if sources is None else np.asarray(sources, dtype=np.int64))


def route_dataset(spec: str, grouping: str, workers: int, sources: int, aggregators: int, *,
                  rate: float | None = None, capacities: list[float] | None = None, split: str = "shuffle",
                  shape: str = "wordcount") -> tuple:
    """Route a dataset with the simulator's groupings in process (no Spark): the model's input arrays.

    Records go to sources as ``keysplit simulate`` deals them (and as the spout deals lines to the routers:
    ``keysplit.stream.source_of``); event time is ``sequence / rate``."""
    from keysplit.datasets import open_dataset
    from keysplit.groupings.hosting import prepare_groupings, route
    from keysplit.stream import DEFAULT_RATE, source_of

    dataset = open_dataset(spec)
    groupings = prepare_groupings(grouping, workers, sources, dataset, capacities=capacities)
    chosen, keys = [], []
    for _, _, key, w in route(dataset, groupings, rate=rate or DEFAULT_RATE, split=split):
        chosen.append(w)
        keys.append(key)
    records = [(i, k) for i, (_, k) in enumerate(dataset.records()) if k]
    lengths = [len(k) for _, k in records]
    dealt = [source_of(i, k[0], sources, split) for i, k in records]
    return stream_arrays(np.asarray(lengths), np.asarray(chosen), keys, aggregators, np.asarray(dealt), shape)
