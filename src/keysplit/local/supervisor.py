"""The supervisor's part of :class:`~keysplit.local.cluster.LocalCluster`: worker processes, their deaths and restarts.

Tasks belong to ``topology.workers`` worker processes (default 1), spread over them as Storm's default
scheduler does: executors sorted by task id, the i-th to worker ``i mod workers`` (apache/storm
``storm-server/.../scheduler/EvenScheduler.java`` ``scheduleTopology``; on a cluster the acker and event-logger
executors take places in that rotation too). When a task's process dies, its worker dies with it: Storm's
``ShellBolt.die`` / ``ShellSpout.die`` call ``System.exit`` (apache/storm ``task/ShellBolt.java``,
``spout/ShellSpout.java``), so every other task of that JVM goes down and loses its in-memory state; the
supervisor restarts the worker, i.e. all its tasks, after ``keysplit.local.restart.delay.secs``. There is no
per-task restart mode: Storm has none, and a mode that keeps the other tasks' state would hide exactly the
losses a topology must survive.

A task that dies before answering the multi-lang handshake while the topology starts (a crash, an OOM kill, a
``kill -9``) takes its worker down, and the supervisor launches the worker again, as Storm's does: a slot whose
worker does not come up within the first-heartbeat timeout is killed and relaunched (apache/storm
``storm-server/src/main/java/org/apache/storm/daemon/supervisor/Slot.java`` ``handleWaitingForWorkerStart``:
``killContainerFor(KillReason.HB_TIMEOUT, ...)``, then ``KILL_AND_RELAUNCH``). Storm retries forever; here a
worker gets ``keysplit.local.startup.attempts`` starts, then the run fails with one line naming the task and its
last stderr line (:class:`TopologyError`), so a component that cannot start at all (a missing module) is still
reported in seconds. A task that keeps dying after ``keysplit.local.max.restarts`` restarts is a crash loop.

A task that is alive but slow to answer its handshake (a busy machine, every task importing at once) is waited for,
as Storm waits for a slow-loading ShellBolt; one that shows no sign of life (no CPU time, nothing on stderr) for
``keysplit.local.startup.timeout.secs`` hangs, and the run fails with one line naming it (:mod:`.liveness`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import selectors
import signal
import time
from collections.abc import Callable
from pathlib import Path

from .context import TopologyError
from .state import ClusterState
from .task import TaskProcess

log = logging.getLogger("keysplit.local")


def worker_env(resources: str, extra: dict) -> dict[str, str]:
    """The workers' environment: ours, ``extra`` on top, the resources folder first on ``PYTHONPATH``."""
    env = dict(os.environ)
    paths = [resources]
    user = extra.get("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    env.update({k: str(v) for k, v in extra.items()})
    env["PYTHONPATH"] = os.pathsep.join([*paths, *([user] if user else [])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Supervisor:
    """Spawns the tasks, notices their deaths, takes their workers down and restarts them whole.

    A task's process runs in ``resources`` (the jar's ``resources/`` folder) with ``env``, its stderr in
    ``stderr_dir``, and is sent ``handshakes[task_id]`` first.
    """

    def __init__(self, state: ClusterState, *, resources: str, env: dict[str, str], stderr_dir: Path,
                 handshakes: dict[int, str]) -> None:
        self.state = state
        self.resources = resources
        self.env = env
        self.stderr_dir = stderr_dir
        self.handshakes = handshakes
        self.worker_restarts = 0
        self.down: set[TaskProcess] = set()  # tasks waiting for a restart or for their handshake
        self.workers_down: set[int] = set()
        # EvenScheduler: executors (one task each here) sorted by task id, dealt round-robin to the worker slots
        for i, tid in enumerate(sorted(state.tasks)):
            state.tasks[tid].worker = i % state.n_workers

    def await_handshakes(self, now: float, step: Callable[[float], None],
                         on_starting: Callable[[], None] | None = None) -> None:
        """Run the loop (``step(max_wait)``, one turn) until every spawned task has answered its handshake, calling
        ``on_starting`` between turns; :class:`TopologyError` if a task fails to start or is too slow."""
        c = self.state
        relaunch: dict[int, float] = {}  # worker -> when it starts again (a task of it died during start-up)
        attempts: dict[int, int] = {}  # worker -> its starts that a task of it died in before its handshake
        # a task that answered the handshake and then died has started (Storm's ShellBolt.prepare returned):
        # its death is an ordinary one, handled by started() once every task has started
        while relaunch or not all(t.ready or t.answered for t in c.tasks.values()):
            now = time.monotonic()
            for task in c.tasks.values():
                if not task.alive and not task.answered and task.worker not in relaunch:
                    attempts[task.worker] = attempts.get(task.worker, 0) + 1
                    if attempts[task.worker] >= int(c.conf["keysplit.local.startup.attempts"]):
                        raise self.startup_failure(task, attempts[task.worker])
                    relaunch[task.worker] = now + self.startup_down(task)
            for worker, at in sorted(relaunch.items()):
                if now >= at:
                    del relaunch[worker]
                    self.worker_restarts += 1
                    for task in (t for t in c.tasks.values() if t.worker == worker):
                        task.restarts += 1
                        self.spawn(task, now)
            if on_starting is not None:
                on_starting()
            # slow is fine (a busy machine: every task importing at once); silent is hung (liveness.py)
            hung = next((t for t in c.tasks.values() if self.hung(t, now)), None)
            if hung is not None:
                raise self.hung_failure(hung)
            step(0.05)

    def hung(self, task: TaskProcess, now: float) -> bool:
        """Whether ``task``, running and not yet past its handshake, has shown no sign of life (CPU time, stderr)
        for ``keysplit.local.startup.timeout.secs``."""
        limit = float(self.state.conf["keysplit.local.startup.timeout.secs"])
        return (task.running and not task.ready and task.liveness is not None
                and task.liveness.silent_for(now) > limit)

    def hung_failure(self, task: TaskProcess) -> TopologyError:
        """The one line for a task that hangs before its handshake: which, what was seen, and what to do."""
        limit = self.state.conf["keysplit.local.startup.timeout.secs"]
        tail = task.stderr_tail()
        last = tail.strip().splitlines()[-1] if tail.strip() else "none"
        seen, state = task.liveness.describe() if task.liveness else ("showed no sign of life", "")
        return TopologyError(
            f"task {task.name}[{task.index}] ({task.component.class_path}, pid {task.pid}) did not answer the "
            f"multi-lang handshake and {seen} for {limit:g} s (keysplit.local.startup.timeout.secs"
            f"{'; its process is ' + state if state else ''}): it hangs before its component starts; last stderr "
            f"line: {last}{self.stderr_note(task)}; if it is only slow, raise that limit (keysplit run "
            "--startup-timeout)", tail)

    def startup_down(self, task: TaskProcess) -> float:
        """``task`` died before its handshake while the topology starts: take its worker down (the others of it
        start again too, as a relaunched JVM's would); the seconds until the supervisor launches it again."""
        c = self.state
        task.deaths += 1
        code = task.proc.poll() if task.proc else None
        log.warning("task %s[%d] (id %d, pid %s, worker %d) died during start-up with code %s; relaunching its "
                    "worker in %.1f s (as Storm's supervisor relaunches a worker that did not come up)", task.name,
                    task.index, task.task_id, task.pid, task.worker, code, c.conf["keysplit.local.restart.delay.secs"])
        for other in c.tasks.values():
            if other.worker == task.worker:
                if other.running:
                    self.unregister(other)
                    other.close(kill=True)
                other.answered = False  # it answers again after the relaunch
        return float(c.conf["keysplit.local.restart.delay.secs"])

    def started(self, now: float) -> None:
        """Every task has started: the deaths during start-up (after a handshake) become ordinary deaths."""
        for task in self.state.tasks.values():
            if task.answered and not task.alive and task.restart_at is None:
                task.alive = True  # it died during start-up, after its handshake: a death like any later one
                self.on_death(task, now)

    def spawn(self, task: TaskProcess, now: float) -> None:
        stderr = self.stderr_dir / f"{task.name}-{task.task_id}.stderr"
        try:
            task.spawn(self.resources, self.env, stderr, self.handshakes[task.task_id], now)
        except OSError as exc:
            raise TopologyError(f"cannot start {task.name}[{task.index}] ({' '.join(task.component.argv)}): "
                                f"{exc}") from exc
        self.state.selector.register(task.rfd, selectors.EVENT_READ, task)
        self.state.dirty.add(task)

    def unregister(self, task: TaskProcess) -> None:
        for fd in (task.rfd, task.wfd):
            with contextlib.suppress(KeyError, ValueError):
                self.state.selector.unregister(fd)
        task.blocked = False

    def stderr_note(self, task: TaskProcess) -> str:
        return f" (stderr: {task.stderr_path})" if self.state.log_dir is not None else ""

    def startup_failure(self, task: TaskProcess, attempts: int) -> TopologyError:
        code = task.proc.poll() if task.proc else None
        tail = task.stderr_tail()
        last = tail.strip().splitlines()[-1] if tail.strip() else "no output on stderr"
        if tail.strip():
            log.error("task %s[%d] failed to start; its stderr ends with:\n%s", task.name, task.index, tail)
        else:
            log.error("task %s[%d] failed to start and wrote nothing on stderr", task.name, task.index)
        tries = f" ({attempts} starts, keysplit.local.startup.attempts)" if attempts > 1 else ""
        if isinstance(code, int) and code < 0:  # killed: by whom is for the user to find (the OOM killer? dmesg)
            with contextlib.suppress(ValueError):
                code = f"{code} (killed by {signal.Signals(-code).name})"
        return TopologyError(f"component {task.name!r} ({task.component.class_path}) task {task.task_id} exited "
                             f"during startup with code {code}{tries}: {last}{self.stderr_note(task)}", tail)

    def die(self, task: TaskProcess, reason: str) -> None:
        """A fatal error in Storm's ShellBolt/ShellSpout for this task: its worker halts (``System.exit``)."""
        log.error("task %s[%d] (id %d): %s; halting its worker (as Storm's ShellBolt.die does)",
                  task.name, task.index, task.task_id, reason)
        self.state.errors.append((task.name, task.task_id, reason))
        self.on_death(task, time.monotonic())

    def on_death(self, task: TaskProcess, now: float, taken_down: bool = False) -> None:
        """A task's process died (crash, SIGKILL, broken pipe): its worker goes down with every other task it
        runs, and the whole worker restarts after the restart delay (``taken_down``: one of those others)."""
        if not task.alive:
            return
        c = self.state
        self.unregister(task)
        code = task.close(kill=True)
        if not c.started_at:
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
        dropped_trees = c.acker.drop_spout(task) if task.is_spout else 0
        task.forgotten += dropped_trees  # no ack or fail will ever reach a spout for these (stats: "forgotten")
        c.dirty.discard(task)
        # the last stderr line names the error; the traceback stays in the task's log (a user reads one line a death)
        tail = task.stderr_tail().strip().splitlines()
        last = f"; last stderr line: {tail[-1]}{self.stderr_note(task)}" if code not in (None, 0, -9) and tail else ""
        log.warning("task %s[%d] (id %d, pid %s, worker %d) %s with code %s; %s; restarting in %.1f s%s", task.name,
                    task.index, task.task_id, task.pid, task.worker,
                    "went down with its worker" if taken_down else "died", code,
                    f"{dropped_trees} tuple trees in flight forgotten (the spout replays them)" if task.is_spout else
                    f"{lost} tuples queued or in flight lost, from {trees} tuple trees (they time out and replay)",
                    c.conf["keysplit.local.restart.delay.secs"], last)
        task.restart_at = now + float(c.conf["keysplit.local.restart.delay.secs"])
        self.down.add(task)
        if task.worker not in self.workers_down:
            self.workers_down.add(task.worker)
            for other in c.tasks.values():
                if other.worker == task.worker and other.alive:
                    self.on_death(other, now, taken_down=True)

    def restarts(self, now: float, wake: float) -> float:
        """Restart the workers whose delay has passed, kill tasks stuck before their handshake; the next wake
        time (``now`` after setting the cluster's fatal error: a crash loop)."""
        c = self.state
        for task in sorted(self.down, key=lambda t: t.task_id):  # deterministic restart order
            if task.alive and task.ready:
                self.down.discard(task)
            elif task.restart_at is not None:
                if now >= task.restart_at:
                    if task.worker in self.workers_down:  # the supervisor relaunches the worker once
                        self.workers_down.discard(task.worker)
                        self.worker_restarts += 1
                    task.restarts += 1
                    if task.restarts > int(c.conf["keysplit.local.max.restarts"]):
                        # name the task of this worker that keeps dying, not one taken down with it
                        bad = max((t for t in c.tasks.values() if t.worker == task.worker), key=lambda t: t.deaths)
                        tail = bad.stderr_tail()
                        last = tail.strip().splitlines()[-1] if tail.strip() else "no output on stderr"
                        # a death the runner decided (a ShellBolt error such as Kryo's) leaves no stderr: name it
                        error = next((m for _, t, m in reversed(c.errors) if t == bad.task_id), None)
                        c.fatal = TopologyError(
                            f"task {bad.name}[{bad.index}] ({bad.component.class_path}) keeps dying: "
                            f"restarted {task.restarts - 1} times (keysplit.local.max.restarts); last stderr "
                            f"line: {last}{self.stderr_note(bad)}"
                            + (f"; last error: {error[:400]}" if error else ""), tail)
                        return now
                    self.spawn(task, now)
                else:
                    wake = min(wake, task.restart_at)
            elif self.hung(task, now):  # restarted, and hangs before its handshake: a death like any other
                log.error("%s; killing it", self.hung_failure(task))
                self.on_death(task, now)
            else:
                wake = min(wake, now + 0.05)
        return wake

    def stop_all(self) -> None:
        """Stop every task (EOF on stdin, then SIGKILL after a grace period) and close their log files."""
        tasks = self.state.tasks.values()
        for task in tasks:
            if task.running:
                self.unregister(task)
                for pipe in (task.proc.stdin, task.proc.stdout):  # EOF, and EPIPE for a blocked writer
                    with contextlib.suppress(OSError):
                        pipe.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + 2.0
        for task in tasks:
            if task.running:
                with contextlib.suppress(Exception):
                    task.proc.wait(timeout=max(0.0, deadline - time.monotonic()))  # type: ignore[union-attr]
                task.close(kill=True)
            if task.log_file is not None:
                task.log_file.close()
                task.log_file = None
