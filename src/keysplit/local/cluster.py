"""``LocalCluster``: a streamparse topology on one machine, over Storm's multi-lang protocol.

One OS subprocess per task runs the component exactly as a Storm supervisor would (``streamparse_run
module.Class`` i.e. ``python -m streamparse.run``), in a copy of the topology jar's ``resources/`` tree, with
the handshake conf the caller gives (``submission.submit_conf`` builds what ``sparse submit`` sends), talking
JSON over its stdin/stdout. A single-threaded event loop (``selectors``) plays the Storm worker's part for
every task at once: the handshake, the spout loop (``next``/``ack``/``fail`` and their ``sync``), bolt input
queues, stream groupings, the acker (:mod:`.acker`), tick and heartbeat tuples, logging, and the supervisor.

Tasks belong to ``topology.workers`` worker processes (default 1), spread over them as Storm's default
scheduler does: executors sorted by task id, the i-th to worker ``i mod workers`` (apache/storm
``storm-server/.../scheduler/EvenScheduler.java`` ``scheduleTopology``; on a cluster the acker and event-logger
executors take places in that rotation too). When a task's process dies, its worker dies with it: Storm's
``ShellBolt.die`` / ``ShellSpout.die`` call ``System.exit`` (apache/storm ``task/ShellBolt.java``,
``spout/ShellSpout.java``), so every other task of that JVM goes down and loses its in-memory state; the
supervisor restarts the worker, i.e. all its tasks, after ``keysplit.local.restart.delay.secs``. There is no
per-task restart mode: Storm has none, and a mode that keeps the other tasks' state would hide exactly the
losses a topology must survive.

Every input delivered to a bolt (tick tuples included, heartbeats not) stays pending until the bolt acks or
fails it, as in ``ShellBolt._inputs``; acking or failing an id twice or anchoring to one that is no longer
pending is a fatal error there ("Acked a non-existent or already acked/failed id"), so it kills the task
(and its worker) here. :meth:`LocalCluster.summary` reports the inputs left pending.

The loop runs only inside :meth:`LocalCluster.start` and :meth:`LocalCluster.run_until`, so the
caller's predicate (and :meth:`LocalCluster.kill_task`) run between events without any locking.
"""

from __future__ import annotations

import contextlib
import itertools
import json
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

from .acker import Acker, RootRecord
from .protocol import ACTIVATE, NEXT, encode, encode_spout_command, encode_tuple, tuple_prefix
from .routing import RoutingError, routers_for_task
from .submission import build_resources
from .task import COUNTERS, READ_SIZE, TaskProcess
from .topology import STORM_DEFAULTS, TopologyError, build_context, component_conf, read_topology, task_context

log = logging.getLogger("keysplit.local")

#: multi-lang log levels (0 trace .. 4 error) -> Python logging levels
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_LEVEL_NAMES = {0: "TRACE", 1: "DEBUG", 2: "INFO", 3: "WARN", 4: "ERROR"}

