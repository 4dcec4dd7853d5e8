"""Gedik's partitioning functions (VLDB J. 2014) as a grouping: key grouping's one worker per key, with the
frequent keys placed explicitly so that the load stays balanced and few keys migrate when it is rebuilt.

The function p = <H_p, H_c> (explicit hash + consistent hash, Alg. 1) is rebuilt every ``period`` seconds of
event time from the sliding lossy counter's frequencies (Fig. 2), and again whenever the worker count changes
(``resize``), with the construction algorithm ``algo`` (scan, Alg. 2; redist, Alg. 3; readj, Alg. 4) and
utility ``utility`` (§4.3). Each rebuild's migration is recorded (``history``, ``migrated_keys``,
``migration_cost``). All sources of one grouping share one partitioner (one counter, one function), as the
paper's single splitter does: separate functions per source would send a key to several workers.

Only source 0 (the **leader**) counts: separate router processes cannot count one interleaved stream, so the
simulator counts as they can. The leader's frequencies come from its own sub-stream; under shuffle grouping of
lines to the routers that sub-stream is an unbiased 1/S sample of the whole stream, so the lossy counter's
relative frequencies, the threshold delta (eq. 14-17) and the construction see the same distribution the single
splitter would (the ``window`` then spans S times as many messages of the whole stream). The function rebuilt at
the first period boundary the leader passes is made from the messages counted before it and applies from that
boundary on (``since``); another source's message of period k uses the latest function with ``since`` <= k.
In process (the simulator, the replay) the other sources pass the boundaries of the shared partitioner themselves
(:meth:`AdaptivePartitioner.advance`): on a stream whose time never decreases the leader has counted all its
messages before the boundary by then, so the function is the one the leader makes when it passes it.

When the sources are separate processes (the Storm routers) they cannot share an object, so they take roles
(``set_role``): the leader counts, rebuilds as above and publishes each rebuild's ``export_state()`` (the
explicit hash, the worker count and the ring's virtual nodes, which rebuild ``lookup`` exactly, its
``state_version`` and ``since``) with its progress (``epoch``); **followers** never count or rebuild: for a
message of period k the host waits until the leader's progress reaches k and installs the latest state with
``since`` <= k (``keysplit.storm.router.Router.sync_at``), so every process makes the simulator's decisions.
The logic lives in :mod:`keysplit.partitioning`; this class is the Grouping-protocol face of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keysplit.errors import SpecError
from keysplit.groupings.base import BaseGrouping
from keysplit.partitioning.adaptive import AdaptivePartitioner, RebuildRecord
from keysplit.partitioning.construct import ALGORITHMS, Config
from keysplit.partitioning.function import DEFAULT_VNODES, PartitioningFunction
from keysplit.partitioning.resources import Resources
from keysplit.partitioning.threshold import frequency_threshold
from keysplit.partitioning.utility import UTILITIES
from keysplit.specs import Param, choice, optional_float


def _resources(text: str) -> str:
    Resources.parse(text)  # raises SpecError naming the valid letters
    return text.upper()


_resources.__name__ = "resource triple (e.g. LCL)"

#: ``set_role`` values for sources in separate processes (see the module docstring).
ROLES = ("leader", "follower")


class GedikPartitioning(BaseGrouping):
    """Explicit hash for frequent keys + consistent hash for the rest, rebuilt every ``period`` seconds.

    >>> from keysplit.groupings import build_grouping
    >>> [g] = build_grouping("gedik:algo=readj,period=1,window=1000", workers=4)
    >>> g.choose("hot", 0.0) == g.choose("hot", 0.5)
    True
    >>> for i in range(2000):
    ...     _ = g.choose("hot" if i % 2 else f"k{i}", 0.5 + i / 1000)
    >>> g.rebuilds, "hot" in g.function.explicit_hash, g.choose("hot", 2.5) == g.function.explicit_hash["hot"]
    (2, True, True)
    """

    name = "gedik"
    summary = "Gedik's partitioning function: explicit hash for frequent keys + consistent hash, rebuilt each period"
    PARAMS = {
        "algo": Param(choice(*ALGORITHMS), "readj", "construction algorithm: scan (Alg. 2), redist (Alg. 3), "
                      "readj (Alg. 4)"),
        "utility": Param(choice(*UTILITIES), "apm", "utility function U: A, APM, APLM, ATM, ATLM (§4.3)"),
        "period": Param(float, 10.0, "seconds of event time between rebuilds", lambda v: v > 0, "positive"),
        "alpha": Param(float, 1.2, "imbalance tolerance alpha_k for every resource (max/min load)",
                       lambda v: v > 1, "alpha must be greater than 1"),
        "sigma": Param(float, 0.1, "share of the tolerated imbalance left to untracked keys (eq. 16)",
                       lambda v: 0 < v <= 1, "sigma must be in (0, 1]"),
        "resources": Param(_resources, "LCL", "beta_s, beta_c, beta_n as letters C/L/Q (constant/linear/quadratic)"),
        "window": Param(int, 100_000, "tumbling window W of the sliding lossy counter, in messages",
                        lambda v: v >= 2, "at least 2"),
        "counters": Param(int, 3, "lossy counters emulating the sliding window (Fig. 2)", lambda v: v >= 2,
                          "at least 2"),
        "epsilon": Param(optional_float, None, "lossy counting error (none: 0.1 * delta)",
                         lambda v: v is None or 0 < v < 1, "strictly between 0 and 1"),
        "max_moves": Param(int, 5, "readj: most moves per item (the paper's c)", lambda v: v >= 1, "at least 1"),
        "vnodes": Param(int, DEFAULT_VNODES, "virtual nodes per worker on the consistent hash", lambda v: v >= 1,
                        "at least 1"),
        "domain": Param(int, 10**6, "domain size |D| (used by quadratic resource functions only)",
                        lambda v: v >= 1, "at least 1"),
    }

    def __init__(self, algo: str = "readj", utility: str = "apm", period: float = 10.0, alpha: float = 1.2,
                 sigma: float = 0.1, resources: str = "LCL", window: int = 100_000, counters: int = 3,
                 epsilon: float | None = None, max_moves: int = 5, vnodes: int = DEFAULT_VNODES,
                 domain: int = 10**6) -> None:
        super().__init__(algo=algo, utility=utility, period=period, alpha=alpha, sigma=sigma, resources=resources,
                         window=window, counters=counters, epsilon=epsilon, max_moves=max_moves, vnodes=vnodes,
                         domain=domain)
        if not alpha > 1:  # also when built directly, not from a spec
            raise SpecError(f"gedik: alpha must be greater than 1, got {alpha}")
        if not 0 < sigma <= 1:
            raise SpecError(f"gedik: sigma must be in (0, 1], got {sigma}")
        try:
            self.config = Config(algo=algo, utility=utility, resources=Resources.parse(resources, alpha),
                                 sigma=sigma, domain=domain, max_moves=max_moves, vnodes=vnodes)
        except SpecError as exc:
            raise SpecError(f"gedik: {exc}") from None
        self.partitioner: AdaptivePartitioner | None = None
        self.role: str | None = None
        self._follower = False
        self._version_base = 0  # state_version = this + rebuilds (a restarted leader continues the numbering)

    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None:
        super().prepare(workers, source, sources)
        p = self.params
        self.partitioner = AdaptivePartitioner(self.config, workers, p["period"], p["window"], p["counters"],
                                               p["epsilon"])

    def validate(self) -> None:
        eps = self.params["epsilon"]
        if eps is not None and self.workers > 1:
            delta = frequency_threshold(self.config.resources, self.workers, self.config.sigma, self.config.domain)
            if eps >= delta:
                raise SpecError(f"gedik: epsilon={eps} must be below the frequency threshold delta={delta:.3g} "
                                f"for {self.workers} workers (eq. 17), e.g. epsilon={delta / 10:.2g}")

    @classmethod
    def build(cls, params: Mapping[str, Any], workers: int, sources: int) -> list[BaseGrouping]:
        instances = super().build(params, workers, sources)
        shared = instances[0].partitioner  # type: ignore[attr-defined]
        for g in instances:
            g.partitioner = shared  # type: ignore[attr-defined]
        return instances

    def choose(self, key: str, now: float) -> int:
        p = self.partitioner
        if self._follower:  # Alg. 1's lookup with the function the host installed for ``now``'s period
            w = p.function.lookup(key)  # type: ignore[union-attr]
        elif self.source == 0 or self.role == "leader":  # the leader: counts, and rebuilds at each boundary
            w = p.route(key, now)  # type: ignore[union-attr]
        else:  # another source in process: the leader's function for ``now``'s period, counting nothing
            p.advance(now)  # type: ignore[union-attr]
            w = p.function.lookup(key)  # type: ignore[union-attr]
        self.local_loads[w] += 1
        return w

    def resize(self, workers: int) -> None:
        """The worker count changed: rebuild for ``workers`` channels (once for all sources; a follower
        keeps its function until it imports the leader's rebuild)."""
        if workers < 1:
            raise SpecError(f"gedik: the number of workers must be at least 1, got {workers}")
        if not self._follower:
            self.partitioner.resize(workers)  # type: ignore[union-attr]
        if workers > len(self.local_loads):
            self.local_loads.extend([0] * (workers - len(self.local_loads)))
        self.workers = workers

    def set_role(self, role: str | None) -> None:
        """Cross-process sharing: ``"leader"`` rebuilds and exports, ``"follower"`` only imports, ``None``
        (the default, in process) shares the partitioner object instead."""
        if role not in (None, *ROLES):
            raise SpecError(f"gedik: role must be one of {', '.join(ROLES)}, got {role!r}")
        self.role = role
        self._follower = role == "follower"

    @property
    def state_version(self) -> int:
        """Grows by one with every rebuild of the function (the leader's; a follower's is the imported one)."""
        return self._version_base + self.rebuilds

    def epoch_of(self, now: float) -> int:
        """The period of event time ``now`` falls in (states apply from a period on: ``since``)."""
        return self.partitioner.epoch_of(now)  # type: ignore[union-attr]

    @property
    def epoch(self) -> int:
        """The leader's progress: the latest period it has routed a message in. Every state with ``since`` up to
        it is final, so a follower with a message of that period or earlier may decide it."""
        return self.partitioner.epoch  # type: ignore[union-attr]

    def export_state(self) -> dict:
        """The function as JSON-able data: everything ``lookup`` depends on, its version and the first period it
        applies to (``since``)."""
        f = self.function
        return {"version": self.state_version, "workers": f.workers, "vnodes": f.vnodes,
                "explicit": dict(f.explicit_hash), "since": self.partitioner.since}  # type: ignore[union-attr]

    def import_state(self, state: Mapping[str, Any]) -> None:
        """Install an exported function (the ring is rebuilt only when its shape differs)."""
        old = self.function
        workers, vnodes = int(state["workers"]), int(state["vnodes"])
        ring = old.ring if (workers, vnodes) == (old.workers, old.vnodes) else None
        self.partitioner.function = PartitioningFunction(  # type: ignore[union-attr]
            workers, {k: int(v) for k, v in state["explicit"].items()}, vnodes=vnodes, ring=ring)
        self._version_base = int(state["version"]) - self.rebuilds
        since = int(state.get("since", 0))
        self.partitioner.since = since  # type: ignore[union-attr]
        self.partitioner.epoch = max(self.partitioner.epoch, since)  # type: ignore[union-attr]
        if workers > len(self.local_loads):
            self.local_loads.extend([0] * (workers - len(self.local_loads)))
        self.workers = workers

    @property
    def function(self) -> PartitioningFunction:
        """The partitioning function in use."""
        return self.partitioner.function  # type: ignore[union-attr]

    @property
    def history(self) -> list[RebuildRecord]:
        """Every rebuild so far, with its migration."""
        return self.partitioner.history  # type: ignore[union-attr]

    @property
    def rebuilds(self) -> int:
        return len(self.history)

    @property
    def migrated_keys(self) -> int:
        """Keys (among those seen) that changed worker, summed over the rebuilds."""
        return sum(r.migrated_keys for r in self.history)

    @property
    def migration_cost(self) -> float:
        """eq. 9 summed over the rebuilds (state moved, in units of beta_s of the keys' frequencies)."""
        return sum(r.migration_cost for r in self.history)

    def stats(self) -> dict:
        """Rebuilds and migration, for reports."""
        resizes = [r for r in self.history if r.reason == "resize"]
        return {"rebuilds": self.rebuilds, "resizes": len(resizes), "migrated_keys": self.migrated_keys,
                "migration_cost": self.migration_cost,
                "resize_relative_migration": [r.relative_migration for r in resizes],
                "explicit": len(self.function), "lossy": len(self.partitioner.counter)}  # type: ignore[union-attr]
