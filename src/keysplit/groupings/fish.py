"""FISH: epoch-based recent hot keys, hot-key classification and heuristic worker assignment.

The paper ("Efficient Time-Evolving Stream Processing at Scale") lost its symbols in our copy; the formulas
below are our reading (docs/groupings/fish.md), each with the algorithm line it implements.

*Which workers are candidates* (the assignment creator):

- Every tuple is counted in the source's :class:`~keysplit.sketches.epoch.EpochCounter` (Alg. 1: top-
  ``capacity`` counting within an epoch of ``epoch`` tuples, counters times ``alpha`` at each epoch end).
- CHK (Alg. 2): a key is hot when its frequency f_k >= ``theta`` (default 1/(5W), §6.3). A hot key gets
  ``d_k = clamp(ceil(W * f_k / f_max), d_min, W)`` workers (Alg. 2 lines 1-4, f_max the top key's
  frequency); while it stays hot it keeps the largest d_k it was given (lines 5-8), and once it is not hot
  it is an ordinary key again. Ordinary keys get 2 candidates, PKG's two choices.
- Candidates are the first d distinct workers clockwise from the key on a consistent-hash ring with
  ``vnodes`` virtual nodes per worker (§5), so adding or removing a worker moves ~1/W of the keys.
  Ordinary keys take their 2 candidates from the same ring, not from PKG's two hash functions: their
  candidate pair is then the prefix of the list a key gets when it turns hot (no new state is created
  when a key turns hot or cools down), and a worker change moves their state as little as a hot key's.
  ``placement=mod`` puts the workers on a ring of W buckets by ``hash mod W`` instead (candidates
  ``h, h+1, ...`` mod W; the first is key grouping's worker): the paper's "FISH without CH" (Fig. 17).
- ``hot=all`` gives every hot key all W workers, W-Choices' rule on FISH's own hot-key identification: the
  paper's "FISH w/ W-C" (Fig. 15), which CHK is measured against.

*Which candidate gets the tuple* (the target selector, §4.2, Alg. 3 lines 12-18):

- The source keeps, per worker, ``pending = backlog + assigned_since`` (tuples it sent and believes are
  still queued). Every ``interval`` seconds of event time (default 10 s, §4.2.1) it drains the estimate:
  ``backlog = max(0, backlog + assigned_since - capacity * interval)``, ``assigned_since = 0``.
- It sends the tuple to the candidate with the smallest estimated wait ``(backlog + assigned_since) /
  capacity`` (§4.2.2); ties go to the first candidate, so decisions are deterministic.
- Capacities (tuples/s per worker) come from ``set_capacities`` (the simulator's ``--capacities``, in
  Storm the counters' measured rates). A worker's capacity is shared by all S sources, and a source sees
  only its own tuples, so each source drains its estimate at ``capacity / S`` (the rate at which that
  worker serves this source when the sources are dealt the stream evenly).
- Without capacity feedback the source cannot know how fast a worker drains, so it assumes identical
  workers and drains nothing: the estimated wait is then the source's cumulative count per worker, and the
  choice is exactly PKG's least loaded (local load estimation). ``assign=load`` forces that rule even when
  capacities are known: it is the "traditional worker assignment" FISH's Fig. 16 compares against.

>>> from keysplit.groupings import build_grouping
>>> [g] = build_grouping("fish", workers=8)
>>> [g.choose("storm", 0.0) for _ in range(4)]  # the top key: d_k = W, its least loaded successors in turn
[0, 5, 1, 6]
>>> g.hot_workers["storm"], g.candidates("storm")
(8, [0, 5, 1, 6, 4, 3, 2, 7])
>>> [g] = build_grouping("fish:theta=0.5", workers=8)
>>> [g.choose(k, 0.0) for k in ["storm", "storm", "storm", "spark"]]  # "spark" (f = 1/4) is not hot
[0, 5, 1, 3]
>>> g.hot_workers, g.candidates("spark")  # an ordinary key: its 2 ring successors
({'storm': 8}, [3, 2])
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence

import mmh3

from keysplit.errors import SpecError
from keysplit.groupings.base import BaseGrouping
from keysplit.hashing import BASE_SEED, HashRing
from keysplit.sketches.epoch import EpochCounter
from keysplit.specs import Param, choice, optional_float


class Fish(BaseGrouping):
    """FISH: recent hot keys (epoch counter + CHK) on ring successors, shortest estimated wait wins."""

    name = "fish"
    summary = "FISH: epoch-decayed hot keys get d_k ring successors; shortest estimated wait wins"
    PARAMS = {
        "epoch": Param(int, 1000, "tuples per epoch (§4.1.1)", lambda v: v >= 1, "at least 1"),
        "capacity": Param(int, 1000, "keys in the intra-epoch top-k table (worker speeds: --capacities)",
                          lambda v: v >= 1, "at least 1"),
        "alpha": Param(float, 0.5, "decay of every counter at each epoch end (1 = never forget, 0 = forget all)",
                       lambda v: 0 <= v <= 1, "between 0 and 1"),
        "theta": Param(optional_float, None, "hot-key frequency threshold (none = 1/(5W))",
                       lambda v: v is None or 0 < v <= 1, "in (0, 1]"),
        "d_min": Param(int, 2, "fewest workers a hot key gets", lambda v: v >= 1, "at least 1"),
        "vnodes": Param(int, 64, "virtual nodes per worker on the hash ring", lambda v: v >= 1, "at least 1"),
        "interval": Param(float, 10.0, "seconds of event time between backlog estimates (§4.2.1)",
                          lambda v: v > 0, "a positive number of seconds"),
        "assign": Param(choice("wait", "load"), "wait",
                        "shortest estimated wait (backlog+assigned)/capacity, or least local load"),
        "placement": Param(choice("ring", "mod"), "ring",
                           "candidates from the consistent-hash ring, or from hash mod W (no CH)"),
        "hot": Param(choice("chk", "all"), "chk",
                     "workers of a hot key: CHK's d_k, or all W (W-Choices' rule, the paper's FISH w/ W-C)"),
    }

    def __init__(
        self,
        epoch: int = 1000,
        capacity: int = 1000,
        alpha: float = 0.5,
        theta: float | None = None,
        d_min: int = 2,
        vnodes: int = 64,
        interval: float = 10.0,
        assign: str = "wait",
        placement: str = "ring",
        hot: str = "chk",
    ) -> None:
        super().__init__(epoch=epoch, capacity=capacity, alpha=alpha, theta=theta, d_min=d_min,
                         vnodes=vnodes, interval=interval, assign=assign, placement=placement, hot=hot)
        self.interval = interval
        self._hot_to_all = hot == "all"
        self.epoch_counts = EpochCounter(epoch, capacity, alpha)
        #: d_k given to each key that is hot now (CHK's set M); ordinary keys are absent.
        self.hot_workers: dict[str, int] = {}
        self._hot_candidates: dict[str, list[int]] = {}
        self._tuples = 0
        self.capacities: list[float] | None = None
        self.ring: HashRing | None = None

    # -- set-up and hooks -------------------------------------------------------------------------------

    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None:
        super().prepare(workers, source, sources)
        self.ring = HashRing(range(workers), vnodes=self.params["vnodes"]) if self.params["placement"] == "ring" \
            else None
        self._set_workers(workers)

    def _set_workers(self, workers: int) -> None:
        """Everything that depends on W: theta, the ring lookup tables, per-worker estimates, caches."""
        self.workers = workers
        theta = self.params["theta"]
        self.theta = theta if theta is not None else 1.0 / (5 * workers)  # §6.3's 1/(5W)
        self.d_min = min(self.params["d_min"], workers)
        self._hot_candidates.clear()
        for key, d in self.hot_workers.items():
            self.hot_workers[key] = min(d, workers)
        if self.ring is not None:
            points, owners = self.ring.arcs()
            self._points, self._owners = points, owners
            self._second = _second_owners(owners)
            self._ring_seed = self.ring.seed
        loads = self.local_loads
        loads.extend([0] * (workers - len(loads)))
        del loads[workers:]
        if self.capacities is not None:  # a joining worker gets the mean known capacity until feedback comes
            mean = sum(self.capacities) / len(self.capacities)
            self.capacities = (self.capacities + [mean] * workers)[:workers]
        self._reset_estimates()

    def _reset_estimates(self) -> None:
        """Per-worker estimates of §4.2.1 for the current W and capacities."""
        w = self.workers
        caps = self.capacities
        self._drain = self.params["assign"] == "wait" and caps is not None
        if not self._drain:
            # Least loaded (assign=load, or wait without capacity feedback): the estimate is the local load.
            self._score = self.local_loads
            self._pending = None
            self._next_tick = math.inf
            return
        old = getattr(self, "_pending", None) or []
        self._pending = (old + [0.0] * w)[:w]
        share = [c / self.sources for c in caps]  # this source's share of each worker's service rate
        self._drain_per_interval = [c * self.interval for c in share]
        self._inv_share = [1.0 / c for c in share]
        self._score = [p * i for p, i in zip(self._pending, self._inv_share)]
        if getattr(self, "_next_tick", math.inf) == math.inf:
            self._next_tick = self.interval

    def set_capacities(self, capacities: Sequence[float]) -> None:
        """Per-worker service rates in tuples per second (the feedback hook of §4.2.1)."""
        caps = [float(c) for c in capacities]
        if len(caps) != self.workers or any(not c > 0 for c in caps):
            raise SpecError(f"fish: capacities need {self.workers} positive values, got {list(capacities)}")
        self.capacities = caps
        self._reset_estimates()

    def resize(self, workers: int) -> None:
        """The worker count changed to ``workers`` (workers ``W'..W-1`` leave, or ``W..W'-1`` join).

        On the ring only the keys whose arcs change owner move (§5). A joining worker starts with an empty
        queue; its capacity is the mean of the known ones until the feedback hook says otherwise.
        """
        if workers < 1:
            raise SpecError(f"fish: the number of workers must be at least 1, got {workers}")
        old = self.workers
        if self.ring is not None:
            for w in range(old, workers):
                self.ring.add(w)
            for w in range(workers, old):
                self.ring.remove(w)
        self._set_workers(workers)

    # -- the assignment creator ---------------------------------------------------------------------------

    def _successors(self, key: str, d: int) -> list[int]:
        """The first ``d`` distinct workers clockwise from ``key`` (ring or mod-W circle)."""
        if self.ring is not None:
            return self.ring.successors(key, d)
        h = mmh3.hash(key, BASE_SEED, False)
        return [(h + i) % self.workers for i in range(d)]

    def candidates(self, key: str) -> list[int]:
        """The key's current candidates: d_k successors if it is hot, else 2 (no counting, no routing)."""
        return self._successors(key, self.hot_workers.get(key, min(2, self.workers)))

    def _prune(self) -> None:
        """At an epoch end, forget the d_k of keys that are no longer hot (keeps M bounded by the hot set)."""
        counts = self.epoch_counts
        limit = self.theta * counts.total
        for key in [k for k in self.hot_workers if counts.counts.get(k, 0.0) < limit]:
            del self.hot_workers[key]
            self._hot_candidates.pop(key, None)

    # -- the target selector ---------------------------------------------------------------------------------

    def estimated_queue(self) -> list[float]:
        """Per worker, the tuples this source believes are still queued (backlog + assigned_since, §4.2.1);
        without capacity feedback, the tuples it ever sent there (nothing is believed drained)."""
        return list(self._pending) if self._drain else [float(x) for x in self.local_loads]

    def estimated_wait(self) -> list[float]:
        """Per worker, the score ``choose`` minimises: (backlog + assigned_since) / capacity (§4.2.2), or the
        local load under ``assign=load`` or without capacities."""
        return [float(x) for x in self._score]

    def _tick(self, now: float) -> None:
        """§4.2.1 every ``interval`` seconds: backlog = max(0, backlog + assigned_since - capacity*interval)."""
        elapsed = int((now - self._next_tick) // self.interval) + 1  # intervals that ended by ``now``
        self._next_tick += elapsed * self.interval
        pending, drain, inv, score = self._pending, self._drain_per_interval, self._inv_share, self._score
        for w in range(self.workers):
            p = pending[w] - elapsed * drain[w]  # after the first interval assigned_since is 0: plain drain
            p = p if p > 0.0 else 0.0
            pending[w] = p
            score[w] = p * inv[w]

    def choose(self, key: str, now: float) -> int:
        if now >= self._next_tick:
            self._tick(now)
        counts = self.epoch_counts
        c = counts.update(key)
        self._tuples += 1
        if self._tuples % counts.epoch == 0:
            self._prune()
        score = self._score
        if c >= self.theta * counts.total:  # CHK: f_k >= theta (Alg. 2)
            workers = self.workers
            if self._hot_to_all:
                d = workers
            else:
                d = math.ceil(workers * c / counts.max_count)  # d_k = ceil(W f_k / f_max)
                d = self.d_min if d < self.d_min else (workers if d > workers else d)
            cands = self._hot_candidates.get(key)
            if cands is None or d > len(cands):  # a hot key keeps the largest d_k it was given
                d = max(d, self.hot_workers.get(key, 0))
                self.hot_workers[key] = d
                cands = self._hot_candidates[key] = self._successors(key, d)
            w = min(cands, key=score.__getitem__)
        else:
            if key in self.hot_workers:  # it cooled down: ordinary key again
                del self.hot_workers[key]
                self._hot_candidates.pop(key, None)
            if self.ring is not None:
                i = bisect_left(self._points, mmh3.hash(key, self._ring_seed, False))
                if i == len(self._points):
                    i = 0
                a, b = self._owners[i], self._second[i]
            else:
                a = mmh3.hash(key, BASE_SEED, False) % self.workers
                b = (a + 1) % self.workers
            w = b if score[b] < score[a] else a
        self.local_loads[w] += 1
        if self._drain:
            self._pending[w] += 1.0
            score[w] += self._inv_share[w]
        return w


def _second_owners(owners: list[int]) -> list[int]:
    """For each ring point, the owner of the next point clockwise with a different owner (itself if the
    ring has one worker): the second ring successor of every key that starts at that point."""
    n = len(owners)
    second = list(owners)
    if len(set(owners)) < 2:
        return second
    nxt = None
    # Walk backwards twice round the ring so the last points see the wrap-around.
    for i in range(2 * n - 1, -1, -1):
        j = i % n
        if nxt is not None and owners[j] != nxt[0]:
            second[j] = nxt[0]
        elif nxt is not None:
            second[j] = nxt[1]
        nxt = (owners[j], second[j])
    return second
