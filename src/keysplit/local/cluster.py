"""``LocalCluster``: a streamparse topology on one machine, over Storm's multi-lang protocol.

One OS subprocess per task runs the component exactly as a Storm supervisor would (``streamparse_run
module.Class`` i.e. ``python -m streamparse.run``), in a copy of the topology jar's ``resources/`` tree, with
the handshake conf the caller gives (``submission.submit_conf`` builds what ``sparse submit`` sends), talking
JSON over its stdin/stdout. A single-threaded event loop (``selectors``) plays the Storm worker's part for
every task at once. :class:`LocalCluster` is the facade; the work is split in layers along Storm's own seams
(the executor hands tuples to the collector, deaths to the supervisor, a spout's ``sync`` to the pacing, which
fails timed-out trees through the collector; docs/design/local-runner.md draws them):

- :mod:`.executor`: the ShellBolt/ShellSpout side, one handler per multi-lang command (``emit``, ``ack``,
  ``fail``, ``sync``, ``log``, ``error``, ...): it checks what the protocol says (a bolt's inputs are pending)
  and hands every tuple to the collector, as ``ShellBolt.handleEmit`` hands it to Storm's output collector;
- :mod:`.collector`: the output collector: stream and arity checks, the target tasks (the stream groupings of
  :mod:`.grouper`), rooting and anchoring in the acker, the Kryo check (:mod:`.serialization`), the copies in
  the targets' input queues, and the ``ack``/``fail`` of finished trees to their spouts;
- :mod:`.acker`: the tuple trees' XOR ledgers (it alone touches them) and message timeouts;
- :mod:`.supervisor`: the worker processes (tasks dealt to ``topology.workers`` workers as Storm's
  EvenScheduler does), spawning, start-up failures, deaths that take a whole worker down, and restarts;
- :mod:`.pacing`: heartbeats, tick tuples, message timeouts and the spout ``next`` calls.

They share one explicit :class:`~.state.ClusterState` (the conf and tasks, the acker, the selector, the tasks with
pending writes, the tuple ids, the reported errors and the fatal error the loop raises), built here and handed to
each; each owns its own bookkeeping, and none holds the cluster.

The loop runs only inside :meth:`LocalCluster.start` and :meth:`LocalCluster.run_until`, so the
caller's predicate (and :meth:`LocalCluster.kill_task`) run between events without any locking.
"""

from __future__ import annotations

import logging
import os
import selectors
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from keysplit.errors import KeysplitError
from keysplit.latency import LatencyHistogram

from .acker import Acker
from .collector import OutputCollector
from .context import STORM_DEFAULTS, TopologyError, build_context, component_conf, read_topology, task_context
from .executor import Executor
from .grouper import routers_for_task
from .pacing import Pacing
from .protocol import encode, tuple_prefix
from .serialization import KryoCheck
from .state import ClusterState
from .submission import build_resources
from .supervisor import Supervisor, worker_env
from .task import COUNTERS, TaskProcess

log = logging.getLogger("keysplit.local")

#: Runner settings (not Storm's), with their defaults; set them in ``conf`` like any Storm key.
RUNNER_DEFAULTS: dict[str, Any] = {
    # seconds between heartbeat tuples to each bolt (Storm's ShellBolt sends one a second); 0 disables
    "keysplit.local.heartbeat.secs": 1.0,
    # seconds a crashed worker stays down before the supervisor restarts it (with all its tasks)
    "keysplit.local.restart.delay.secs": 0.5,
    # seconds a task that has not answered its handshake may show no sign of life (no CPU time, nothing on stderr)
    # before it counts as hung; a slow start that is busy is waited for (liveness.py). Storm's supervisor gives a
    # worker supervisor.worker.start.timeout.secs = 120 to show its first heartbeat (conf/defaults.yaml)
    "keysplit.local.startup.timeout.secs": 120.0,
    # starts a worker gets while the topology starts (a task of it dying before its handshake relaunches it)
    "keysplit.local.startup.attempts": 3,
    # back-pressure: spouts get no "next" while some bolt task has more queued input tuples than this
    "keysplit.local.queue.high": 20000,
    # "next" commands a spout may have outstanding (pipelined in one write; Storm calls nextTuple in a loop)
    "keysplit.local.spout.next.batch": 16,
    # a task that dies more often than this makes run_until raise TopologyError (a crash loop)
    "keysplit.local.max.restarts": 50,
    # seed of shuffle groupings and of the acker's edge ids
    "keysplit.local.seed": 0,
}


