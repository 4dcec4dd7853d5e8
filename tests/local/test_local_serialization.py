"""Storm's inter-worker Kryo serialization in the local runner (keysplit/local/serialization.py).

Real streamparse components over the multi-lang protocol, two worker processes. Tasks are numbered in the sorted
order of the component names and dealt to the workers by task id (worker = (id - 1) mod 2), so the names choose
the layout: ``collect`` (1, worker 0), ``pack`` (2, worker 1), ``source`` (3, worker 0) puts the emitting bolt
alone in worker 1 and its consumer in worker 0; ``collect`` (1, worker 0), ``numbers`` (2, worker 1), ``pack``
(3, worker 0) puts the emitting bolt in its consumer's worker.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamparse import Topology

from keysplit.local import LocalCluster, TopologyError
from keysplit.local.serialization import ALWAYS_TRY, FALL_BACK, KryoCheck, unregistered_class

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))

from local_components.comps import VALUES, JsonRecordBolt, NumberSpout, ValueBolt  # noqa: E402

N = 30
BAD_AT = 5


def cross_worker(pack_config: dict) -> type:
    """``pack`` alone in worker 1, emitting to ``collect`` in worker 0."""
    class T(Topology):
        source = NumberSpout.spec(par=1)
        pack = ValueBolt.spec(inputs=[source], par=1, config=pack_config)
        collect = JsonRecordBolt.spec(inputs=[pack], par=1)
    return T


def same_worker(pack_config: dict) -> type:
    """``pack`` and ``collect`` both in worker 0, the spout ``numbers`` in worker 1."""
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        pack = ValueBolt.spec(inputs=[numbers], par=1, config=pack_config)
        collect = JsonRecordBolt.spec(inputs=[pack], par=1)
    return T


def spout_events(out: Path) -> list[tuple[str, int]]:
    return [(p[0], int(p[1])) for path in sorted(out.glob("spout-*.log"))
            for p in (line.split() for line in path.read_text().splitlines())]


def acked(out: Path) -> collections.Counter:
    return collections.Counter(n for event, n in spout_events(out) if event == "ack")


def collected(out: Path) -> list[list]:
    """Every tuple ``collect`` received, as the JSON values it got."""
    return [json.loads(line) for path in out.glob("jrecord-*.log") for line in path.read_text().splitlines()]


def run(topology: type, out: Path, **conf) -> tuple[dict, dict, list, dict[str, int]]:
    """Run until the spout has acked ``N`` distinct tuples; return the stats, the summary, the error records and
    each component's worker."""
    conf = {"test.out": str(out), "test.n": N, "topology.workers": 2, "topology.message.timeout.secs": 2,
            "topology.max.spout.pending": 10, "keysplit.local.restart.delay.secs": 0.2, **conf}
    with LocalCluster(topology, conf, cwd=str(ROOT), env={"PYTHONPATH": str(TESTS)}) as cluster:
        assert cluster.run_until(lambda: len(acked(out)) >= N, timeout=30, poll=0.05), cluster.stats()
        stats, summary = cluster.stats(), cluster.summary()
        workers = {name: cluster.tasks[cluster.task_ids(name)[0]].worker for name in cluster.components}
        return stats, summary, list(cluster.errors), workers


def assert_all_acked_once(out: Path) -> None:
    counts = acked(out)
    assert sorted(counts) == list(range(N)) and set(counts.values()) == {1}, counts


@pytest.mark.parametrize(("kind", "klass"), [("list", "(a JSON array)"), ("dict", "(a JSON object)"),
                                             ("long_float", "java.math.BigDecimal")])
def test_a_value_kryo_cannot_write_halts_the_sending_worker_across_workers(tmp_path, kind, klass):
    stats, summary, errors, workers = run(cross_worker({"test.value": kind, "test.bad_at": BAD_AT}), tmp_path)
    assert workers == {"collect": 0, "pack": 1, "source": 0}
    bad = json.dumps(VALUES[kind](BAD_AT, f"k{BAD_AT % 7}"))
    assert len(errors) == 1, errors
    name, task_id, message = errors[0]
    assert (name, task_id) == ("pack", 2)
    assert message.startswith(f"java.lang.IllegalArgumentException: Class is not registered: {klass} {bad}, "
                              "field 'value' of a tuple 'pack' (task 2, worker 1) emitted on stream 'default' to "
                              "task 1 (worker 0)"), message
    # the worker died once (pack's own death) and the supervisor restarted it; the other worker kept running
    assert summary["worker_restarts"] == 1 and summary["task_deaths"] == 1
    assert stats["pack"]["deaths"] == 1 and stats["pack"]["restarts"] == 1
    assert stats["collect"]["restarts"] == 0 and stats["source"]["restarts"] == 0
    # the tuple was lost: its tree timed out, the spout replayed it, and the replay went through
    assert stats["source"]["timed_out"] >= 1 and ("fail", BAD_AT) in spout_events(tmp_path)
    assert_all_acked_once(tmp_path)
    got = collected(tmp_path)
    assert all(type(value) is int for _, _, value in got), "nothing Kryo refused reached the other worker"
    assert sorted({n for n, _, _ in got}) == list(range(N))


