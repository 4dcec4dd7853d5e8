"""The splitter side of Gedik §4.5/§5.2: frequency maintenance, lookup and construction in one object.

Every routed key goes through the sliding lossy counter (the measure step) and the current partitioning
function (O(1) lookup). Every ``period`` seconds of event time, and whenever the number of channels changes,
the function is rebuilt from the counter's frequent items (plan + activate), and the migration that rebuild
causes is recorded.

Migration is audited over the keys of the sliding window, the same horizon the lossy counter's frequencies
cover (the last W to (1 + 1/(x-1)) W messages), with exact counts kept for measurement only (the
partitioning function itself uses nothing but the lossy counter): eq. 9's M with f(d) = the key's share of
the window, and eq. 12's m = M / (sum beta_s(f) / N^(t+1)). Keys that left the window hold no state worth
moving in the paper's model, and forgetting them bounds the audit's memory by the window's distinct keys, not
the stream's. Without a change in N only the items tracked before or after (D_a) can move, so only those are
checked; after a resize every key of the window is.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from keysplit.partitioning.construct import Config, construct
from keysplit.partitioning.function import PartitioningFunction
from keysplit.partitioning.threshold import frequency_threshold
from keysplit.sketches.lossy import SlidingLossyCounter

#: epsilon = EPSILON_RATIO * delta by default: Manku & Motwani's epsilon = s/10 (Gedik §4.1.2).
EPSILON_RATIO = 0.1


@dataclass
class RebuildRecord:
    """One reconstruction of the partitioning function and the migration it caused."""

    now: float
    reason: str  # "period" or "resize"
    workers_before: int
    workers_after: int
    delta: float
    explicit: int  # |H_p| after the rebuild
    lossy: int  # entries held by the lossy counters
    migrated_keys: int
    migration_cost: float  # eq. 9 over the keys seen so far
    relative_migration: float  # eq. 12
    seconds: float  # construction time


class AdaptivePartitioner:
    """Shared by all the sources of one grouping so that a key has one channel at a time everywhere."""

    def __init__(self, config: Config, workers: int, period: float, window: int, counters: int = 3,
                 epsilon: float | None = None) -> None:
        self.config = config
        self.period = period
        self.window = window
        self.counters = counters
        self.fixed_epsilon = epsilon
        self.function = PartitioningFunction(workers, vnodes=config.vnodes)
        self.counter = SlidingLossyCounter(self._epsilon(workers), window, counters)
        # the audit's exact counts: ``counters`` buckets of the lossy counters' stagger W/(x-1) messages each
        self._bucket_size = math.ceil(window / (counters - 1))
        self._buckets: deque[dict[str, int]] = deque([{}], maxlen=counters)
        self._bucket_fill = 0
        self.now = 0.0
        #: the period reached: floor(now / period) of the latest ``now`` seen (never decreases)
        self.epoch = 0
        #: the first period the current function applies to (0: the initial function)
        self.since = 0
        #: a message was counted since the last period rebuild (at the start: rebuild at the first boundary)
        self.dirty = True
        self.history: list[RebuildRecord] = []

    @property
    def workers(self) -> int:
        return self.function.workers

    def _epsilon(self, workers: int) -> float:
        if self.fixed_epsilon is not None:
            return self.fixed_epsilon
        delta = frequency_threshold(self.config.resources, max(2, workers), self.config.sigma, self.config.domain)
        return min(0.5, EPSILON_RATIO * delta)

    def epoch_of(self, now: float) -> int:
        """The period ``now`` falls in (the one formula every process uses, so all agree at a boundary)."""
        return math.floor(now / self.period)

    def advance(self, now: float) -> None:
        """Pass the period boundaries up to ``now``: the first one passed rebuilds the function from what was
        counted before it (the counter holds nothing later), unless nothing was counted since the last period
        rebuild; the rebuilt function applies from that boundary on (``since``). One rebuild however many
        boundaries are passed at once, as a splitter idle for several periods rebuilds once."""
        epoch = self.epoch_of(now)
        if epoch <= self.epoch:
            return
        if self.dirty:
            self.rebuild(self.workers, (self.epoch + 1) * self.period, "period")
            self.since = self.epoch + 1
            self.dirty = False
        self.epoch = epoch

    def route(self, key: str, now: float) -> int:
        """Count ``key`` and return its channel; rebuild first if a period boundary has passed."""
        self.advance(now)
        self.now = now
        self.dirty = True
        self.counter.update(key)
        if self._bucket_fill == self._bucket_size:
            self._buckets.append({})  # the oldest bucket falls out of the window
            self._bucket_fill = 0
        bucket = self._buckets[-1]
        bucket[key] = bucket.get(key, 0) + 1
        self._bucket_fill += 1
        return self.function.lookup(key)

    def window_counts(self) -> dict[str, int]:
        """Exact counts of the keys in the sliding window (the audit's view of the state)."""
        if len(self._buckets) == 1:
            return self._buckets[0]
        counts: dict[str, int] = {}
        for bucket in self._buckets:
            for k, c in bucket.items():
                counts[k] = counts.get(k, 0) + c
        return counts

    def resize(self, workers: int) -> None:
        """Rebuild for a new number of channels (a no-op when it is unchanged)."""
        if workers != self.workers:
            self.rebuild(workers, self.now, "resize")

    def frequencies(self, workers: int) -> dict[str, float]:
        """The counter's frequent items for delta(N), plus the current explicit items (for D_o)."""
        active = self.counter.active
        if active.n == 0:
            return {}
        delta = frequency_threshold(self.config.resources, workers, self.config.sigma, self.config.domain)
        support = delta if math.isfinite(delta) else 1.0
        freqs = active.frequencies(support)
        for d in self.function.explicit_hash:
            freqs.setdefault(d, active.count(d) / active.n)
        return freqs

    def rebuild(self, workers: int, now: float, reason: str) -> RebuildRecord:
        old = self.function
        delta = frequency_threshold(self.config.resources, workers, self.config.sigma, self.config.domain)
        # the counter reports items down to (delta - epsilon); a fixed epsilon near delta would report all it holds
        slack = min(self.counter.epsilon, delta / 2)
        step = construct(old, self.frequencies(workers), workers, self.config, slack=slack)
        new = step.function
        seen = self.window_counts()
        candidates = set(old.explicit_hash) | set(new.explicit_hash) if workers == old.workers else seen
        moved = [k for k in candidates if k in seen and old.lookup(k) != new.lookup(k)]
        cost, ideal = self._migration(seen, moved, workers)
        record = RebuildRecord(now, reason, old.workers, workers, step.delta, len(new), len(self.counter),
                               len(moved), cost, cost / ideal if ideal > 0 else 0.0, step.seconds)
        self.history.append(record)
        self.function = new
        if self.fixed_epsilon is None and step.delta <= self.counter.epsilon:
            # N grew so much that delta fell below epsilon: keys between them would go unreported. Start
            # counting again at the finer epsilon (the history of the old counters is lost).
            self.counter = SlidingLossyCounter(self._epsilon(workers), self.window, self.counters)
        return record

    def _migration(self, seen: dict[str, int], moved: list[str], workers: int) -> tuple[float, float]:
        """(M, ideal) of eqs. 9-10 over the keys of the window, ``seen`` (key -> count)."""
        total = sum(seen.values())
        if not total:
            return 0.0, 0.0
        state = self.config.resources.state
        cost = sum(float(state(seen[k] / total)) for k in moved)
        kind = self.config.resources.kinds[0]
        if kind == "l":
            mass = 1.0
        elif kind == "c":
            mass = float(len(seen))
        else:
            mass = sum(float(state(c / total)) for c in seen.values())
        return cost, mass / workers
