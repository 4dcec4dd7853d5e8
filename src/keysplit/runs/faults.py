"""Fault injection for ``keysplit run --kill COMPONENT[:INDEX]@FRACTION``: kill -9 a task, a worker or Redis
once a fraction of the lines is acked, as a crash on a cluster would.

- ``feed``, ``router``, ``counter``, ``aggregator``, ``topk`` (task INDEX, default 0): SIGKILL of that task's
  process; its worker goes down with it and the supervisor restarts the worker (``LocalCluster``).
- ``worker`` (worker INDEX of ``--worker-processes``): SIGKILL of every task process of that worker at once.
- ``redis``: SIGKILL of the managed Redis server, restarted :data:`REDIS_DOWN_SECS` later on the same socket from
  its append-only file; the components' clients reconnect meanwhile (``redis_server.client``).

``COMPONENT[:INDEX]@N`` (a whole number N >= 1) fires once N lines (rows) are acked, and is how a topology with no
keysplit feed, which has no total to take a fraction of, gets a fault: once its spouts have had N tuple trees
acked (runs/topology_run.py).

``COMPONENT[:INDEX]@start`` kills the task (or every task of the worker) while the topology starts, before it
answers its handshake: the supervisor relaunches its worker (local/supervisor.py), as Storm's does for a worker
that does not come up.

A kill of a task that is down at that moment (its worker is restarting) waits until the task runs again, and
kills fire one at a time (the runner polls every 0.2 s), so each is a crash of its own. A kill due as the last
lines are acked still fires, and the run ends only once the killed tasks are back (:meth:`Injector.recovering`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from keysplit.errors import KeysplitError
from keysplit.runs.redis_server import ManagedServer, kill_server, restart_server
from keysplit.storm.components import AGGREGATOR, COUNTER, ROUTER, SPOUT, TOPK

#: What ``--kill`` accepts; the task kinds are the topology's component names.
TASK_KINDS = (SPOUT, ROUTER, COUNTER, AGGREGATOR, TOPK)
KINDS = (*TASK_KINDS, "worker", "redis")
#: The FRACTION of a kill during start-up (``@start``): before any line, sorted first.
AT_START = -1.0
#: Seconds a killed Redis stays down before it is restarted (shorter than the clients' reconnect budget).
REDIS_DOWN_SECS = 1.0

log = logging.getLogger("keysplit.run")


@dataclass(frozen=True)
class Kill:
    """One ``--kill``: ``kind`` (a component, ``worker`` or ``redis``), ``index``, ``fraction`` of lines acked
    (a whole number >= 1: that many lines)."""

    kind: str
    index: int
    fraction: float

    @property
    def is_count(self) -> bool:
        return self.fraction >= 1

    def due(self, acked: int, lines: int | None) -> bool:
        """Whether ``acked`` lines of ``lines`` (None: no total known) reach this kill."""
        if self.is_count:
            return acked >= self.fraction
        return lines is not None and acked >= self.fraction * lines

    @property
    def target(self) -> str:
        return self.kind if self.kind == "redis" else f"{self.kind}:{self.index}"


def parse_kill(text: str, components: tuple[str, ...] = TASK_KINDS) -> Kill:
    """``COMPONENT[:INDEX]@FRACTION``, e.g. ``counter@0.5``, ``router:2@0.25``, ``redis@0.4``; FRACTION ``start``
    for a task or worker: during start-up; a whole number N >= 1: once N lines are acked.

    >>> parse_kill("counter:1@0.5")
    Kill(kind='counter', index=1, fraction=0.5)
    """
    what, at, frac = text.partition("@")
    kind, colon, index = what.strip().partition(":")
    kinds = (*components, "worker", "redis")
    usage = f"--kill {text!r}: expected COMPONENT[:INDEX]@FRACTION with COMPONENT one of {', '.join(kinds)}"
    if not at or kind not in kinds or (colon and not index.isdigit()) or (colon and kind == "redis"):
        raise KeysplitError(usage)
    if frac.strip() == "start":
        if kind == "redis":
            raise KeysplitError(f"--kill {text!r}: only a task or a worker can be killed during start-up")
        return Kill(kind, int(index) if colon else 0, AT_START)
    try:
        fraction = float(frac)
    except ValueError:
        raise KeysplitError(usage) from None
    if not (0 <= fraction < 1 or (fraction >= 1 and fraction.is_integer() and fraction <= 2**53)):
        raise KeysplitError(f"--kill {text!r}: FRACTION is the share of lines acked when it fires, in [0, 1), or "
                            "a whole number of lines acked")
    return Kill(kind, int(index) if colon else 0, fraction)


def check_kills(kills: list[Kill], parallelism: dict[str, int], worker_processes: int) -> None:
    """Refuse a kill of a task or worker the topology does not have."""
    for kill in kills:
        if kill.kind in parallelism and kill.index >= parallelism[kill.kind]:
            raise KeysplitError(f"--kill {kill.target}: {kill.kind} has {parallelism[kill.kind]} task(s), "
                                f"indices 0..{parallelism[kill.kind] - 1}")
        if kill.kind == "worker" and kill.index >= worker_processes:
            raise KeysplitError(f"--kill {kill.target}: the run has {worker_processes} worker process(es) "
                                "(--worker-processes)")


@dataclass
class Injector:
    """Fires the run's kills in order of their fractions, between the local runner's events."""

    kills: list[Kill]
    redis: ManagedServer | None = None
    fired: list[dict[str, Any]] = field(default_factory=list)
    redis_back_at: float | None = None  # monotonic time to restart a killed Redis
    restarts_at_kill: int | None = None  # the cluster's task restarts when the last task or worker kill fired

    def __post_init__(self) -> None:
        self.kills = sorted(self.kills, key=lambda k: k.fraction)
        if any(k.kind == "redis" for k in self.kills) and self.redis is None:
            raise KeysplitError("--kill redis needs the managed Redis server (run without --redis): keysplit "
                                "kills and restarts only a server it started itself")

    @property
    def redis_down(self) -> bool:
        return self.redis_back_at is not None

    def recovering(self, cluster: Any) -> bool:
        """Whether the tasks of the last kill are still down: a run whose last lines were acked just before a
        kill ends only once the killed tasks are back, so that every kill is a crash and a recovery."""
        if self.restarts_at_kill is not None and cluster.summary()["task_restarts"] > self.restarts_at_kill:
            self.restarts_at_kill = None
        return self.redis_down or self.restarts_at_kill is not None

    def restart_redis_if_due(self) -> bool:
        """Restart a killed Redis once it has been down REDIS_DOWN_SECS; True while it is still down."""
        if self.redis_back_at is None:
            return False
        if time.monotonic() < self.redis_back_at:
            return True
        self.redis = restart_server(self.redis)  # type: ignore[arg-type]
        self.redis_back_at = None
        log.warning("redis restarted (pid %d) from its append-only file", self.redis.pid)
        return False

    def fire_at_start(self, cluster: Any) -> None:
        """Fire the ``@start`` kills whose targets have a process that has not answered its handshake yet (the
        local runner calls this between the events of its start-up)."""
        while self.kills and self.kills[0].fraction == AT_START:
            kill = self.kills[0]
            if kill.kind == "worker":
                tasks = [t for t in cluster.tasks.values() if t.worker == kill.index]
            else:
                tasks = [cluster.tasks[cluster.task_ids(kill.kind)[kill.index]]]
            if not all(t.running and not t.answered for t in tasks):
                return  # not spawned yet, or already answered: try again at the next event
            if kill.kind == "worker":
                pids = cluster.kill_worker(kill.index)
            else:
                pids = [cluster.kill_task(kill.kind, kill.index)]
            log.warning("--kill %s@start: killed %s (pid %s) during start-up", kill.target, kill.target,
                        ",".join(map(str, pids)))
            self.fired.append({"target": kill.target, "fraction": "start", "acked": 0})
            self.kills.pop(0)

    def fire_due(self, cluster: Any, acked: int, lines: int | None) -> None:
        """Fire the next kill if its fraction of ``lines`` (or its count) is acked and its target runs now. One
        kill per call: the runner notices this death before the next one fires, so two kills due at once are two
        crashes (two worker restarts), not one. ``lines`` None: a topology with no feed, whose total is unknown
        (only counts fire; runs/topology_run.py refuses fractions there)."""
        if not self.kills or not self.kills[0].due(acked, lines):
            return
        kill = self.kills[0]
        if kill.kind == "redis":
            kill_server(self.redis)  # type: ignore[arg-type]
            self.redis_back_at = time.monotonic() + REDIS_DOWN_SECS
            pids = [self.redis.pid]  # type: ignore[union-attr]
        elif kill.kind == "worker":
            if not cluster.worker_running(kill.index):
                return  # restarting: fire when it is back
            self.restarts_at_kill = cluster.summary()["task_restarts"]
            pids = cluster.kill_worker(kill.index)
        else:
            if not cluster.is_running(kill.kind, kill.index):
                return
            self.restarts_at_kill = cluster.summary()["task_restarts"]
            pids = [cluster.kill_task(kill.kind, kill.index)]
        log.warning("--kill %s@%g: killed %s (pid %s) with %d of %s lines acked", kill.target, kill.fraction,
                    kill.target, ",".join(map(str, pids)), acked, "?" if lines is None else lines)
        if lines is not None and acked >= lines:  # the acks outran the runner's poll: nothing was in flight
            log.warning("--kill %s@%g fired only after every line was acked: it tested no recovery of lines in "
                        "flight; give a smaller fraction or a larger dataset", kill.target, kill.fraction)
        self.fired.append({"target": kill.target, "fraction": kill.fraction, "acked": acked, "lines": lines})
        self.kills.pop(0)


def describe_kills(fired: list[dict[str, Any]], unit: str = "lines") -> str:
    """The kills of a run summary in one line; a kill that fired once every line was acked says that it tested
    nothing in flight, since the run's totals alone cannot tell.

    >>> describe_kills([{"target": "router", "fraction": "start", "acked": 0},
    ...                 {"target": "counter:1", "fraction": 0.3, "acked": 120, "lines": 400},
    ...                 {"target": "redis", "fraction": 0.7, "acked": 400, "lines": 400}])
    'router during start-up, counter:1 at 120 of 400 lines acked, redis at 400 of 400 lines acked (after the last \
line was acked: nothing was in flight)'
    """
    said = []
    for k in fired:
        if k.get("fraction") == "start":
            said.append(f"{k['target']} during start-up")
            continue
        lines = k.get("lines")  # summaries stored before it was recorded lack it
        said.append(f"{k['target']} at {k['acked']}" + (f" of {lines}" if lines is not None else "") + f" {unit} acked"
                    + (f" (after the last {unit[:-1]} was acked: nothing was in flight)"
                       if lines is not None and k["acked"] >= lines else ""))
    return ", ".join(said)
