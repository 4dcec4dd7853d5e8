"""The spout's adaptive window: how many lines one spout task keeps in flight, adapted to the message timeout.

Why. Storm's spout executor calls ``nextTuple`` whenever fewer than ``topology.max.spout.pending`` trees are
pending (apache/storm ``storm-client/src/jvm/org/apache/storm/executor/spout/SpoutExecutor.java``:
``reachedMaxSpoutPending``), a ShellSpout forwards each call to the Python spout as a ``next`` command
(``storm-client/src/jvm/org/apache/storm/spout/ShellSpout.java`` ``nextTuple``), and a tree still pending after
the message timeout is failed back to the spout when the executor's pending map rotates on its tick (the same
``SpoutExecutor.tupleActionFn``, ``pending.rotate()``). Nothing else bounds what is in flight. When the topology
cannot complete max-pending lines within the timeout, every line times out, is replayed behind the stale copies of
itself still queued in the bolts, and times out again: Storm's timeout meltdown (docs/design/overload.md).

The spout is ours, so it bounds itself: Storm keeps calling ``nextTuple`` below max pending, and the spout emits
nothing while its own window is full. The window follows TCP's congestion rule (AIMD):

- it starts at max pending, so a run that never times out behaves exactly as before;
- a timeout (a ``fail`` of a line emitted at least a message timeout ago) multiplies it by ``decrease``, taken
  from the lines actually in flight when that is fewer (a window above the load would never bite). Only a
  timeout of a line emitted after the last cut cuts again: the lines of one wave time out together, and those
  sent under the old window say nothing about the new one (TCP's one cut per round trip);
- each ack adds ``increase / window`` lines (``increase`` lines per window of acks: additive increase) at or
  above the threshold, and a whole line below it (the window doubles per round trip: TCP's slow start). The
  threshold is the window a cut left when lines were being acked since the cut before (the load the topology
  was completing); cuts with no ack between them leave it alone: they come while the bolts drain the stale
  copies of a wave that all timed out (each replay waits behind them and times out too), so they say how long
  that backlog is, not what the topology completes. Without slow start the window climbs back from such
  over-cuts by one line per round trip (a round trip here is the flush period or more: minutes per hundred
  lines);
- it grows only while it limits the spout: on an ack that leaves at least half of it out, or of a line during
  whose round trip it was full (it held a line back). A window the spout does not fill says nothing about a larger
  one (RFC 7661's rule for TCP's window when the sender has too little to send), so a spout that has little to
  read does not inflate it. The second half of the rule is RFC 7661's own test (was the sender window-limited
  while the data now acked was out?) and it matters here because a counter's flush completes every line it holds
  at once: the acks come in bursts, during which the lines out fall from the whole window to a few, and the spout
  refills it from a few. Counting only the lines out at each ack grew the window on the first half of each burst:
  measured on Storm 2.8.8 at no delay it grew x1.33 a second instead of doubling, and a 3-million-word run spent
  half its time below the window it needed (docs/benchmarks/storm-cluster.md);
- a cut never goes below the lines acked within the last message timeout: by Little's law the topology keeps
  that many lines in flight within the timeout, so a smaller window cannot be what stops the timeouts. In a
  meltdown nothing is acked, and nothing holds the cut;
- it stays within ``[minimum, max pending]``.

``decrease = 1`` turns the rule off (Storm's fixed max pending). The same module ships in the jar, so a cluster
run adapts the same way.

**Growing past its start, up to a latency** (``target_secs``, what the word count's spouts pass: its
:func:`latency_target`). A fixed in-flight cap binds by Little's law: N lines in flight complete at most N / L lines
a second when a line takes L to complete, and L is at least a flush here (a line is acked only once its counters
flushed: about T/2, up to T). 1,000 lines of one word at L = 0.55 s cap a run at 1,800 words/s whatever the
workers could do (8,000 at W = 8, D = 1 ms). So the window starts at what Little's law needs for W / D at the
target (:func:`window_start`; max pending without a delay, or when lower) and grows by slow
start while the lines acked complete within the target; the first line acked later
than the target ends slow start (TCP's HyStart: a delay that grows says the queue, not the window, now bounds) and
the window grows only additively from there. A line emitted before the spout's first ack does not end it: its
latency includes the topology's start (on a Storm cluster the worker JVM starts the Python components, and the first
lines waited over a second for them: measured on Storm 2.8.8, docs/benchmarks/storm-cluster.md), which says nothing
about a queue; ending slow start on it had left the window at its start, 1,000 lines, and a run at no delay bound by
Little's law at a fifth of what the workers did with a larger window. From there it grows while lines complete
within the target (from its start, when the start was sized for a CPU delay: ``slow_start`` False). Lines queue
only where the workers are busy, so the window settles at what keeps them busy with a line's latency near the
target: what Little's law needs for the rate the workers reach, not a guess of it, whatever a line's length. Max pending
(``topology.max.spout.pending``, :data:`DEFAULT_MAX_PENDING` by default) is then only the ceiling that bounds
memory. With ``decrease = 1`` (Storm's fixed max pending) the window stays at max pending, as before.

Open loop (``keysplit.rate``) the same window applies: an overloaded open-loop run (a rate the topology cannot
serve) melts down on Storm exactly as a closed loop does. Its spout then stops catching up its schedule in bursts
(storm/spout_pacing.py): a window cut below the schedule would otherwise release the held-back lines all at once
at the instants a tick's acks open it, the same phase of the flush period every time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class WindowPolicy:
    """The AIMD rule's parameters (``keysplit.aimd_increase``, ``keysplit.aimd_decrease``, ``keysplit.aimd_min``)."""

    increase: float = 1.0  # lines added per window of acks
    decrease: float = 0.5  # the factor a timeout multiplies the window by (1: never cut)
    minimum: int = 1  # the window never goes below this many lines


