"""The local runner's output collector and acker, without processes: what happens to an emitted tuple.

Each test builds the runner's layers for a small topology (the tasks, the shared state, the acker, the collector)
exactly as ``LocalCluster`` does, and plays the tasks' side by calling the collector as the executor would: the
copies in the targets' queues, the trees in the acker and the ``ack``/``fail`` sent to the spouts are Storm's
(``SpoutOutputCollectorImpl``, ``BoltOutputCollectorImpl``, ``Acker``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from streamparse import Grouping, Topology

from keysplit.local import TopologyError
from keysplit.local.acker import Acker
from keysplit.local.collector import OutputCollector, WorkerHalt
from keysplit.local.context import STORM_DEFAULTS, component_conf, read_topology
from keysplit.local.grouper import routers_for_task
from keysplit.local.protocol import tuple_prefix
from keysplit.local.serialization import KryoCheck
from keysplit.local.state import ClusterState
from keysplit.local.task import TaskProcess

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))

from local_components.bench import CountingSpout, FanoutBolt, PassBolt, SinkBolt  # noqa: E402
from local_components.comps import DirectBolt, NumberSpout, RecordBolt  # noqa: E402


class Chain(Topology):
    spout = CountingSpout.spec()
    passer = PassBolt.spec(inputs=[spout])
    sink = SinkBolt.spec(inputs=[passer], par=2)


class Wide(Topology):
    """Every sink task gets every fanout tuple: a tuple's copies cross workers when there are several."""

    spout = CountingSpout.spec()
    fanout = FanoutBolt.spec(inputs=[spout])
    sink = SinkBolt.spec(inputs={fanout: Grouping.ALL}, par=3)


class Direct(Topology):
    numbers = NumberSpout.spec()
    direct = DirectBolt.spec(inputs=[numbers])
    record = RecordBolt.spec(inputs={direct: Grouping.DIRECT}, par=2)


class Alone(Topology):
    spout = CountingSpout.spec()


def layers(topology: type, workers: int = 1, **conf: object) -> tuple[ClusterState, OutputCollector]:
    """The tasks, shared state and collector of ``topology``, built as ``LocalCluster`` builds them (tasks dealt
    round-robin to ``workers`` by task id, as the supervisor does); every task alive."""
    base = {**STORM_DEFAULTS, **conf}
    components = read_topology(topology)
    tasks = {}
    for comp in components.values():
        for index, tid in enumerate(comp.task_ids):
            task = TaskProcess(comp, index, tid, component_conf(base, comp), routers_for_task(components, comp, tid, 0))
            task.prefixes = {s: tuple_prefix(comp.name, s, tid) for s in comp.outputs}
            task.alive = True
            task.worker = (tid - 1) % workers
            tasks[tid] = task
    state = ClusterState(base, components, tasks, Acker(0), base.get("topology.acker.executors") != 0, workers, None)
    return state, OutputCollector(state, KryoCheck(base))


def task(state: ClusterState, name: str, index: int = 0) -> TaskProcess:
    return state.tasks[state.components[name].task_ids[index]]


def inputs(bolt: TaskProcess) -> list[tuple[str, list]]:
    """``(tuple id, values)`` of what was queued for ``bolt``, taken from its queue."""
    got = [json.loads(line[:-len("\nend\n")]) for line in bolt.queue]
    bolt.queue.clear()
    return [(t["id"], t["tuple"]) for t in got]


def spout_commands(spout: TaskProcess) -> list[tuple[str, object]]:
    """``(command, id)`` of the ``ack``/``fail`` commands queued for ``spout``, taken from it."""
    got = [json.loads(line[:-len("\nend\n")]) for line in spout.urgent]
    spout.urgent.clear()
    return [(m["command"], m["id"]) for m in got]


