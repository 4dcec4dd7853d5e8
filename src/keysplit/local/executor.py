"""The ShellBolt/ShellSpout side of :class:`~keysplit.local.cluster.LocalCluster`: what a task's multi-lang
messages do.

Storm runs each multi-lang component inside a ``ShellBolt`` or ``ShellSpout`` (apache/storm ``task/ShellBolt.java``,
``spout/ShellSpout.java``) that reads the subprocess's messages and handles each command: ``emit``, ``ack``/``fail``
of a bolt's inputs, ``sync`` (a spout's answer to ``next``/``ack``/``fail``), ``log``, ``error``, ``metrics``, and
the handshake's ``pid`` reply. :class:`Executor` does the same for every task, one handler per command in a
dispatch table; as in Storm, what an emit, an ack or a fail does to the tuple trees is the output collector's
(:mod:`.collector`, with the acker of :mod:`.acker`), and a death is the supervisor's (:mod:`.supervisor`).

Every input delivered to a bolt (tick tuples included, heartbeats not) stays pending until the bolt acks or
fails it, as in ``ShellBolt._inputs``; acking or failing an id twice or anchoring to one that is no longer
pending is a fatal error there ("Acked a non-existent or already acked/failed id"), so it kills the task
(and its worker) here. :meth:`LocalCluster.summary` reports the inputs left pending.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .collector import OutputCollector, WorkerHalt
from .context import TopologyError
from .pacing import Pacing
from .protocol import ACTIVATE, encode
from .state import ClusterState
from .supervisor import Supervisor
from .task import READ_SIZE, TaskProcess

log = logging.getLogger("keysplit.local")

#: multi-lang log levels (0 trace .. 4 error) -> Python logging levels
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_LEVEL_NAMES = {0: "TRACE", 1: "DEBUG", 2: "INFO", 3: "WARN", 4: "ERROR"}


class Executor:
    """Reads each task's messages and handles them as Storm's ShellBolt / ShellSpout would."""

    def __init__(self, state: ClusterState, collector: OutputCollector, supervisor: Supervisor,
                 pacing: Pacing) -> None:
        self.state = state
        self.collector = collector
        self.supervisor = supervisor
        self.pacing = pacing
        self._handlers: dict[Any, Callable[[TaskProcess, dict], None]] = {
            "emit": self.emit, "ack": self.ack, "sync": self.sync, "fail": self.fail, "log": self.log_message,
            "error": self.error, "metrics": self.metrics,
        }

    def on_readable(self, task: TaskProcess) -> None:
        """Read what the task wrote and handle every complete message (EOF: the process died)."""
        state = self.state
        try:
            data = os.read(task.rfd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        now = time.monotonic()
        if not data:
            self.supervisor.on_death(task, now)
            return
        task.last_sync = now  # any message shows the process is alive (Storm waits for heartbeat syncs only)
        messages = task.reader.feed(data)
        if not messages:
            return
        handlers = self._handlers
        for msg in messages:
            if type(msg) is not dict:
                log.warning("task %s[%d] sent a non-object message %r", task.name, task.index, msg)
                continue
            command = msg.get("command")
            handler = handlers.get(command) if type(command) is str else None
            if handler is None:
                if command is None and "pid" in msg:
                    handler = self.handshake
                else:
                    log.warning("task %s[%d] sent an unknown command %r", task.name, task.index, msg)
                    continue
            handler(task, msg)
            if state.fatal is not None or not task.alive:
                return  # a task that died (its worker halted) sends nothing more

    # ---- one handler per multi-lang command ---------------------------------------------------------
    def handshake(self, task: TaskProcess, msg: dict) -> None:
        """The ``{"pid": ...}`` answer to the handshake: the task has started."""
        task.ready = task.answered = True
        task.pid = msg["pid"]
        if task.is_spout:  # Storm (>= 1.1) activates a spout of an active topology when it starts
            task.urgent.append(ACTIVATE)
            task.sent_kinds.append(False)
            self.state.dirty.add(task)

    def sync(self, task: TaskProcess, msg: dict) -> None:
        self.pacing.spout_synced(task)

    def metrics(self, task: TaskProcess, msg: dict) -> None:
        pass

    def emit(self, task: TaskProcess, msg: dict) -> None:
        """``ShellBolt.handleEmit`` / ``ShellSpout``'s emit: the collector routes the tuple, the task gets the
        target ids unless it said it does not need them, a bolt's anchors must be pending inputs, and the
        collector sends the tuple (rooted for a spout, anchored for a bolt)."""
        stream = msg.get("stream") or "default"
        values = msg.get("tuple")
        direct = msg.get("task")
        collector = self.collector
        try:
            targets = collector.route(task, stream, values, direct)
            if direct is None and msg.get("need_task_ids", True):
                task.urgent.append(encode(targets))
                self.state.dirty.add(task)
            if task.is_spout:
                collector.spout_emit(task, stream, values, targets, msg.get("id"))
                return
            anchors = msg.get("anchors")
            if isinstance(anchors, str):  # JsonSerializer accepts a single anchor as a string
                anchors = [anchors]
            if anchors and not task.inputs.issuperset(anchors):  # ShellBolt.handleEmit throws; die()
                raise WorkerHalt(f"Anchored onto {next(a for a in anchors if a not in task.inputs)} after ack/fail")
            collector.bolt_emit(task, stream, values, targets, anchors)
        except TopologyError as exc:  # a Storm runtime error: the loop raises it at the end of its turn
            self.state.fatal = exc
        except WorkerHalt as exc:
            self.supervisor.die(task, str(exc))

    def ack(self, task: TaskProcess, msg: dict) -> None:
        """``ShellBolt.handleAck``: the input must be pending; the collector acks it."""
        tuple_id = msg.get("id")
        if tuple_id not in task.inputs:  # ShellBolt.handleAck throws, and die() halts the worker
            self.supervisor.die(task, f"Acked a non-existent or already acked/failed id: {tuple_id}")
            return
        task.inputs.discard(tuple_id)
        task.acked += 1
        self.collector.ack(task, tuple_id)

    def fail(self, task: TaskProcess, msg: dict) -> None:
        """``ShellBolt.handleFail``: the input must be pending; the collector fails it."""
        tuple_id = msg.get("id")
        if tuple_id not in task.inputs:  # ShellBolt.handleFail throws, and die() halts the worker
            self.supervisor.die(task, f"Failed a non-existent or already acked/failed id: {tuple_id}")
            return
        task.inputs.discard(tuple_id)
        task.failed += 1
        self.collector.fail(task, tuple_id)

    def log_message(self, task: TaskProcess, msg: dict) -> None:
        level = msg.get("level", 2)
        text = str(msg.get("msg", ""))
        log_dir = self.state.log_dir
        # a traceback logged by the component (pystorm logs one when run() dies) is one line here, whole in its log
        logging.getLogger(f"keysplit.local.{task.name}").log(
            _LEVELS.get(level, logging.INFO), "[%s %d] %s", task.name, task.task_id,
            _one_line(text, log_dir and log_dir / f"{task.name}-{task.task_id}.log"))
        if log_dir is not None:
            if task.log_file is None:
                task.log_file = open(log_dir / f"{task.name}-{task.task_id}.log", "a", buffering=1)  # noqa: SIM115
            task.log_file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {_LEVEL_NAMES.get(level, 'INFO')} "
                                f"pid={task.pid} {text}\n")

    def error(self, task: TaskProcess, msg: dict) -> None:
        task.errors += 1
        text = str(msg.get("msg", ""))
        self.state.errors.append((task.name, task.task_id, text))
        log_dir = self.state.log_dir
        log.error("task %s[%d] reported an error: %s", task.name, task.index, _one_line(text, log_dir and
                  log_dir / f"{task.name}-{task.task_id}.log"))
        if log_dir is not None:
            with open(log_dir / f"{task.name}-{task.task_id}.log", "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR pid={task.pid} {text}\n")


def _one_line(report: str, log_path: Path | None) -> str:
    """A component's report or log message as one terminal line when the task has a log to keep the whole of it:
    the first line (pystorm's "Python ValueError raised") and the last (a traceback's exception).

    >>> _one_line("Python ValueError raised\\nTraceback (most recent call last):\\n...\\nValueError: bad", Path("t"))
    'Python ValueError raised: ValueError: bad (the whole report: t)'
    """
    lines = [line for line in report.strip().splitlines() if line.strip()]
    if len(lines) <= 1 or log_path is None:
        return report.strip()
    return f"{lines[0].rstrip(':')}: {lines[-1].strip()} (the whole report: {log_path})"

