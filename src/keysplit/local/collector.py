"""The output collector of :class:`~keysplit.local.cluster.LocalCluster`: what happens to a tuple a task emits.

Storm's ``ShellBolt.handleEmit`` is short because it hands the tuple to layers of their own (apache/storm
``storm-client/src/jvm/org/apache/storm/``): ``daemon/Task.java`` ``getOutgoingTasks`` checks the stream and
chooses the target tasks with the stream groupings; ``executor/spout/SpoutOutputCollectorImpl.java``
``sendSpoutMsg`` roots a spout tuple that has a message id in the acker (or, with no ackers, acks it at once);
``executor/bolt/BoltOutputCollectorImpl.java`` ``boltEmit`` gives each copy of an anchored tuple a fresh edge id
XORed into its roots' ledgers, and its ``ack``/``fail`` send the input's edge to the acker; ``ExecutorTransfer``
serializes with Kryo what goes to another worker and queues each copy for its target. :class:`OutputCollector`
is those layers for every task of the cluster, the emitting task given with each call:

- :meth:`~OutputCollector.route`: the stream and arity checks, and the target tasks (:mod:`.grouper`);
- :meth:`~OutputCollector.spout_emit` and :meth:`~OutputCollector.bolt_emit`: rooting or anchoring in the acker
  (:mod:`.acker`, which owns the ledgers), then :meth:`~OutputCollector.deliver`: the Kryo check
  (:mod:`.serialization`) and a copy in each target's input queue, stamped with a fresh tuple id;
- :meth:`~OutputCollector.ack` and :meth:`~OutputCollector.fail` of a bolt's input, and
  :meth:`~OutputCollector.to_spout`: the ``ack``/``fail`` of a finished tree to its spout.

What Storm treats as an error reaches the caller as an exception: :class:`~.context.TopologyError` for the
runtime errors that fail the run (an undeclared stream, a wrong number of fields, Storm's direct-grouping errors),
:class:`WorkerHalt` for those ShellBolt and ShellSpout die of, halting their worker (Kryo's refusal).
"""

from __future__ import annotations

import json
import logging
import time

from .acker import rotation_deadline
from .context import TopologyError, component_conf
from .grouper import RoutingError
from .protocol import encode_spout_command, encode_tuple
from .serialization import KryoCheck
from .state import ClusterState
from .task import TaskProcess

log = logging.getLogger("keysplit.local")


class WorkerHalt(Exception):
    """An error Storm's ShellBolt or ShellSpout dies of (``die``: the worker halts); the message is the reason."""


