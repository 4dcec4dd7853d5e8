"""The ShellBolt/ShellSpout side of :class:`~keysplit.local.cluster.LocalCluster`: what a task's multi-lang
messages do.

Storm runs each multi-lang component inside a ``ShellBolt`` or ``ShellSpout`` (apache/storm ``task/ShellBolt.java``,
``spout/ShellSpout.java``) that reads the subprocess's messages and handles each command: ``emit`` (stream
groupings, :mod:`.grouper`; the acker's ledgers, :mod:`.acker`), ``ack``/``fail`` of a bolt's inputs, ``sync``
(a spout's answer to ``next``/``ack``/``fail``), ``log``, ``error``, ``metrics``, and the handshake's ``pid``
reply. :class:`Executor` does the same for every task, one handler per command in a dispatch table.

Every input delivered to a bolt (tick tuples included, heartbeats not) stays pending until the bolt acks or
fails it, as in ``ShellBolt._inputs``; acking or failing an id twice or anchoring to one that is no longer
pending is a fatal error there ("Acked a non-existent or already acked/failed id"), so it kills the task
(and its worker) here. :meth:`LocalCluster.summary` reports the inputs left pending.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .acker import RootRecord, rotation_deadline
from .context import TopologyError, component_conf
from .grouper import RoutingError
from .protocol import ACTIVATE, encode, encode_spout_command, encode_tuple
from .task import READ_SIZE, TaskProcess

if TYPE_CHECKING:
    from .cluster import LocalCluster

log = logging.getLogger("keysplit.local")

#: multi-lang log levels (0 trace .. 4 error) -> Python logging levels
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_LEVEL_NAMES = {0: "TRACE", 1: "DEBUG", 2: "INFO", 3: "WARN", 4: "ERROR"}


class Executor:
    """Reads each task's messages and handles them as Storm's ShellBolt / ShellSpout would."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.c = cluster
        self._warned_drop: set[tuple[int, str]] = set()
        self._timeouts = {comp.name: float(component_conf(cluster.conf, comp)["topology.message.timeout.secs"])
                          for comp in cluster.components.values()}
        kryo = cluster._kryo  # None: no emit can be refused (a single worker, or Java serialization allowed)
        self._kryo = kryo if kryo.enabled and (cluster.n_workers > 1 or kryo.local_too) else None
        self._handlers: dict[Any, Callable[[TaskProcess, dict], None]] = {
            "emit": self.emit, "ack": self.ack, "sync": self.sync, "fail": self.fail, "log": self.log_message,
            "error": self.error, "metrics": self.metrics,
        }

    def on_readable(self, task: TaskProcess) -> None:
        """Read what the task wrote and handle every complete message (EOF: the process died)."""
        c = self.c
        try:
            data = os.read(task.rfd, READ_SIZE)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        now = time.monotonic()
        if not data:
            c._supervisor.on_death(task, now)
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
            if c._fatal is not None or not task.alive:
                return  # a task that died (its worker halted) sends nothing more

    # ---- one handler per multi-lang command ---------------------------------------------------------
    def handshake(self, task: TaskProcess, msg: dict) -> None:
        """The ``{"pid": ...}`` answer to the handshake: the task has started."""
        task.ready = task.answered = True
        task.pid = msg["pid"]
        if task.is_spout:  # Storm (>= 1.1) activates a spout of an active topology when it starts
            task.urgent.append(ACTIVATE)
            task.sent_kinds.append(False)
            self.c._dirty.add(task)

    def sync(self, task: TaskProcess, msg: dict) -> None:
        self.c._pacing.spout_synced(task)

    def metrics(self, task: TaskProcess, msg: dict) -> None:
        pass

    def emit(self, task: TaskProcess, msg: dict) -> None:
        c = self.c
        stream = msg.get("stream") or "default"
        values = msg.get("tuple")
        router = task.routers.get(stream)
        if router is None:
            c._fatal = TopologyError(
                f"{task.name!r} (task {task.task_id}) emitted on stream {stream!r}, which it does not declare "
                f"(declared: {sorted(task.routers)}); declare it in the component's outputs")
            return
        if type(values) is not list or len(values) != router.n_fields:
            got = len(values) if type(values) is list else "no list"
            c._fatal = TopologyError(
                f"{task.name!r} (task {task.task_id}) emitted {str(values)[:200]} on stream {stream!r}: Tuple created "
                f"with wrong number of fields. Expected {router.n_fields} fields ({router.fields}) but got {got}")
            return
        direct = msg.get("task")
        try:
            targets = router.route(values) if direct is None else router.route_direct(direct)
        except RoutingError as exc:
            c._fatal = TopologyError(f"Storm runtime error in {task.name!r} (task {task.task_id}): {exc}")
            return
        task.emitted += 1
        if direct is None and msg.get("need_task_ids", True):
            task.urgent.append(encode(targets))
            c._dirty.add(task)
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
                c._supervisor.die(task, f"Anchored onto {gone} after ack/fail")
                return
        roots: tuple[int, ...] = ()
        root = 0
        if c.acking:
            if task.is_spout:
                msg_id = msg.get("id")
                if msg_id is not None:
                    deadline = rotation_deadline(time.monotonic(), task.started_at, self._timeouts[task.name])
                    root = c.acker.new_root(task, msg_id, deadline)
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
            c._dirty.add(task)
        if not targets:
            if root:
                rec = c.acker.complete_if_done(root)
                if rec is not None:
                    task.acked += 1
                    self.to_spout(rec, "ack")
            return
        # Kryo serializes what goes to another worker: a value it refuses halts this worker, after the
        # targets before that transfer got their copy (serialization.py)
        kryo = self._kryo
        refused = kryo.failure(task, stream, router.fields, values, targets, c.tasks) if kryo is not None else None
        if refused is not None:
            targets = targets[:refused[0]]
        values_json = json.dumps(values)
        prefix = task.prefixes[stream]
        ids = c._ids
        tasks = c.tasks
        dirty = c._dirty
        live_roots = [c.acker.roots[r] for r in roots if r in c.acker.roots] if roots else ()
        edge_id = c.acker.edge_id
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
        if refused is not None:
            c._supervisor.die(task, refused[1])

    def ack(self, task: TaskProcess, msg: dict) -> None:
        tuple_id = msg.get("id")
        if tuple_id not in task.inputs:  # ShellBolt.handleAck throws, and die() halts the worker
            self.c._supervisor.die(task, f"Acked a non-existent or already acked/failed id: {tuple_id}")
            return
        task.inputs.discard(tuple_id)
        task.acked += 1
        entry = task.inflight.pop(tuple_id, None)
        if entry is not None:
            for rec in self.c.acker.ack(entry[0], entry[1]):
                rec.spout.acked += 1
                self.to_spout(rec, "ack")

    def fail(self, task: TaskProcess, msg: dict) -> None:
        tuple_id = msg.get("id")
        if tuple_id not in task.inputs:  # ShellBolt.handleFail throws, and die() halts the worker
            self.c._supervisor.die(task, f"Failed a non-existent or already acked/failed id: {tuple_id}")
            return
        task.inputs.discard(tuple_id)
        task.failed += 1
        entry = task.inflight.pop(tuple_id, None)
        if entry is not None:
            for rec in self.c.acker.fail(entry[0]):
                rec.spout.failed += 1
                self.to_spout(rec, "fail")

    def log_message(self, task: TaskProcess, msg: dict) -> None:
        level = msg.get("level", 2)
        text = str(msg.get("msg", ""))
        logging.getLogger(f"keysplit.local.{task.name}").log(_LEVELS.get(level, logging.INFO), "[%s %d] %s",
                                                              task.name, task.task_id, text)
        log_dir = self.c.log_dir
        if log_dir is not None:
            if task.log_file is None:
                task.log_file = open(log_dir / f"{task.name}-{task.task_id}.log", "a", buffering=1)  # noqa: SIM115
            task.log_file.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {_LEVEL_NAMES.get(level, 'INFO')} "
                                f"pid={task.pid} {text}\n")

    def error(self, task: TaskProcess, msg: dict) -> None:
        task.errors += 1
        text = str(msg.get("msg", ""))
        self.c.errors.append((task.name, task.task_id, text))
        log.error("task %s[%d] reported an error: %s", task.name, task.index, text)
        log_dir = self.c.log_dir
        if log_dir is not None:
            with open(log_dir / f"{task.name}-{task.task_id}.log", "a") as f:
                f.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} ERROR pid={task.pid} {text}\n")

    # ---- to the spouts ------------------------------------------------------------------------------
    def to_spout(self, rec: RootRecord, command: str) -> None:
        """Send ``ack`` or ``fail`` for a finished tree to its spout task (counters are the caller's)."""
        spout: TaskProcess = rec.spout
        if not spout.alive:
            return
        spout.urgent.append(encode_spout_command(command, rec.msg_id))
        spout.sent_kinds.append(False)
        self.c._dirty.add(spout)