def test_a_bolt_that_always_emits_a_list_across_workers_is_a_crash_loop_that_names_the_error(tmp_path):
    # the spout replays what the dead worker lost after a 1 s timeout, and each replay kills the worker again
    conf = {"test.out": str(tmp_path), "test.n": 1000, "topology.workers": 2, "keysplit.local.max.restarts": 2,
            "keysplit.local.restart.delay.secs": 0.1, "topology.message.timeout.secs": 1,
            "topology.max.spout.pending": 20}
    with LocalCluster(cross_worker({"test.value": "list"}), conf, cwd=str(ROOT), env={"PYTHONPATH": str(TESTS)}
                      ) as cluster, pytest.raises(TopologyError) as err:
        cluster.run_until(lambda: False, timeout=30)
    assert "task pack[0] (local_components.comps.ValueBolt) keeps dying: restarted 2 times" in str(err.value)
    assert "last error: java.lang.IllegalArgumentException: Class is not registered: (a JSON array)" in str(err.value)


def test_java_serialization_fallback_lets_lists_cross_workers(tmp_path):
    stats, summary, errors, workers = run(cross_worker({"test.value": "list"}), tmp_path, **{FALL_BACK: True})
    assert workers["pack"] != workers["collect"]
    assert errors == [] and summary["worker_restarts"] == 0 and stats["source"]["timed_out"] == 0
    assert_all_acked_once(tmp_path)
    assert sorted(map(tuple, (v[:2] for v in collected(tmp_path)))) == [(n, f"k{n % 7}") for n in range(N)]
    assert all(value == [n, key] for n, key, value in collected(tmp_path)), "the lists arrived whole"


def test_same_worker_emits_are_not_serialized(tmp_path):
    stats, summary, errors, workers = run(same_worker({"test.value": "list"}), tmp_path)
    assert workers == {"collect": 0, "numbers": 1, "pack": 0}
    assert errors == [] and summary["worker_restarts"] == 0 and stats["numbers"]["timed_out"] == 0
    assert_all_acked_once(tmp_path)
    got = collected(tmp_path)
    assert len(got) == N and all(value == [n, key] for n, key, value in got)


def test_always_try_serialize_checks_same_worker_emits_too(tmp_path):
    stats, summary, errors, workers = run(same_worker({"test.value": "dict", "test.bad_at": BAD_AT}), tmp_path,
                                          **{ALWAYS_TRY: True})
    assert workers["pack"] == workers["collect"]
    assert len(errors) == 1 and errors[0][0] == "pack", errors
    assert "Class is not registered: (a JSON object)" in errors[0][2]
    assert f"in the same worker ({ALWAYS_TRY} is true)" in errors[0][2]
    # pack's worker is collect's too: both went down and came back
    assert summary["worker_restarts"] == 1 and stats["pack"]["deaths"] == 1 and stats["collect"]["restarts"] == 1
    assert stats["numbers"]["restarts"] == 0
    assert_all_acked_once(tmp_path)


def test_scalars_cross_workers(tmp_path):
    stats, summary, errors, workers = run(cross_worker({"test.value": "scalars"}), tmp_path)
    assert workers["pack"] != workers["collect"]
    assert errors == [] and summary["worker_restarts"] == 0 and stats["source"]["timed_out"] == 0
    assert_all_acked_once(tmp_path)
    got = {n: value for n, _, value in collected(tmp_path)}
    assert got == {n: VALUES["scalars"](n, f"k{n % 7}") for n in range(N)}
    kinds = {type(v) for v in got.values()}
    assert kinds == {str, int, float, bool, type(None)} and any(v > 2 ** 63 for v in got.values()
                                                                 if type(v) is int)


# ---- the rules, without processes --------------------------------------------------------------------------

def test_which_values_kryo_cannot_write():
    for value in ("word", "", 7, -(2 ** 40), 2 ** 70, 0.25, 1e-05, -1.5e300, 0.1 + 0.1, True, None,
                  float("nan"), float("inf")):
        assert unregistered_class(value) is None, value
    assert unregistered_class([1]) == unregistered_class([]) == "(a JSON array)"
    assert unregistered_class({"a": [1]}) == "(a JSON object)"
    for value in (0.1 + 0.2, -1 / 3, 1 / 3 * 1e-7):  # repr longer than 18 characters
        assert len(repr(value)) > 18 and unregistered_class(value) == "java.math.BigDecimal", value


def test_the_first_cross_worker_target_is_where_kryo_fails():
    tasks = {t: SimpleNamespace(worker=w, name=f"c{t}", task_id=t) for t, w in ((1, 0), (2, 1), (3, 0), (4, 1))}
    kryo = KryoCheck({})
    sender = tasks[1]
    assert kryo.failure(sender, "s", ["a", "b"], ["x", 1], [3, 2, 4], tasks) is None, "scalars pass"
    assert kryo.failure(sender, "s", ["a", "b"], ["x", [1]], [3], tasks) is None, "same worker: not serialized"
    index, message = kryo.failure(sender, "s", ["a", "b"], ["x", [1]], [3, 4, 2], tasks)
    assert index == 1 and "field 'b'" in message and "to task 4 (worker 1)" in message
    assert KryoCheck({FALL_BACK: True}).failure(sender, "s", ["a"], [[1]], [2], tasks) is None
    assert KryoCheck({ALWAYS_TRY: True}).failure(sender, "s", ["a"], [[1]], [3], tasks)[0] == 0
    with pytest.raises(TopologyError, match=f"{FALL_BACK} must be true or false, got 'yes'"):
        KryoCheck({FALL_BACK: "yes"})