#: Runner settings (not Storm's), with their defaults; set them in ``conf`` like any Storm key.
RUNNER_DEFAULTS: dict[str, Any] = {
    # seconds between heartbeat tuples to each bolt (Storm's ShellBolt sends one a second); 0 disables
    "keysplit.local.heartbeat.secs": 1.0,
    # seconds a crashed worker stays down before the supervisor restarts it (with all its tasks)
    "keysplit.local.restart.delay.secs": 0.5,
    # seconds a task may take to answer the handshake
    "keysplit.local.startup.timeout.secs": 60.0,
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
                 log_dir: str | None = None, env: dict | None = None, resources: str | None = None) -> None:
        self.topology_class = topology_class
        self.components = read_topology(topology_class, python)
        name = getattr(topology_class, "__name__", "topology")
        base = {**STORM_DEFAULTS, **RUNNER_DEFAULTS, "topology.name": name}
        base.update(getattr(topology_class, "config", None) or {})
        base.update(conf or {})
        _check_conf(base, self.components)
        self.conf = base
        self.cwd = str(cwd)
        self.python = python
        self._own_tmp = tempfile.mkdtemp(prefix="keysplit-local-")
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
        self._stderr_dir = self.log_dir or Path(self._own_tmp)
        self.env = self._child_env(env or {})
        seed = int(base["keysplit.local.seed"])
        self.acker = Acker(seed)
        self.acking = base.get("topology.acker.executors") != 0
        self.tasks: dict[int, TaskProcess] = {}
        workers = base.get("topology.workers")
        self.n_workers = max(1, int(workers)) if workers else 1
        self.worker_restarts = 0
        self._workers_down: set[int] = set()
        shared = build_context(self.components)
        self._handshakes: dict[int, str] = {}
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
                    self._handshakes[tid] = encode({"conf": cconf, "pidDir": str(pid_dir), "context": context})
                    if self.log_dir is not None:  # what Storm's worker.log shows of the conf, for inspection
                        (self.log_dir / f"{comp.name}-{tid}.handshake.json").write_text(self._handshakes[tid][:-5])
                except (TypeError, ValueError) as exc:
                    shutil.rmtree(self._own_tmp, ignore_errors=True)
                    raise TopologyError(f"the configuration of {comp.name!r} is not JSON-serialisable: {exc}") from None
        # EvenScheduler: executors (one task each here) sorted by task id, dealt round-robin to the worker slots
        for i, tid in enumerate(sorted(self.tasks)):
            self.tasks[tid].worker = i % self.n_workers
        self.spouts = [t for t in self.tasks.values() if t.is_spout]
        self.bolts = [t for t in self.tasks.values() if not t.is_spout]
        self._sel = selectors.DefaultSelector()
        self._ids = itertools.count(1)
        self._dirty: set[TaskProcess] = set()
        self._down: set[TaskProcess] = set()  # tasks waiting for a restart or for their handshake
        self._fatal: TopologyError | None = None
        self.errors: list[tuple[str, int, str]] = []
        self._started = False
        self._closed = False
        self._next_heartbeat = 0.0
        self._ticks: list[tuple[list[TaskProcess], float, list[float]]] = []
        self._quiet = False  # quiesce(): no more ticks or spout "next"
        self._warned_drop: set[tuple[int, str]] = set()
        self._timeouts = {c.name: float(component_conf(base, c)["topology.message.timeout.secs"])
                          for c in self.components.values()}
        max_pending = {}
        for c in self.components.values():
            value = component_conf(base, c).get("topology.max.spout.pending")
            max_pending[c.name] = int(value) if value else None
        self._max_pending = max_pending
        self.started_at = 0.0
        self._next_batch = max(1, int(base["keysplit.local.spout.next.batch"]))
        self._spout_wait = float(base["topology.sleep.spout.wait.strategy.time.ms"]) / 1000

    # ---- public API --------------------------------------------------------------------------------
    def start(self) -> None:
        """Spawn every task, complete every handshake; :class:`TopologyError` if a task fails to start."""
        if self._started:
            return
        self._started = True
        now = time.monotonic()
        for task in self.tasks.values():
            self._spawn(task, now)
        deadline = now + float(self.conf["keysplit.local.startup.timeout.secs"])
        try:
            # a task that answered the handshake and then died has started (Storm's ShellBolt.prepare returned):
            # its death is an ordinary one, handled below once every task has started
            while not all(t.ready or t.answered for t in self.tasks.values()):
                for task in self.tasks.values():
                    if not task.alive and not task.answered:
                        raise self._startup_failure(task)
                if time.monotonic() > deadline:
                    slow = [f"{t.name}[{t.index}]" for t in self.tasks.values() if not t.ready]
                    raise TopologyError(f"tasks {slow} did not answer the multi-lang handshake within "
                                        f"{self.conf['keysplit.local.startup.timeout.secs']} s")
                self._step(0.05, starting=True)
        except BaseException:
            self.shutdown()
            raise
        now = time.monotonic()
        self.started_at = now
        self._next_heartbeat = now + self._heartbeat_secs()
        for task in self.tasks.values():
            if task.answered and not task.alive and task.restart_at is None:
                task.alive = True  # it died during start-up, after its handshake: a death like any later one
                self._on_death(task, now)
        for comp in self.components.values():
            freq = component_conf(self.conf, comp).get("topology.tick.tuple.freq.secs")
            if freq and not comp.is_spout:
                tasks = [self.tasks[t] for t in comp.task_ids]
                self._ticks.append((tasks, float(freq), [now + float(freq)]))

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
        heartbeat timeout; not counting being taken down with its worker), ``unacked`` (inputs delivered and
        neither acked nor failed), ``pending`` (pending trees, spouts) and ``queued`` (input backlog, bolts).
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
        self._quiet = True
        return self.run_until(lambda: all(not t.queue and not t.inputs for t in self.bolts if t.alive),
                              timeout, poll=0.05)

    def shutdown(self) -> None:
        """Stop every task (EOF on stdin, then SIGKILL after a grace period) and remove temporary files."""
        if self._closed:
            return
        self._closed = True
        for task in self.tasks.values():
            if task.running:
                self._unregister(task)
                for pipe in (task.proc.stdin, task.proc.stdout):  # EOF, and EPIPE for a blocked writer
                    with contextlib.suppress(OSError):
                        pipe.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + 2.0
        for task in self.tasks.values():
            if task.running:
                with contextlib.suppress(Exception):
                    task.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                task.close(kill=True)
            if task.log_file is not None:
                task.log_file.close()
                task.log_file = None
        self._sel.close()
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

    # ---- internals: processes ----------------------------------------------------------------------
    def _child_env(self, extra: dict) -> dict[str, str]:
        env = dict(os.environ)
        paths = [self.resources]
        user = extra.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
        env.update({k: str(v) for k, v in extra.items()})
        env["PYTHONPATH"] = os.pathsep.join([*paths, *([user] if user else [])])
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _task(self, component: str, index: int) -> TaskProcess:
        ids = self.task_ids(component)
        if not 0 <= index < len(ids):
            raise TopologyError(f"component {component!r} has {len(ids)} tasks; no index {index}")
        return self.tasks[ids[index]]

    def _spawn(self, task: TaskProcess, now: float) -> None:
        stderr = self._stderr_dir / f"{task.name}-{task.task_id}.stderr"
        try:
            task.spawn(self.resources, self.env, stderr, self._handshakes[task.task_id], now)
        except OSError as exc:
            raise TopologyError(f"cannot start {task.name}[{task.index}] ({' '.join(task.component.argv)}): "
                                f"{exc}") from exc
        self._sel.register(task.rfd, selectors.EVENT_READ, task)
        self._dirty.add(task)

    def _unregister(self, task: TaskProcess) -> None:
        for fd in (task.rfd, task.wfd):
            with contextlib.suppress(KeyError, ValueError):
                self._sel.unregister(fd)
        task.blocked = False

    def _stderr_note(self, task: TaskProcess) -> str:
        return f" (stderr: {task.stderr_path})" if self.log_dir is not None else ""

    def _startup_failure(self, task: TaskProcess) -> TopologyError:
        code = task.proc.poll() if task.proc else None
        tail = task.stderr_tail()
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output on stderr"
        log.error("task %s[%d] failed to start; its stderr ends with:\n%s", task.name, task.index, tail)
        return TopologyError(f"component {task.name!r} ({task.component.class_path}) task {task.task_id} exited "
                             f"during startup with code {code}: {last}{self._stderr_note(task)}", tail)

    def _die(self, task: TaskProcess, reason: str) -> None:
        """A fatal error in Storm's ShellBolt/ShellSpout for this task: its worker halts (``System.exit``)."""
        log.error("task %s[%d] (id %d): %s; halting its worker (as Storm's ShellBolt.die does)",
                  task.name, task.index, task.task_id, reason)
        self.errors.append((task.name, task.task_id, reason))
        self._on_death(task, time.monotonic())

    def _on_death(self, task: TaskProcess, now: float, taken_down: bool = False) -> None:
        """A task's process died (crash, SIGKILL, broken pipe): its worker goes down with every other task it
        runs, and the whole worker restarts after the restart delay (``taken_down``: one of those others)."""
        if not task.alive:
            return
        self._unregister(task)
        code = task.close(kill=True)
        if not self._started or not self.started_at:
            return  # during start-up: a start-up failure, or (handshake answered) handled when start() ends
        if not taken_down:
            task.deaths += 1
        lost = len(task.queue) + len(task.inflight)
        # the spout trees (lines) those tuples belong to: they time out and are replayed
        trees = len({root for roots, _ in task.inflight.values() for root in roots})
        task.dropped += len(task.queue)
        task.queue.clear()
        task.urgent = []
        task.wbuf = None
        task.inflight.clear()
        task.inputs.clear()  # the worker's ShellBolt and its pending inputs are gone
        dropped_trees = self.acker.drop_spout(task) if task.is_spout else 0
        self._dirty.discard(task)
        tail = task.stderr_tail(5)
        log.warning("task %s[%d] (id %d, pid %s, worker %d) %s with code %s; %s; restarting in %.1f s%s", task.name,
                    task.index, task.task_id, task.pid, task.worker,
                    "went down with its worker" if taken_down else "died", code,
                    f"{dropped_trees} tuple trees in flight forgotten (the spout replays them)" if task.is_spout else
                    f"{lost} tuples queued or in flight lost, from {trees} tuple trees (they time out and replay)",
                    self.conf["keysplit.local.restart.delay.secs"],
                    f"\n{tail}" if code not in (None, 0, -9) and tail else "")
        task.restart_at = now + float(self.conf["keysplit.local.restart.delay.secs"])
        self._down.add(task)
        if task.worker not in self._workers_down:
            self._workers_down.add(task.worker)
            for other in self.tasks.values():
                if other.worker == task.worker and other.alive:
                    self._on_death(other, now, taken_down=True)

    # ---- internals: the event loop -----------------------------------------------------------------
    def _heartbeat_secs(self) -> float:
        return float(self.conf.get("keysplit.local.heartbeat.secs") or 0)

    def _step(self, max_wait: float, starting: bool = False) -> None:
        """One turn of the loop: timers, then wait up to ``max_wait`` for pipe events and handle them."""
        now = time.monotonic()
        wake = now + max(0.0, max_wait)
        if not starting:
            wake = min(wake, self._timers(now))
        self._flush_dirty()
        events = self._sel.select(max(0.0, wake - time.monotonic()))
        for key, mask in events:
            task: TaskProcess = key.data
            if not task.alive:
                continue
            if mask & selectors.EVENT_READ and key.fd == task.rfd:
                self._on_readable(task)
            elif mask & selectors.EVENT_WRITE and key.fd == task.wfd:
                task.blocked = False
                self._sel.unregister(task.wfd)
                self._dirty.add(task)
        self._flush_dirty()
        if self._fatal is not None:
            error, self._fatal = self._fatal, None
            raise error

    def _flush_dirty(self) -> None:
        if not self._dirty:
            return
        dirty, self._dirty = self._dirty, set()
        for task in dirty:
            if not task.alive or task.blocked:
                continue
            result = task.flush()
            if result is False:
                task.blocked = True
                self._sel.register(task.wfd, selectors.EVENT_WRITE, task)
            elif result is None:
                self._on_death(task, time.monotonic())

    def _timers(self, now: float) -> float:
        """Restarts, heartbeats, ticks, message timeouts and spout ``next``; returns the next wake time."""
        wake = now + 1.0
        if self._down:
            for task in sorted(self._down, key=lambda t: t.task_id):  # deterministic restart order
                if task.alive and task.ready:
                    self._down.discard(task)
                elif task.restart_at is not None:
                    if now >= task.restart_at:
                        if task.worker in self._workers_down:  # the supervisor relaunches the worker once
                            self._workers_down.discard(task.worker)
                            self.worker_restarts += 1
                        task.restarts += 1
                        if task.restarts > int(self.conf["keysplit.local.max.restarts"]):
                            # name the task of this worker that keeps dying, not one taken down with it
                            bad = max((t for t in self.tasks.values() if t.worker == task.worker),
                                      key=lambda t: t.deaths)
                            tail = bad.stderr_tail()
                            last = tail.strip().splitlines()[-1] if tail.strip() else "no output on stderr"
                            self._fatal = TopologyError(
                                f"task {bad.name}[{bad.index}] ({bad.component.class_path}) keeps dying: "
                                f"restarted {task.restarts - 1} times (keysplit.local.max.restarts); last stderr "
                                f"line: {last}{self._stderr_note(bad)}", tail)
                            return now
                        self._spawn(task, now)
                    else:
                        wake = min(wake, task.restart_at)
                elif task.alive and now - task.started_at > float(self.conf["keysplit.local.startup.timeout.secs"]):
                    log.error("task %s[%d] did not answer the handshake; killing it", task.name, task.index)
                    self._on_death(task, now)
                else:
                    wake = min(wake, now + 0.05)
        hb = self._heartbeat_secs()
        if hb > 0:
            if now >= self._next_heartbeat:
                self._next_heartbeat = now + hb
                self._heartbeats(now)
            wake = min(wake, self._next_heartbeat)
        for tasks, freq, next_tick in self._ticks:
            if self._quiet:
                break
            if now >= next_tick[0]:
                next_tick[0] = max(next_tick[0] + freq, now)
                values = json.dumps([int(freq) if float(freq).is_integer() else freq])
                for task in tasks:
                    if task.alive:
                        tid = str(next(self._ids))
                        task.inputs.add(tid)  # ShellBolt.execute keeps ticks in _inputs like any tuple
                        task.queue.append(encode_tuple(tid, '","comp":"__system","stream":'
                                                       '"__tick","task":-1,"tuple":', values))
                        task.executed += 1
                        self._dirty.add(task)
            wake = min(wake, next_tick[0])
        for rec in self.acker.expire(now):
            rec.spout.timed_out += 1
            self._to_spout(rec, "fail")
        deadline = self.acker.next_deadline()
        if deadline is not None:
            wake = min(wake, deadline)
        throttled = False
        high = self.conf["keysplit.local.queue.high"]
        for task in self.bolts:
            if len(task.queue) > high:
                throttled = True
                break
        batch = self._next_batch
        for task in self.spouts:
            if task.ready and task.next_out <= batch // 2 and not throttled and not self._quiet:
                if now < task.next_at:
                    wake = min(wake, task.next_at)
                    continue
                if task.idle and task.next_out:
                    continue  # an idle (or new) spout gets one call at a time
                want = 1 if task.idle else batch - task.next_out
                limit = self._max_pending[task.name] if self.acking else None
                if limit is not None:
                    # pipelined calls only for free slots (at the spout's measured emits per call), so the bound
                    # holds; with nothing outstanding, call whenever pending < limit, exactly as Storm does
                    per_next = max(1.0, task.per_next)
                    free = limit - task.pending - task.next_out * per_next
                    want = min(want, int(free // per_next))
                    if task.next_out == 0 and task.pending < limit:
                        want = max(want, 1)
                if want <= 0:
                    continue
                task.urgent.extend([NEXT] * want)
                task.sent_kinds.extend([True] * want)
                task.next_out += want
                task.nexts_sent += want
                self._dirty.add(task)
        return wake

    def _heartbeats(self, now: float) -> None:
        """Heartbeat tuples to bolts; kill a task silent for ``topology.subprocess.timeout.secs``.

        A bolt is silent when it answers nothing, not even heartbeats; a spout when it leaves a command
        unanswered (Storm's ShellSpout watches its ``sync`` replies the same way).
        """
        for task in self.tasks.values():
            if not task.ready or not task.alive:
                continue
            limit = float(task.conf.get("topology.subprocess.timeout.secs") or 0)
            silent = now - task.last_sync
            if limit and silent > limit and (not task.is_spout or task.sent_kinds):
                log.error("task %s[%d] was silent for %.0f s (topology.subprocess.timeout.secs); killing it",
                          task.name, task.index, silent)
                with contextlib.suppress(OSError):
                    os.kill(task.proc.pid if task.proc else task.pid, signal.SIGKILL)  # type: ignore[arg-type]
                continue
            if task.is_spout:
                continue
            task.urgent.append(encode_tuple(str(next(self._ids)), '","comp":"__system","stream":"__heartbeat",'
                                            '"task":-1,"tuple":', "[]"))
            self._dirty.add(task)

    def _on_readable(self, task: TaskProcess) -> None:
        try:
            data = os.read(task.rfd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        now = time.monotonic()
        if not data:
            self._on_death(task, now)
            return
        task.last_sync = now  # any message shows the process is alive (Storm waits for heartbeat syncs only)
        messages = task.reader.feed(data)
        if not messages:
            return
        emit = self._emit
        for msg in messages:
            if type(msg) is not dict:
                log.warning("task %s[%d] sent a non-object message %r", task.name, task.index, msg)
                continue
            command = msg.get("command")
            if command == "emit":
                emit(task, msg)
            elif command == "ack":
                self._bolt_ack(task, msg.get("id"))
            elif command == "sync":
                self._sync(task)
            elif command == "fail":
                self._bolt_fail(task, msg.get("id"))
            elif command == "log":
                self._log(task, msg)
            elif command == "error":
                self._error(task, msg)
            elif command is None and "pid" in msg:
                task.ready = task.answered = True
                task.pid = msg["pid"]
                if task.is_spout:  # Storm (>= 1.1) activates a spout of an active topology when it starts
                    task.urgent.append(ACTIVATE)
                    task.sent_kinds.append(False)
                    self._dirty.add(task)
            elif command == "metrics":
                pass
            else:
                log.warning("task %s[%d] sent an unknown command %r", task.name, task.index, msg)
            if self._fatal is not None:
                return

    def _sync(self, task: TaskProcess) -> None:
        if task.is_spout and task.sent_kinds and task.sent_kinds.popleft():
            task.next_out -= 1
            if task.next_out == 0:
                task.idle = task.emits_since_next == 0
                task.per_next = task.emits_since_next / max(1, task.nexts_sent)
                task.emits_since_next = 0
                task.nexts_sent = 0
                if task.idle:  # nothing to emit: Storm's spout wait strategy sleeps before calling again
                    task.next_at = time.monotonic() + self._spout_wait

    # ---- internals: tuples -------------------------------------------------------------------------
    def _emit(self, task: TaskProcess, msg: dict) -> None:
        stream = msg.get("stream") or "default"
        values = msg.get("tuple")
        router = task.routers.get(stream)
        if router is None:
            self._fatal = TopologyError(
                f"{task.name!r} (task {task.task_id}) emitted on stream {stream!r}, which it does not declare "
                f"(declared: {sorted(task.routers)}); declare it in the component's outputs")
            return
        if type(values) is not list or len(values) != router.n_fields:
            got = len(values) if type(values) is list else "no list"
            self._fatal = TopologyError(
                f"{task.name!r} (task {task.task_id}) emitted {str(values)[:200]} on stream {stream!r}: Tuple created "
                f"with wrong number of fields. Expected {router.n_fields} fields ({router.fields}) but got {got}")
            return
        direct = msg.get("task")
        try:
            targets = router.route(values) if direct is None else router.route_direct(direct)
        except RoutingError as exc:
            self._fatal = TopologyError(f"Storm runtime error in {task.name!r} (task {task.task_id}): {exc}")
            return
        task.emitted += 1
        if direct is None and msg.get("need_task_ids", True):
            task.urgent.append(encode(targets))
            self._dirty.add(task)
        if direct is not None and not targets:
            task.dropped += 1
            if (task.task_id, stream) not in self._warned_drop:
                self._warned_drop.add((task.task_id, stream))
                log.warning("%s (task %d) emitted directly to task %s, which does not subscribe to stream %r; "
                            "dropped (as Storm does)", task.name, task.task_id, direct, stream)
        if task.is_spout:
            task.emits_since_next += 1
        if not task.is_spout:
            anchors = msg.get("anchors")
            if isinstance(anchors, str):  # JsonSerializer accepts a single anchor as a string
                anchors = msg["anchors"] = [anchors]
            if anchors and not task.inputs.issuperset(anchors):  # ShellBolt.handleEmit throws; die()
                gone = next(a for a in anchors if a not in task.inputs)
                self._die(task, f"Anchored onto {gone} after ack/fail")
                return
        roots: tuple[int, ...] = ()
        root = 0
        if self.acking:
            if task.is_spout:
                msg_id = msg.get("id")
                if msg_id is not None:
                    root = self.acker.new_root(task, msg_id, time.monotonic() + self._timeouts[task.name])
                    roots = (root,)
            else:
                anchors = msg.get("anchors")
                if anchors:
                    inflight = task.inflight
                    if len(anchors) == 1:
                        entry = inflight.get(anchors[0])
                        if entry is not None:
                            roots = entry[0]
                    else:
                        found: dict[int, None] = {}
                        for anchor in anchors:
                            entry = inflight.get(anchor)
                            if entry is not None:
                                found.update(dict.fromkeys(entry[0]))
                        roots = tuple(found)
        elif task.is_spout and msg.get("id") is not None:
            # no ackers (topology.acker.executors = 0): Storm acks a spout tuple as soon as it is emitted
            task.acked += 1
            task.urgent.append(encode_spout_command("ack", msg["id"]))
            task.sent_kinds.append(False)
            self._dirty.add(task)
        if not targets:
            if root:
                rec = self.acker.complete_if_done(root)
                if rec is not None:
                    task.acked += 1
                    self._to_spout(rec, "ack")
            return
        values_json = json.dumps(values)
        prefix = task.prefixes[stream]
        ids = self._ids
        tasks = self.tasks
        dirty = self._dirty
        live_roots = [self.acker.roots[r] for r in roots if r in self.acker.roots] if roots else ()
        edge_id = self.acker.edge_id
        for target_id in targets:
            target = tasks[target_id]
            if not target.alive:
                task.dropped += 1  # the target's worker is down: Storm loses the tuple, its tree times out
                if live_roots:
                    edge = edge_id(64)
                    for rec in live_roots:
                        rec.ledger ^= edge
                continue
            tid = str(next(ids))
            target.inputs.add(tid)
            if live_roots:
                edge = edge_id(64)
                for rec in live_roots:
                    rec.ledger ^= edge
                target.inflight[tid] = (roots, edge)
            target.queue.append(encode_tuple(tid, prefix, values_json))
            target.executed += 1
            dirty.add(target)
        task.transferred += len(targets)

    def _bolt_ack(self, task: TaskProcess, tuple_id: Any) -> None:
        if tuple_id not in task.inputs:  # ShellBolt.handleAck throws, and die() halts the worker
            self._die(task, f"Acked a non-existent or already acked/failed id: {tuple_id}")
            return
        task.inputs.discard(tuple_id)
        task.acked += 1
        entry = task.inflight.pop(tuple_id, None)
        if entry is not None:
            for rec in self.acker.ack(entry[0], entry[1]):
                rec.spout.acked += 1
                self._to_spout(rec, "ack")

    def _bolt_fail(self, task: TaskProcess, tuple_id: Any) -> None:
        if tuple_id not in task.inputs:  # ShellBolt.handleFail throws, and die() halts the worker
            self._die(task, f"Failed a non-existent or already acked/failed id: {tuple_id}")
            return
        task.inputs.discard(tuple_id)
        task.failed += 1
        entry = task.inflight.pop(tuple_id, None)
        if entry is not None:
            for rec in self.acker.fail(entry[0]):
                rec.spout.failed += 1
                self._to_spout(rec, "fail")

    def _to_spout(self, rec: RootRecord, command: str) -> None:
        """Send ``ack`` or ``fail`` for a finished tree to its spout task (counters are the caller's)."""
        spout: TaskProcess = rec.spout
        if not spout.alive:
            return
        spout.urgent.append(encode_spout_command(command, rec.msg_id))
        spout.sent_kinds.append(False)
        self._dirty.add(spout)

    def _log(self, task: TaskProcess, msg: dict) -> None:
        level = msg.get("level", 2)
        text = str(msg.get("msg", ""))
        logging.getLogger(f"keysplit.local.{task.name}").log(_LEVELS.get(level, logging.INFO), "[%s %d] %s",
                                                              task.name, task.task_id, text)
        if self.log_dir is not None:
            if task.log_file is None:
                task.log_file = open(self.log_dir / f"{task.name}-{task.task_id}.log", "a", buffering=1)  # noqa: SIM115
            task.log_file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {_LEVEL_NAMES.get(level, 'INFO')} "
                                f"pid={task.pid} {text}\n")

    def _error(self, task: TaskProcess, msg: dict) -> None:
        task.errors += 1
        text = str(msg.get("msg", ""))
        self.errors.append((task.name, task.task_id, text))
        log.error("task %s[%d] reported an error: %s", task.name, task.index, text)
        if self.log_dir is not None:
            with open(self.log_dir / f"{task.name}-{task.task_id}.log", "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR pid={task.pid} {text}\n")