#: Lines a spout's window starts at when it grows up to a latency (``target_secs``; max pending when lower).
WINDOW_START = 1000
#: ``topology.max.spout.pending`` by default: the ceiling of a window that grows up to a latency (lines a spout; its
#: marks in Redis and its entries in the feed's pending list, about 200 bytes a line).
DEFAULT_MAX_PENDING = 50_000


def latency_target(flush_secs: float, batch: int, batch_ms: float) -> float:
    """The latency up to which the word count's spouts grow their window: what a line waits when nothing queues,
    and half a flush period more. With batches a line waits up to T for its counters' flush and a batch's wait in
    its router; with one tuple a word (``batch`` 1) up to T more for the aggregators' tick (storm/bolts.py). A line
    that took longer waited in a queue: the workers have work, and more lines in flight would only wait longer."""
    return (1.5 * flush_secs + batch_ms / 1000.0) if batch > 1 else 2.5 * flush_secs


def window_start(workers: int, cpu_delay_ms: float, target_secs: float, words_per_line: float,
                 spouts: int = 1) -> int | None:
    """The lines one spout's window starts at: by Little's law, the lines in flight that keep the workers' rate
    W / D words/s going at the latency target (W x 1000 / D x target / words a line, shared by the spouts), and
    never fewer than :data:`WINDOW_START` (the fixed default before, which long lines at a long delay may exceed:
    a message timeout then cuts the window, as it did); :data:`WINDOW_START` when the line length is not known.
    Lines queue, and the window then grows or stops, from where the workers are about to bind, so a run does not
    spend its first seconds in slow start (a round trip here is a flush: T/2 or more).

    None (max pending) when there is no delay: the rate W / D is unbounded, so is the window it needs, and max
    pending is what bounds it. Slow start from :data:`WINDOW_START` took 5 of the 16 seconds of a 3-million-word
    run at no delay on Storm 2.8.8, doubling once a flush period, and the window reached max pending anyway
    (175,000 words/s; 254,000 from max pending, with a line's p99 1.9 s either way: docs/benchmarks/storm-cluster.md).
    """
    if cpu_delay_ms <= 0:
        return None
    if words_per_line <= 0:
        return WINDOW_START
    return max(WINDOW_START, math.ceil(workers * 1000.0 / cpu_delay_ms * target_secs / words_per_line / spouts))


#: Buckets of the count of recent acks (the last message timeout, to within a sixteenth of it).
ACK_BUCKETS = 16