class OutputCollector:
    """Routes, tracks and delivers the tuples every task emits; see the module's docstring."""

    def __init__(self, state: ClusterState, kryo: KryoCheck) -> None:
        self.state = state
        self.acker = state.acker
        self._warned_drop: set[tuple[int, str]] = set()
        self._timeouts = {comp.name: float(component_conf(state.conf, comp)["topology.message.timeout.secs"])
                          for comp in state.components.values()}
        # None: no emit can be refused (a single worker, or Java serialization allowed)
        self._kryo = kryo if kryo.enabled and (state.n_workers > 1 or kryo.local_too) else None

    # ---- emitting ------------------------------------------------------------------------------------
    def route(self, task: TaskProcess, stream: str, values: object, direct: int | None) -> list[int]:
        """``Task.getOutgoingTasks``: the tasks that get ``values`` emitted by ``task`` on ``stream`` (to task
        ``direct`` for a direct emit), counting the emit; :class:`TopologyError` for an emit Storm rejects."""
        router = task.routers.get(stream)
        if router is None:
            raise TopologyError(
                f"{task.name!r} (task {task.task_id}) emitted on stream {stream!r}, which it does not declare "
                f"(declared: {sorted(task.routers)}); declare it in the component's outputs")
        if type(values) is not list or len(values) != router.n_fields:
            got = len(values) if type(values) is list else "no list"
            raise TopologyError(
                f"{task.name!r} (task {task.task_id}) emitted {str(values)[:200]} on stream {stream!r}: Tuple created "
                f"with wrong number of fields. Expected {router.n_fields} fields ({router.fields}) but got {got}")
        try:
            targets = router.route(values) if direct is None else router.route_direct(direct)
        except RoutingError as exc:
            raise TopologyError(f"Storm runtime error in {task.name!r} (task {task.task_id}): {exc}") from None
        task.emitted += 1
        if direct is not None and not targets:
            task.dropped += 1
            if (task.task_id, stream) not in self._warned_drop:
                self._warned_drop.add((task.task_id, stream))
                log.warning("%s (task %d) emitted directly to task %s, which does not subscribe to stream %r; "
                            "dropped (as Storm does)", task.name, task.task_id, direct, stream)
        return targets

    def spout_emit(self, task: TaskProcess, stream: str, values: list, targets: list[int], msg_id: object) -> None:
        """``SpoutOutputCollectorImpl.sendSpoutMsg``: a spout tuple with a message id roots a new tree (acked at
        once when nobody subscribes); with no ackers (``topology.acker.executors = 0``) Storm acks it as soon as it
        is emitted. Then :meth:`deliver`."""
        task.emits_since_next += 1  # the pacing's measure of emits per ``next`` call
        roots: tuple[int, ...] = ()
        if msg_id is not None:
            if self.state.acking:
                deadline = rotation_deadline(time.monotonic(), task.started_at, self._timeouts[task.name])
                root = self.acker.root(task, msg_id, deadline)
                if not targets:
                    done = self.acker.complete_if_done(root)
                    if done is not None:
                        task.tree_completed(done.emitted)
                        self.to_spout(task, "ack", msg_id)
                    return
                roots = (root,)
            else:
                task.acked += 1
                self.to_spout(task, "ack", msg_id)
        if targets:
            self.deliver(task, stream, values, targets, roots)

    def bolt_emit(self, task: TaskProcess, stream: str, values: list, targets: list[int], anchors: list[str]) -> None:
        """``BoltOutputCollectorImpl.boltEmit``: the tuple belongs to every tree its anchors (inputs still pending,
        ShellBolt checked) belong to. Then :meth:`deliver`."""
        if not targets:
            return
        roots: tuple[int, ...] = ()
        if anchors and self.state.acking:
            inflight = task.inflight
            if len(anchors) == 1:
                entry = inflight.get(anchors[0])
                if entry is not None:
                    roots = entry[0]
            else:
                found: dict[int, None] = {}  # the union of the anchors' roots, in order
                for anchor in anchors:
                    entry = inflight.get(anchor)
                    if entry is not None:
                        found.update(dict.fromkeys(entry[0]))
                roots = tuple(found)
        self.deliver(task, stream, values, targets, roots)

    def deliver(self, task: TaskProcess, stream: str, values: list, targets: list[int],
                roots: tuple[int, ...]) -> None:
        """A copy of ``values`` for each of ``targets`` (their input queues), each copy a new edge of the trees
        ``roots`` (:meth:`.Acker.anchor`). A copy to a task that is down is lost (its edge never acked: the trees
        time out). :class:`WorkerHalt` once Kryo refuses a transfer, the targets before it having their copy."""
        state = self.state
        tasks = state.tasks
        # Kryo serializes what goes to another worker: a value it refuses halts this worker, after the
        # targets before that transfer got their copy (serialization.py)
        kryo = self._kryo
        refused = (kryo.failure(task, stream, task.routers[stream].fields, values, targets, tasks)
                   if kryo is not None else None)
        if refused is not None:
            targets = targets[:refused[0]]
        values_json = json.dumps(values)
        prefix = task.prefixes[stream]
        ids = state.ids
        dirty = state.dirty
        anchor = self.acker.anchor if roots else None
        for target_id in targets:
            target = tasks[target_id]
            edge = anchor(roots) if anchor is not None else None
            if not target.alive:
                task.dropped += 1  # the target's worker is down: Storm loses the tuple, its tree times out
                continue
            tid = str(next(ids))
            target.inputs.add(tid)
            if edge is not None:
                target.inflight[tid] = (roots, edge)
            target.queue.append(encode_tuple(tid, prefix, values_json))
            target.executed += 1
            dirty.add(target)
        task.transferred += len(targets)
        if refused is not None:
            raise WorkerHalt(refused[1])

    # ---- a bolt's answers, and the spouts' ----------------------------------------------------------
    def ack(self, task: TaskProcess, tuple_id: str) -> None:
        """``BoltOutputCollectorImpl.ack``: the input's edge goes back to the acker; the trees it completes are
        acked to their spouts."""
        entry = task.inflight.pop(tuple_id, None)
        if entry is not None:
            for rec in self.acker.ack(entry[0], entry[1]):
                rec.spout.tree_completed(rec.emitted)
                self.to_spout(rec.spout, "ack", rec.msg_id)

    def fail(self, task: TaskProcess, tuple_id: str) -> None:
        """``BoltOutputCollectorImpl.fail``: the input's trees fail, and their spouts are told."""
        entry = task.inflight.pop(tuple_id, None)
        if entry is not None:
            for rec in self.acker.fail(entry[0]):
                rec.spout.failed += 1
                self.to_spout(rec.spout, "fail", rec.msg_id)

    def to_spout(self, spout: TaskProcess, command: str, msg_id: object) -> None:
        """Send ``ack`` or ``fail`` of the tree of ``msg_id`` to its spout task (counters are the caller's)."""
        if not spout.alive:
            return
        spout.urgent.append(encode_spout_command(command, msg_id))
        spout.sent_kinds.append(False)
        self.state.dirty.add(spout)
