"""The topology model's parameters and results: the knobs of a run (``keysplit run`` / ``keysplit replay``, the
facts ``keysplit compare`` checks), the calibrated overheads, and what one simulated run gives.

Complete latency is a line's emit-to-complete time (Storm's complete latency, what the spout measures) and the
throughput is words / (last completion - first emit), both as ``keysplit run`` reports them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from keysplit.latency import LatencyHistogram
from keysplit.sizes import MAX_CPU_DELAY_MS
from keysplit.storm.cpu_delay import DEFAULT_CPU_DELAY_MS
from keysplit.storm.window import DEFAULT_MAX_PENDING, WindowPolicy

#: Summary field -> the option of `keysplit run` and `keysplit replay` that sets it (the topology's knobs, under
#: the same names in both, and checked by `keysplit compare`).
KNOBS: dict[str, str] = {
    "sources": "--sources",
    "workers": "--workers",
    "aggregators": "--aggregators",
    "spouts": "--spouts",
    "cpu_delay_ms": "--cpu-delay",
    "max_pending": "--max-pending",
    "flush_secs": "--flush",
    "message_timeout_secs": "--message-timeout",
    "rate": "--rate",
    "batch": "--batch",
    "batch_ms": "--batch-ms",
}

#: The topologies the model follows: the word count (``keysplit run wordcount``) and a toolkit topology's keyed stage
#: (``keysplit.toolkit``: KeyRouter -> Aggregate.partial -> Aggregate.merge, docs/design/topology-model.md).
SHAPES = ("wordcount", "toolkit")

#: What `--arrivals` offers the replay.
ARRIVALS = ("closed", "open", "lindley")

#: The calibrated quantities a calibration file holds (microseconds, seconds).
CALIBRATED = ("overhead_us", "counter_overhead_us", "tuple_us", "tick_phase_s", "hop_delay_ms")
#: Calibrated quantities a file may lack (made before they were measured): the model's default then applies.
OPTIONAL_CALIBRATED = ("commit_us", "ack_delay_ms", "word_us", "spout_us", "merge_entry_us")

#: The most each calibrated cost may be, in its own unit: a minute, as the CPU delay
#: (:data:`keysplit.sizes.MAX_CPU_DELAY_MS`). A profile is data a user may edit or receive: beyond these no topology
#: is modelled (a fitted cost reaches 50 ms at most, :data:`keysplit.topology_model.profile.FITTED`), and a NaN
#: (which Python's json reads) or 1e300 left the model's event loop running for ever. The tick phase may be
#: negative (ticks that began before the first emit), by at most as much.
COST_LIMITS: dict[str, float] = {"overhead_us": 60e6, "word_us": 60e6, "counter_overhead_us": 60e6, "tuple_us": 60e6,
                                 "commit_us": 60e6, "hop_delay_ms": 60e3, "ack_delay_ms": 60e3, "tick_phase_s": 60.0,
                                 "spout_us": 60e6, "merge_entry_us": 60e6}


def check_cost(name: str, value: object) -> float:
    """``value`` as the calibrated cost ``name``: a finite number within 0 and its :data:`COST_LIMITS` (the tick
    phase within plus or minus it); a ValueError naming it otherwise."""
    limit = COST_LIMITS[name]
    low = -limit if name == "tick_phase_s" else 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= limit:
        unit = name.rsplit("_", 1)[1]
        raise ValueError(f"{name} must be a number between {low:g} and {limit:g} {unit}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class TopologyParams:
    """The knobs of a run (the names of ``keysplit run`` / ``keysplit replay``) and the calibrated overheads."""

    workers: int
    sources: int = 1  # routers: each holds its own batch per counter
    aggregators: int = 2
    cpu_delay_ms: float = DEFAULT_CPU_DELAY_MS
    max_pending: int = DEFAULT_MAX_PENDING
    spouts: int = 1
    flush_secs: float = 1.0
    message_timeout: float = 30.0
    rate: float | None = None  # lines/s per topology (open loop); None: closed loop
    batch: int = 1  # words a router sends a counter in one tuple at most (keysplit.batch; 1: one tuple a word)
    batch_ms: float = 20.0  # ... or once the first waited this long (keysplit.batch_ms)
    overhead_us: float = 0.0  # the runner's serial cost per tuple sent to a counter (calibrated)
    word_us: float = 0.0  # the runner's serial cost per word beyond its tuple's (calibrated with batches)
    counter_overhead_us: float = 0.0  # a counter's cost per input tuple beyond the CPU delay (calibrated)
    tuple_us: float = 0.0  # cost of one emitted or acked tuple in a counter's tick, or received by an aggregator
    commit_us: float | None = None  # an aggregator's time per partial count at its tick (None: tuple_us)
    ack_delay_ms: float = 0.0  # from an aggregator's ack to the spout's ack of a completed line
    hop_delay_ms: float = 0.0  # from the runner to the counter: the processes' hops when nothing queues (calibrated)
    tick_phase_s: float = 0.0  # time of tick 0 relative to the first emit (ticks at phase + k*T, k >= 1)
    # the spouts' adaptive window (decrease 1: Storm's fixed max pending)
    aimd: WindowPolicy = field(default_factory=WindowPolicy)
    words_per_line: float = 0.0  # the feed's, where the window starts from (storm/window.py window_start); 0: unknown
    shape: str = "wordcount"  # one of SHAPES: which topology's mechanics the kernel follows
    spout_us: float = 0.0  # toolkit: the feed spout's time per row (it emits ahead of the stages; calibrated)
    # toolkit: a merge task's time per partial-state entry it receives (one key's state from one partial task's
    # flush), measured from the merges' own work counters; the word count ignores it (its aggregators pay commit_us)
    merge_entry_us: float = 0.0

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {self.shape!r}")
        for name in ("workers", "sources", "aggregators", "max_pending", "spouts", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        for name in COST_LIMITS:  # NaN and infinity fail every comparison: refused here, never simulated
            if name != "commit_us" or self.commit_us is not None:
                check_cost(name, getattr(self, name))
        if not 0 <= self.cpu_delay_ms <= MAX_CPU_DELAY_MS:
            raise ValueError(f"cpu_delay_ms must be between 0 and {MAX_CPU_DELAY_MS:g}, got {self.cpu_delay_ms}")
        for name in ("flush_secs", "message_timeout", "batch_ms", *(("rate",) if self.rate is not None else ())):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be a positive number, got {getattr(self, name)}")

    @property
    def commit_s(self) -> float:
        """An aggregator's time per partial count at its tick."""
        return (self.commit_us if self.commit_us is not None else self.tuple_us) / 1e6

    @property
    def service_s(self) -> float:
        """A counter's time for a tuple of one word."""
        return self.cpu_delay_ms / 1000.0 + self.counter_overhead_us / 1e6