def emit_from_spout(collector: OutputCollector, spout: TaskProcess, values: list, msg_id: object) -> list[int]:
    targets = collector.route(spout, "default", values, None)
    collector.spout_emit(spout, "default", values, targets, msg_id)
    return targets


def emit_from_bolt(collector: OutputCollector, bolt: TaskProcess, values: list, anchors: list[str]) -> list[int]:
    targets = collector.route(bolt, "default", values, None)
    collector.bolt_emit(bolt, "default", values, targets, anchors)
    return targets


def answer(collector: OutputCollector, bolt: TaskProcess, tuple_id: str, command: str = "ack") -> None:
    """The bolt acks or fails an input, as the executor hands it on (after ShellBolt's checks)."""
    bolt.inputs.discard(tuple_id)
    (collector.ack if command == "ack" else collector.fail)(bolt, tuple_id)


# ---- the acker -------------------------------------------------------------------------------------------

def test_anchor_xors_one_fresh_edge_into_every_pending_root_and_ack_undoes_it():
    class Spout:
        pending = 0

    acker, spout = Acker(seed=5), Spout()
    a, b = acker.root(spout, "a", 10.0), acker.root(spout, "b", 10.0)
    edge = acker.anchor((a, b))  # a tuple descending from both trees
    assert edge is not None and spout.pending == 2 == len(acker)
    assert [r.msg_id for r in acker.ack((a, b), edge)] == ["a", "b"] and spout.pending == 0 == len(acker)


def test_anchor_draws_no_edge_for_trees_no_longer_pending():
    class Spout:
        pending = 0

    acker, twin, spout = Acker(seed=9), Acker(seed=9), Spout()
    gone = acker.root(spout, "gone", 10.0)
    assert [r.msg_id for r in acker.fail((gone,))] == ["gone"]
    assert acker.anchor((gone,)) is None  # nothing to track: no edge drawn, so the edge ids stay reproducible
    live = acker.root(spout, "live", 10.0)
    assert acker.anchor((gone, live)) == twin.anchor((twin.root(spout, "x", 10.0),))


# ---- routing ------------------------------------------------------------------------------------------------

def test_route_refuses_an_undeclared_stream_and_a_wrong_number_of_fields_without_counting_the_emit():
    state, collector = layers(Chain)
    spout = task(state, "spout")
    with pytest.raises(TopologyError, match="emitted on stream 'nope', which it does not declare"):
        collector.route(spout, "nope", [1], None)
    with pytest.raises(TopologyError, match=r"wrong number of fields\. Expected 1 fields"):
        collector.route(spout, "default", [1, 2], None)
    with pytest.raises(TopologyError, match="got no list"):
        collector.route(spout, "default", "1", None)
    assert spout.emitted == 0
    assert collector.route(spout, "default", [1], None) == [task(state, "passer").task_id] and spout.emitted == 1


def test_route_applies_storms_direct_grouping_rules():
    state, collector = layers(Direct)
    direct, record = task(state, "direct"), task(state, "record", 1)
    assert collector.route(direct, "default", [1, "k", 0], record.task_id) == [record.task_id]
    assert collector.route(direct, "default", [1, "k", 0], 999) == [] and direct.dropped == 1  # Storm drops it
    with pytest.raises(TopologyError, match="Cannot do regular emit to direct stream"):
        collector.route(direct, "default", [1, "k", 0], None)
    with pytest.raises(TopologyError, match="Cannot emitDirect to a task expecting a regular grouping"):
        collector.route(task(state, "numbers"), "default", [1, "k"], direct.task_id)


# ---- trees ----------------------------------------------------------------------------------------------------