#: conf keys that must be numbers (None allowed where Storm allows it)
_NUMERIC = {"topology.message.timeout.secs": False, "topology.max.spout.pending": True,
            "topology.tick.tuple.freq.secs": True, "topology.acker.executors": True,
            "topology.sleep.spout.wait.strategy.time.ms": False, "topology.subprocess.timeout.secs": True,
            "topology.workers": True,
            **{key: False for key in RUNNER_DEFAULTS}}


def _check_conf(base: dict[str, Any], components: dict[str, Any]) -> None:
    """Reject a non-numeric or negative value for a setting the runner reads, naming the key."""
    scopes = [("topology", base)] + [(f"component {c.name!r}", {**base, **c.config}) for c in components.values()]
    for where, conf in scopes:
        for key, optional in _NUMERIC.items():
            value = conf.get(key)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise TopologyError(f"{key} must be a non-negative number, got {value!r} ({where})")
    if not float(base["topology.message.timeout.secs"]) > 0:
        raise TopologyError("topology.message.timeout.secs must be positive")


class LocalCluster:
    """Run a streamparse ``Topology`` class locally; see the docstrings of this module and of the package.

    ``conf`` is the Storm configuration (overriding the topology class's ``config``); per-component
    ``config`` given to ``Component.spec(config=...)`` overrides it for that component. ``cwd`` is the
    project root. Component processes run, as on a supervisor, in a resources folder laid out like the
    topology jar's ``resources/``: ``resources`` if given, else a copy of ``cwd/src`` made as ``sparse jar``
    makes it (:func:`.submission.build_resources`). That folder is first on their ``PYTHONPATH``:
    ``streamparse.run`` appends it to ``sys.path``, and on a worker whose Python has no keysplit that is
    where keysplit comes from; here it must also win over the development install, so a file missing from
    the jar fails here too. ``env`` adds environment variables (the workers' environment); a ``PYTHONPATH``
    in it is appended.
    """

    def __init__(self, topology_class: Any, conf: dict | None = None, *, cwd: str, python: str = sys.executable,
                 log_dir: str | None = None, env: dict | None = None, resources: str | None = None,
                 on_starting: Callable[[LocalCluster], None] | None = None) -> None:
        self.topology_class = topology_class
        self.on_starting = on_starting  # called between the events of start-up (fault injection: runs/faults.py)
        self.components = read_topology(topology_class, python)
        name = getattr(topology_class, "__name__", "topology")
        base = {**STORM_DEFAULTS, **RUNNER_DEFAULTS, "topology.name": name}
        base.update(getattr(topology_class, "config", None) or {})
        base.update(conf or {})
        _check_conf(base, self.components)
        self.conf = base
        kryo = KryoCheck(base)  # what Kryo refuses between workers (serialization.py)
        self.cwd = str(cwd)
        self.python = python
        self._own_tmp = tempfile.mkdtemp(prefix=f"keysplit-local-{os.getpid()}-")  # pid: cleaned after a kill -9
        if resources is None:
            try:
                resources = str(build_resources(Path(self._own_tmp) / "resources", Path(self.cwd) / "src"))
            except KeysplitError:
                shutil.rmtree(self._own_tmp, ignore_errors=True)
                raise
        self.resources = str(resources)
        self.log_dir = Path(log_dir) if log_dir else None
        if self.log_dir:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = worker_env(self.resources, env or {})
        seed = int(base["keysplit.local.seed"])
        self.acker = Acker(seed)
        self.acking = base.get("topology.acker.executors") != 0
        self.tasks: dict[int, TaskProcess] = {}
        workers = base.get("topology.workers")
        self.n_workers = max(1, int(workers)) if workers else 1
        shared = build_context(self.components)
        handshakes: dict[int, str] = {}
        for comp in self.components.values():
            cconf = component_conf(base, comp)
            for index, tid in enumerate(comp.task_ids):
                task = TaskProcess(comp, index, tid, cconf, routers_for_task(self.components, comp, tid, seed))
                task.prefixes = {s: tuple_prefix(comp.name, s, tid) for s in comp.outputs}
                self.tasks[tid] = task
                pid_dir = Path(self._own_tmp) / "pids" / str(tid)
                pid_dir.mkdir(parents=True, exist_ok=True)
                context = task_context(self.components, comp, tid, shared)
                try:
                    handshakes[tid] = encode({"conf": cconf, "pidDir": str(pid_dir), "context": context})
                    if self.log_dir is not None:  # what Storm's worker.log shows of the conf, for inspection
                        (self.log_dir / f"{comp.name}-{tid}.handshake.json").write_text(handshakes[tid][:-5])
                except (TypeError, ValueError) as exc:
                    shutil.rmtree(self._own_tmp, ignore_errors=True)
                    raise TopologyError(f"the configuration of {comp.name!r} is not JSON-serialisable: {exc}") from None
        # what the layers below share (state.py); each is given it, none holds the cluster
        self._state = state = ClusterState(self.conf, self.components, self.tasks, self.acker, self.acking,
                                           self.n_workers, self.log_dir)
        self.spouts, self.bolts, self.errors = state.spouts, state.bolts, state.errors
        self._started = False
        self._closed = False
        self._supervisor = Supervisor(state, resources=self.resources, env=self.env,  # deals the tasks to the workers
                                      stderr_dir=self.log_dir or Path(self._own_tmp), handshakes=handshakes)
        collector = OutputCollector(state, kryo)
        self._pacing = Pacing(state, collector)
        self._executor = Executor(state, collector, self._supervisor, self._pacing)

    @property
    def started_at(self) -> float:
        """Monotonic time at which every task had answered its handshake (0 before)."""
        return self._state.started_at

    @property
    def worker_restarts(self) -> int:
        """Worker processes the supervisor relaunched (during start-up too)."""
        return self._supervisor.worker_restarts

    # ---- public API --------------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn every task, complete every handshake; :class:`TopologyError` if a task fails to start."""
        if self._started:
            return
        self._started = True
        supervisor = self._supervisor
        now = time.monotonic()
        for task in self.tasks.values():
            supervisor.spawn(task, now)
        try:
            supervisor.await_handshakes(now, lambda wait: self._step(wait, starting=True),
                                        (lambda: self.on_starting(self)) if self.on_starting else None)
        except BaseException:
            self.shutdown()
            raise
        now = time.monotonic()
        self._state.started_at = now
        supervisor.started(now)
        self._pacing.start(now)

    def run_until(self, predicate: Callable[[], bool], timeout: float, poll: float = 0.2) -> bool:
        """Drive the topology until ``predicate()`` is true (True) or ``timeout`` seconds pass (False).

        ``predicate`` is called every ``poll`` seconds from this thread (it may call :meth:`stats` or
        :meth:`kill_task`). Raises :class:`TopologyError` on a Storm runtime error (e.g. a direct emit
        to a non-direct subscription).
        """
        if not self._started:
            self.start()
        if self._closed:
            raise TopologyError("the cluster has been shut down")
        now = time.monotonic()
        end = now + timeout
        for task in self.tasks.values():
            task.last_sync = now  # time outside run_until does not count against heartbeats
        next_check = now
        while True:
            now = time.monotonic()
            if now >= next_check:
                if predicate():
                    return True
                next_check = now + poll
            if now >= end:
                return False
            self._step(min(next_check, end) - now)

    def kill_task(self, component: str, index: int = 0) -> int:
        """SIGKILL task ``index`` of ``component`` (its pid is returned); its worker goes down with it and
        the supervisor restarts the worker."""
        task = self._task(component, index)
        if not task.running:
            raise TopologyError(f"task {component}[{index}] is not running")
        os.kill(task.proc.pid, signal.SIGKILL)
        return task.proc.pid

    def kill_worker(self, worker: int) -> list[int]:
        """SIGKILL every task process of worker ``worker`` at once, as ``kill -9`` of its JVM would (their pids
        are returned); the supervisor restarts the worker with all its tasks."""
        if not 0 <= worker < self.n_workers:
            raise TopologyError(f"the topology has {self.n_workers} worker process(es); no worker {worker}")
        pids = [t.proc.pid for t in self.tasks.values() if t.worker == worker and t.running]  # type: ignore[union-attr]
        if not pids:
            raise TopologyError(f"worker {worker} is not running")
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    def is_running(self, component: str, index: int = 0) -> bool:
        """Whether task ``index`` of ``component`` has a live process (not down with its worker)."""
        task = self._task(component, index)
        return task.running

    def worker_running(self, worker: int) -> bool:
        """Whether every task of worker ``worker`` has a live process."""
        return all(t.running for t in self.tasks.values() if t.worker == worker)

    def task_ids(self, component: str) -> list[int]:
        """Storm task ids of ``component``, in index order."""
        if component not in self.components:
            raise TopologyError(f"no component {component!r}; components: {sorted(self.components)}")
        return list(self.components[component].task_ids)

    def stats(self) -> dict[str, dict[str, Any]]:
        """Counters per component: totals, and ``tasks`` ``{task_id: {counter: n}}``.

        Counters: ``emitted`` (emit commands), ``transferred`` (tuples delivered to consumer tasks),
        ``executed`` (tuples handed to a bolt task, Storm's ShellBolt meaning), ``acked``/``failed``
        (bolts: ack/fail commands they sent; spouts: trees completed / failed by a bolt, i.e. ``ack`` and
        ``fail`` sent to the spout), ``timed_out`` (spout trees failed by the message timeout; each is a
        ``fail`` sent to the spout, hence a replay for a reliable spout), ``dropped`` (tuples lost because
        the target task was down or, for direct emits, not a subscriber), ``errors`` (``error`` commands),
        ``restarts`` (process starts after the first), ``deaths`` (the task's own process died: crash, kill,
        heartbeat timeout; not counting being taken down with its worker), ``forgotten`` (spouts: trees pending
        when the task's process died, which no ``ack`` or ``fail`` will ever reach, as in Storm, where the acker's
        ``ack``/``fail`` for them goes to an executor that no longer holds their message ids), ``unacked`` (inputs
        delivered and neither acked nor failed), ``pending`` (pending trees, spouts) and ``queued`` (input
        backlog, bolts).
        """
        out: dict[str, dict[str, Any]] = {}
        for comp in self.components.values():
            per_task = {tid: self.tasks[tid].counters() for tid in comp.task_ids}
            totals: dict[str, Any] = {k: sum(c[k] for c in per_task.values())
                                      for k in (*COUNTERS, "pending", "queued", "unacked")}
            totals["tasks"] = per_task
            totals["kind"] = "spout" if comp.is_spout else "bolt"
            out[comp.name] = totals
        return out

    def spout_throughput(self, spouts: list[str]) -> dict[str, Any]:
        """What the spouts ``spouts`` measured of their trees, as Storm's UI shows a spout's: trees acked, replays
        (trees failed or timed out), rows a second from the first acked tree's emit to the last ack, and the
        complete latency (emit to ack) in ms."""
        tasks = [t for name in spouts for t in (self.tasks[tid] for tid in self.components[name].task_ids)]
        hist = LatencyHistogram()
        for task in tasks:
            hist = hist.merge(task.complete_latency)
        acked = sum(t.acked for t in tasks)
        starts = [t.first_emit for t in tasks if t.first_emit is not None]
        ends = [t.last_ack for t in tasks if t.last_ack is not None]
        duration = max(max(ends) - min(starts), 1e-9) if starts and ends else 0.0
        return {"acked": acked, "replayed": sum(t.failed + t.timed_out for t in tasks), "duration_s": duration,
                "rows_per_second": acked / duration if acked and duration else 0.0,
                "latency_ms": hist.summary() if acked else None}

    def spouts_up_since(self) -> float | None:
        """The monotonic time the last spout task came up (its process answered its first ``next``, so its
        ``initialize`` returned), or None while some spout task is down, restarting or still initialising: a spout
        that has emitted nothing since then has had its chance to."""
        ups = [t.up_since for t in self.spouts]
        return None if any(u is None for u in ups) else max(ups, default=0.0)  # type: ignore[type-var]

    def summary(self) -> dict[str, Any]:
        """What the run went through: ``workers`` (``topology.workers``), ``worker_restarts``,
        ``task_deaths`` (processes that died themselves), ``task_restarts`` and ``unacked_inputs`` (inputs of
        every bolt task delivered and neither acked nor failed: what Storm's ShellBolt would still hold)."""
        tasks = self.tasks.values()
        return {"workers": self.n_workers, "worker_restarts": self.worker_restarts,
                "task_deaths": sum(t.deaths for t in tasks), "task_restarts": sum(t.restarts for t in tasks),
                "unacked_inputs": sum(len(t.inputs) for t in tasks)}

    def quiesce(self, timeout: float = 5.0) -> bool:
        """Stop ticks and spout ``next`` calls, and run until every bolt has answered every input it was given
        (True) or ``timeout`` passes (False): what is still unacked afterwards, the bolts never acked."""
        self._pacing.quiet = True
        return self.run_until(lambda: all(not t.queue and not t.inputs for t in self.bolts if t.alive),
                              timeout, poll=0.05)

    def shutdown(self) -> None:
        """Stop every task (EOF on stdin, then SIGKILL after a grace period) and remove temporary files."""
        if self._closed:
            return
        self._closed = True
        self._supervisor.stop_all()
        self._state.selector.close()
        shutil.rmtree(self._own_tmp, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            if self._started and not self._closed:
                self.shutdown()
        except Exception:
            pass

    # ---- internals -----------------------------------------------------------------------------------
    def _task(self, component: str, index: int) -> TaskProcess:
        ids = self.task_ids(component)
        if not 0 <= index < len(ids):
            raise TopologyError(f"component {component!r} has {len(ids)} tasks; no index {index}")
        return self.tasks[ids[index]]

    def _step(self, max_wait: float, starting: bool = False) -> None:
        """One turn of the loop: timers, then wait up to ``max_wait`` for pipe events and handle them."""
        now = time.monotonic()
        wake = now + max(0.0, max_wait)
        if not starting:
            wake = min(wake, self._timers(now))
        self._flush_dirty()
        state = self._state
        events = state.selector.select(max(0.0, wake - time.monotonic()))
        for key, mask in events:
            task: TaskProcess = key.data
            if not task.alive:
                continue
            if mask & selectors.EVENT_READ and key.fd == task.rfd:
                self._executor.on_readable(task)
            elif mask & selectors.EVENT_WRITE and key.fd == task.wfd:
                task.blocked = False
                state.selector.unregister(task.wfd)
                state.dirty.add(task)
        self._flush_dirty()
        if state.fatal is not None:
            error, state.fatal = state.fatal, None
            raise error

    def _flush_dirty(self) -> None:
        state = self._state
        if not state.dirty:
            return
        dirty = list(state.dirty)  # emptied in place: the layers keep a reference to the set
        state.dirty.clear()
        for task in dirty:
            if not task.alive or task.blocked:
                continue
            result = task.flush()
            if result is False:
                task.blocked = True
                state.selector.register(task.wfd, selectors.EVENT_WRITE, task)
            elif result is None:
                self._supervisor.on_death(task, time.monotonic())

    def _timers(self, now: float) -> float:
        """Restarts, heartbeats, ticks, message timeouts and spout ``next``; returns the next wake time."""
        wake = now + 1.0
        if self._supervisor.down:
            wake = self._supervisor.restarts(now, wake)
            if self._state.fatal is not None:
                return now
        return self._pacing.timers(now, wake)