@dataclass
class ModelResult:
    """What one simulated run gives (seconds; latencies per line in ms). ``emit``/``done`` (each line's emit and
    completion time) are kept only when asked for (:func:`run_model` keeps them; the Spark task does not)."""

    words: int
    lines: int
    first_emit: float
    last_done: float
    counter_busy: np.ndarray
    timeouts: int
    latencies: LatencyHistogram
    params: TopologyParams = field(repr=False, default=None)  # type: ignore[assignment]
    emit: np.ndarray | None = None
    done: np.ndarray | None = None
    window: tuple[int, int, int] | None = None  # the spouts' window at the end, its lowest, its cuts (all spouts)
    aggregator_busy: np.ndarray | None = None  # each aggregator's (a toolkit topology's merge task's) busy time
    aggregator_entries: np.ndarray | None = None  # toolkit: the partial-state entries each merge task received

    @property
    def latency_ms(self) -> np.ndarray:
        if self.emit is None or self.done is None:
            raise ValueError("this run did not keep each line's times (run_model keeps them)")
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
        the histogram (its upper bound: within 1/16384 above)."""
        if self.emit is None:
            return self.latencies.percentile_bounds(q)[1]
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
            **({"window": self.window[0], "window_min": self.window[1], "window_cuts": self.window[2]}
               if self.window is not None else {}),
            "counter_utilisation": (self.counter_busy / d).tolist() if d > 0 else [],
        }


def model_params(opts: Any, workers: int | None = None) -> TopologyParams:
    """The model's parameters for a replay (``spark_replay.options.ReplayOptions``); a SpecError when invalid."""
    from keysplit.errors import SpecError

    o = getattr(opts, "overheads", None) or {}
    try:
        return TopologyParams(
            workers=workers or opts.workers, sources=opts.sources, aggregators=opts.aggregators,
            cpu_delay_ms=opts.cpu_delay_ms, max_pending=opts.max_pending, spouts=opts.spouts,
            flush_secs=opts.flush_secs, message_timeout=opts.message_timeout,
            rate=opts.rate if opts.arrivals == "open" else None, batch=opts.batch, batch_ms=opts.batch_ms,
            shape=getattr(opts, "shape", "wordcount"), **{k: float(o.get(k, 0.0)) for k in CALIBRATED},
            **{k: float(o[k]) for k in OPTIONAL_CALIBRATED if o.get(k) is not None})
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def params_of_run(run: dict, **overheads: float) -> TopologyParams:
    """The model's knobs as a ``keysplit run`` summary records them, with the given overheads (a run recorded before
    batches existed sent one tuple per word)."""
    return TopologyParams(
        workers=int(run["workers"]), sources=int(run.get("sources") or 1), aggregators=int(run.get("aggregators") or 2),
        batch=int(run.get("batch") or 1), batch_ms=float(run.get("batch_ms") or TopologyParams.batch_ms),
        cpu_delay_ms=float(run.get("cpu_delay_ms") or 0.0), max_pending=int(run.get("max_pending") or 1000),
        spouts=int(run.get("spouts") or 1), flush_secs=float(run.get("flush_secs") or 1.0),
        message_timeout=float(run.get("message_timeout_secs") or 30), rate=run.get("rate") or None,
        words_per_line=float(run.get("messages") or 0) / max(1, int(run.get("lines") or 0)),
        shape=run.get("shape") or "wordcount", **overheads)