def test_a_spout_tuple_is_acked_to_its_spout_once_every_descendant_is_acked():
    state, collector = layers(Chain)
    spout, passer = task(state, "spout"), task(state, "passer")
    emit_from_spout(collector, spout, [7], msg_id=7)
    [(tid, values)] = inputs(passer)
    assert values == [7] and tid in passer.inputs and spout.pending == 1 and passer in state.dirty
    [sink_task] = emit_from_bolt(collector, passer, [7], anchors=[tid])
    sink = state.tasks[sink_task]
    [(child, _)] = inputs(sink)
    answer(collector, passer, tid)
    assert spout_commands(spout) == [] and spout.pending == 1  # the child is still out
    answer(collector, sink, child)
    assert spout_commands(spout) == [("ack", 7)] and spout.acked == 1 and spout.pending == 0


def test_a_tuple_anchored_to_two_inputs_belongs_to_both_trees():
    state, collector = layers(Chain)
    spout, passer = task(state, "spout"), task(state, "passer")
    emit_from_spout(collector, spout, [1], msg_id="one")
    emit_from_spout(collector, spout, [2], msg_id="two")
    (first, _), (second, _) = inputs(passer)
    sink = state.tasks[emit_from_bolt(collector, passer, [3], anchors=[first, second])[0]]
    [(child, _)] = inputs(sink)
    answer(collector, passer, first)
    answer(collector, passer, second)
    assert spout.pending == 2
    answer(collector, sink, child, "fail")  # a failed descendant fails every tree it belongs to
    assert spout_commands(spout) == [("fail", "one"), ("fail", "two")] and spout.failed == 2 and spout.pending == 0


def test_a_spout_tuple_nobody_subscribes_to_is_acked_at_once():
    state, collector = layers(Alone)
    spout = task(state, "spout")
    assert emit_from_spout(collector, spout, [1], msg_id=1) == []
    assert spout_commands(spout) == [("ack", 1)] and spout.acked == 1 and len(state.acker) == 0


def test_without_ackers_a_spout_tuple_is_acked_as_it_is_emitted_and_nothing_is_tracked():
    state, collector = layers(Chain, **{"topology.acker.executors": 0})
    spout, passer = task(state, "spout"), task(state, "passer")
    emit_from_spout(collector, spout, [1], msg_id="m")
    assert spout_commands(spout) == [("ack", "m")] and spout.acked == 1 and len(state.acker) == 0
    [(tid, _)] = inputs(passer)
    assert passer.inflight == {} and tid in passer.inputs  # still an input ShellBolt waits an answer for


def test_a_copy_for_a_task_that_is_down_is_lost_and_its_tree_stays_pending_until_it_times_out():
    state, collector = layers(Chain)
    spout, passer = task(state, "spout"), task(state, "passer")
    passer.alive = False
    emit_from_spout(collector, spout, [1], msg_id=1)
    assert inputs(passer) == [] and spout.dropped == 1 and spout.transferred == 1 and spout.pending == 1
    [rec] = state.acker.expire(float("inf"))
    assert rec.msg_id == 1 and spout.pending == 0


# ---- Kryo between workers -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("sink_workers", "copies"), [((1, 0, 0), [0, 0, 0]), ((0, 0, 1), [1, 1, 0])])
def test_kryo_refusal_halts_the_sender_after_the_targets_before_it_got_their_copy(sink_workers, copies):
    state, collector = layers(Wide, workers=2)
    fanout = task(state, "fanout")
    sinks = [task(state, "sink", i) for i in range(3)]
    fanout.worker = 0
    for sink, worker in zip(sinks, sink_workers):
        sink.worker = worker
    targets = collector.route(fanout, "default", [[1], 0], None)
    assert targets == [s.task_id for s in sinks]  # all grouping: every sink task, in order
    with pytest.raises(WorkerHalt, match="Class is not registered: \\(a JSON array\\)"):
        collector.bolt_emit(fanout, "default", [[1], 0], targets, [])
    assert [len(inputs(s)) for s in sinks] == copies and fanout.transferred == sum(copies)
    collector.bolt_emit(fanout, "default", [1, 0], targets, [])  # scalars cross workers
    assert [len(inputs(s)) for s in sinks] == [1, 1, 1]