class RecentCount:
    """Events (acks) of the last ``span`` seconds, counted in :data:`ACK_BUCKETS` buckets (constant
    memory)."""

    def __init__(self, span: float) -> None:
        self.width = span / ACK_BUCKETS
        self.counts = [0] * ACK_BUCKETS
        self.periods = [-ACK_BUCKETS] * ACK_BUCKETS  # which period (time // width) each bucket counts

    def add(self, now: float) -> None:
        period = int(now // self.width)
        slot = period % ACK_BUCKETS
        if self.periods[slot] != period:
            self.periods[slot], self.counts[slot] = period, 0
        self.counts[slot] += 1

    def total(self, now: float) -> int:
        period = int(now // self.width)
        return sum(n for n, p in zip(self.counts, self.periods) if period - p < ACK_BUCKETS)


class AdaptiveWindow:
    """One spout task's window. ``limit`` is ``topology.max.spout.pending`` (None: unlimited, as in Storm);
    ``timeout_secs`` is the message timeout (the span of the recent acks that bound a cut)."""

    def __init__(self, policy: WindowPolicy, limit: int | None, timeout_secs: float = 30.0, *,
                 target_secs: float | None = None, start: int | None = WINDOW_START, slow_start: bool = True) -> None:
        self.policy = policy
        self.recent = RecentCount(timeout_secs)  # acks
        self.limit = float(limit) if limit else math.inf
        # grow only while lines complete within it; without one, or with Storm's fixed max pending (decrease 1),
        # start at max pending: without timeouts, nothing changes
        self.target = target_secs if policy.decrease < 1.0 else None
        self.size = self.limit if self.target is None or start is None else min(self.limit, float(max(1, start)))
        # slow start below it, additive increase at or above; a start sized for the workers' rate (``slow_start``
        # False) grows additively only: doubling it in the first round trip would only queue lines
        self.threshold = self.limit if slow_start or self.target is None else self.size
        self.acks_since_cut = 0
        self.lowest = self.size
        self.cuts = 0
        self.last_cut = -math.inf  # when the window was last cut (the clock the caller's emit times use)
        self.first_ack = math.inf  # when the first line completed (lines emitted before it are the start-up's)
        self.full_at = -math.inf  # when the window last held a line back (allows)

    def allows(self, in_flight: int, now: float = -math.inf) -> bool:
        """Whether one more line may be emitted at ``now`` with ``in_flight`` lines out (a refusal is remembered:
        the window limited the spout then)."""
        if math.isinf(self.size) or in_flight < max(self.policy.minimum, math.floor(self.size)):
            return True
        self.full_at = max(self.full_at, now)
        return False

    def on_ack(self, in_flight: int, now: float, latency: float = 0.0) -> None:
        """A line completed at ``now`` after ``latency`` seconds, leaving ``in_flight`` lines out: grow by a line
        below the threshold, by ``increase`` lines per window of acks above, if the window limits the spout (at
        least half of it is in use, or it held a line back while this one was out) and, with a target, the line
        completed within it (a later one ends slow start, unless it was emitted before the first line completed:
        see the module's docstring)."""
        self.acks_since_cut += 1
        self.recent.add(now)
        self.first_ack = min(self.first_ack, now)
        if self.target is not None and latency > self.target:
            if now - latency >= self.first_ack:  # a start-up line's latency is the components' start, not a queue
                self.threshold = min(self.threshold, self.size)
            return
        if self.size < self.limit and (in_flight + 1 >= self.size / 2 or self.full_at >= now - latency):
            step = 1.0 if self.size < self.threshold else self.policy.increase / self.size
            self.size = min(self.limit, self.size + step)

    def on_timeout(self, sent_at: float, in_flight: int, now: float) -> bool:
        """A line emitted at ``sent_at`` timed out with ``in_flight`` lines out: cut the window once per round;
        True if it was cut."""
        if sent_at < self.last_cut or self.policy.decrease >= 1.0:
            return False  # sent under the window before the last cut: that cut already answered it
        size = max(float(self.policy.minimum), float(self.recent.total(now)),
                   min(self.size, float(in_flight)) * self.policy.decrease)
        if size >= self.size:
            return False  # the lines acked within the last timeout hold it: a smaller window would not help
        self.size = size
        self.lowest = min(self.lowest, self.size)
        if self.acks_since_cut:  # the topology completed lines at the window just cut: no higher than this
            self.threshold = self.size
        self.acks_since_cut = 0
        self.last_cut = now
        self.cuts += 1
        return True

    def restore(self, window: int, lowest: int, cuts: int) -> None:
        """Go on from what an earlier process of this spout task reached (its :meth:`metrics`): a restarted spout
        that started again at max pending would time out its first wave again."""
        if window > 0:
            self.size = self.threshold = min(self.limit, float(window))
        if lowest > 0:
            self.lowest = min(self.lowest, float(lowest))
        self.cuts = cuts

    @property
    def lines(self) -> int | None:
        """The window in whole lines (None: unlimited and never cut)."""
        return None if math.isinf(self.size) else max(self.policy.minimum, math.floor(self.size))

    def metrics(self) -> dict[str, int]:
        """What the spout writes to its metrics hash (-1 for unlimited)."""
        lowest = -1 if math.isinf(self.lowest) else max(self.policy.minimum, math.floor(self.lowest))
        return {"window": -1 if self.lines is None else self.lines, "window_min": lowest, "window_cuts": self.cuts}
