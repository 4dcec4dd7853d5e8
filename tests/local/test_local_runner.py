"""The local runner runs real streamparse components over Storm's multi-lang protocol with Storm's semantics.

Every cluster test starts real subprocesses (``python -m streamparse.run local_components.comps.X``) and
checks what they wrote to their own log files: the spout's acks and fails, the tuples each bolt task got.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest
from streamparse import Grouping, Topology

from keysplit.javahash import choose_task_index
from keysplit.local import LocalCluster, TopologyError
from keysplit.local.acker import Acker, rotation_deadline
from keysplit.local.grouper import FieldsGrouper, ShuffleGrouper
from keysplit.local.protocol import MessageReader, encode

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))

from local_components.comps import (  # noqa: E402
    CrashOnceBolt,
    DirectBolt,
    NumberSpout,
    PlainBolt,
    RecordBolt,
    SplitBolt,
)


def run(topology: type, out: Path, n: int, timeout: float = 60, extra_env: dict | None = None, **conf):
    """Run ``topology`` until its spout ``numbers`` has acked ``n`` distinct tuples; return the cluster stats."""
    conf = {"test.out": str(out), "test.n": n, **conf}
    cluster = LocalCluster(topology, conf, cwd=str(ROOT), log_dir=str(out / "logs"),
                           env={"PYTHONPATH": str(TESTS), **(extra_env or {})})
    with cluster:
        assert cluster.run_until(lambda: len(acked(out)) >= n, timeout=timeout, poll=0.05), cluster.stats()
        return cluster.stats(), cluster


def spout_events(out: Path) -> list[tuple[str, int, int]]:
    """``(event, n, inflight)`` lines of every spout task, in order per task."""
    events = []
    for path in sorted(out.glob("spout-*.log")):
        for line in path.read_text().splitlines():
            parts = line.split()
            events.append((parts[0], int(parts[1]), int(parts[2]) if len(parts) > 2 else 0))
    return events


def acked(out: Path) -> collections.Counter:
    return collections.Counter(n for event, n, _ in spout_events(out) if event == "ack")


def received(out: Path) -> dict[int, list[tuple[int, str, int]]]:
    """Per record-bolt task id: the ``(n, key, part)`` tuples it received."""
    got: dict[int, list[tuple[int, str, int]]] = {}
    for path in out.glob("record-*.log"):
        task = int(path.stem.split("-")[1])
        got[task] = [(int(p[1]), p[2], int(p[3])) for p in (line.split() for line in path.read_text().splitlines())
                     if p[0] == "tuple"]
    return got


def assert_all_acked_once(out: Path, n: int) -> None:
    counts = acked(out)
    assert sorted(counts) == list(range(n)), "every spout tuple is acked"
    assert set(counts.values()) == {1}, "and acked exactly once"


@pytest.mark.parametrize("grouping", ["shuffle", "fields", "global", "all"])
def test_every_tuple_acked_once_through_a_grouping(tmp_path, grouping):
    g = {"shuffle": Grouping.SHUFFLE, "fields": Grouping.fields("key"), "global": Grouping.GLOBAL,
         "all": Grouping.ALL}[grouping]

    class T(Topology):
        numbers = NumberSpout.spec(par=2)
        split = SplitBolt.spec(inputs=[numbers], par=2, config={"test.fanout": 2})
        record = RecordBolt.spec(inputs={split: g}, par=3)

    n = 300
    stats, cluster = run(T, tmp_path, n, **{"topology.max.spout.pending": 40})
    assert_all_acked_once(tmp_path, n)
    got = received(tmp_path)
    record_tasks = cluster.task_ids("record")
    assert sorted(got) == record_tasks
    expected = sorted((i, f"k{i % 7}", part) for i in range(n) for part in range(2))
    if grouping == "all":
        for task in record_tasks:
            assert sorted(got[task]) == expected, "all grouping replicates the stream to every task"
    else:
        assert sorted(t for tuples in got.values() for t in tuples) == expected, "each tuple delivered once"
    if grouping == "global":
        assert len(got[min(record_tasks)]) == len(expected), "global grouping: the lowest task id gets everything"
    if grouping == "fields":
        owners = collections.defaultdict(set)
        for task, tuples in got.items():
            for _, key, _ in tuples:
                owners[key].add(task)
        assert all(len(tasks) == 1 for tasks in owners.values()), "equal fields go to the same task"
        assert len({next(iter(t)) for t in owners.values()}) > 1, "different keys spread over tasks"
    if grouping == "shuffle":
        loads = [len(got[t]) for t in record_tasks]
        assert max(loads) - min(loads) <= 4, f"shuffle is round-robin per emitter: {loads}"
    assert stats["numbers"]["acked"] == n and stats["numbers"]["failed"] == 0
    assert stats["record"]["restarts"] == 0, "heartbeats answered: nobody is restarted"
    assert stats["split"]["transferred"] == 2 * n * (3 if grouping == "all" else 1)


def test_direct_grouping_delivers_to_the_chosen_task(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        router = DirectBolt.spec(inputs=[numbers], par=2, config={"test.direct_to": "record"})
        record = RecordBolt.spec(inputs=[router], par=3)  # streamparse subscribes to a direct stream with DIRECT

    n = 200
    _, cluster = run(T, tmp_path, n)
    assert_all_acked_once(tmp_path, n)
    tasks = cluster.task_ids("record")
    for task, tuples in received(tmp_path).items():
        assert tuples and all(tasks[i % 3] == task for i, _, _ in tuples), "each tuple at the task named by the emit"


def test_need_task_ids_reply_names_the_receiving_task(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        plain = PlainBolt.spec(inputs=[numbers], par=1)
        record = RecordBolt.spec(inputs=[plain], par=3)

    n = 150
    run(T, tmp_path, n)
    reported = {}
    for line in next(tmp_path.glob("plain-*.log")).read_text().splitlines():
        _, i, *tasks = line.split()
        reported[int(i)] = [int(t) for t in tasks]
    where = {i: task for task, tuples in received(tmp_path).items() for i, _, _ in tuples}
    assert len(reported) == n and all(reported[i] == [where[i]] for i in range(n))


def test_max_spout_pending_bounds_the_tuples_in_flight(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        record = RecordBolt.spec(inputs=[numbers], par=1, config={"test.sleep": 0.002})

    n = 200
    run(T, tmp_path, n, **{"topology.max.spout.pending": 5})
    assert_all_acked_once(tmp_path, n)
    inflight = [k for event, _, k in spout_events(tmp_path) if event == "emit"]
    assert max(inflight) == 5, "the spout waits for acks once 5 trees are pending, and the bound is reached"


def test_max_spout_pending_with_a_spout_emitting_several_tuples_per_call(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1, config={"test.per_call": 3})
        record = RecordBolt.spec(inputs=[numbers], par=1, config={"test.sleep": 0.002})

    n = 210
    run(T, tmp_path, n, **{"topology.max.spout.pending": 6})
    assert_all_acked_once(tmp_path, n)
    inflight = [k for event, _, k in spout_events(tmp_path) if event == "emit"]
    assert 6 <= max(inflight) <= 6 - 1 + 3, "Storm's bound: nextTuple is called only while pending < limit"


def test_tick_tuples_drive_a_bolt_that_acks_on_flush(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        record = RecordBolt.spec(inputs=[numbers], par=2,
                                 config={"test.hold": True, "topology.tick.tuple.freq.secs": 1})

    n = 100
    run(T, tmp_path, n, timeout=30)
    assert_all_acked_once(tmp_path, n)
    ticks = [line.split() for p in tmp_path.glob("record-*.log") for line in p.read_text().splitlines()
             if line.startswith("tick")]
    assert ticks and all(t[2] == "1" for t in ticks), "tick tuples from __system/__tick carry the frequency"
    assert sum(int(t[1]) for t in ticks) == n, "every held tuple was acked at a tick"


def test_acking_disabled_acks_spout_tuples_at_emit(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        record = RecordBolt.spec(inputs=[numbers], par=1, config={"test.hold": True})  # never acks

    n = 100
    stats, _ = run(T, tmp_path, n, **{"topology.acker.executors": 0})
    assert_all_acked_once(tmp_path, n)
    assert stats["numbers"]["pending"] == 0


def test_killed_task_is_restarted_and_its_tuples_replayed(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        record = RecordBolt.spec(inputs=[numbers], par=2, config={"test.sleep": 0.003})

    n = 400
    # two workers, tasks dealt by task id as Storm's EvenScheduler does: numbers(1) and record[1](3) in worker 0,
    # record[0](2) alone in worker 1, so killing record[0] leaves the spout running and its trees time out
    conf = {"test.out": str(tmp_path), "test.n": n, "topology.max.spout.pending": 60,
            "topology.message.timeout.secs": 2, "topology.workers": 2}
    with LocalCluster(T, conf, cwd=str(ROOT), env={"PYTHONPATH": str(TESTS)}) as cluster:
        assert cluster.run_until(lambda: len(acked(tmp_path)) >= 100, timeout=30, poll=0.02)
        old_pid = cluster.stats()["record"]["tasks"][cluster.task_ids("record")[0]]["pid"]
        cluster.kill_task("record", 0)
        assert cluster.run_until(lambda: len(acked(tmp_path)) >= n, timeout=60, poll=0.05)
        stats = cluster.stats()
        summary = cluster.summary()
    task = stats["record"]["tasks"][cluster.task_ids("record")[0]]
    assert task["restarts"] == 1 and task["pid"] != old_pid, "the supervisor restarted the killed task"
    assert stats["record"]["tasks"][cluster.task_ids("record")[1]]["restarts"] == 0, "the other worker kept running"
    assert stats["numbers"]["restarts"] == 0
    assert summary["worker_restarts"] == 1 and summary["task_deaths"] == 1 and summary["workers"] == 2
    assert stats["numbers"]["timed_out"] > 0, "tuples in flight through the dead task timed out"
    fails = [i for event, i, _ in spout_events(tmp_path) if event == "fail"]
    assert fails and len(fails) == stats["numbers"]["timed_out"] + stats["numbers"]["failed"]
    assert_all_acked_once(tmp_path, n)  # ... and were replayed by the spout until acked


def test_a_dying_task_takes_its_whole_worker_down_and_the_worker_restarts(tmp_path):
    """One worker (Storm's default topology.workers): a killed bolt takes the spout and the other bolt with it,
    as ShellBolt.die's System.exit halts the JVM; the supervisor restarts all three once."""
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        record = RecordBolt.spec(inputs=[numbers], par=2)

    conf = {"test.out": str(tmp_path), "test.n": 100000, "keysplit.local.restart.delay.secs": 0.2}
    with LocalCluster(T, conf, cwd=str(ROOT), env={"PYTHONPATH": str(TESTS)}) as cluster:
        assert cluster.run_until(lambda: len(acked(tmp_path)) >= 20, timeout=30, poll=0.02)
        pids = {tid: c["pid"] for comp in ("numbers", "record") for tid, c in cluster.stats()[comp]["tasks"].items()}
        cluster.kill_task("record", 1)
        assert cluster.run_until(lambda: all(t.ready for t in cluster.tasks.values())
                                 and cluster.summary()["worker_restarts"] == 1, timeout=30, poll=0.05)
        stats = cluster.stats()
        summary = cluster.summary()
    after = {tid: c["pid"] for comp in ("numbers", "record") for tid, c in stats[comp]["tasks"].items()}
    assert all(after[t] != pids[t] for t in pids), "every task of the worker is a new process"
    assert stats["numbers"]["restarts"] == 1 and stats["record"]["restarts"] == 2
    assert summary == {"workers": 1, "worker_restarts": 1, "task_deaths": 1, "task_restarts": 3,
                       "unacked_inputs": summary["unacked_inputs"]}
    assert stats["record"]["deaths"] == 1 and stats["numbers"]["deaths"] == 0


def test_crashing_bolt_fails_its_tuple_reports_the_error_and_restarts(tmp_path, caplog):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        crashy = CrashOnceBolt.spec(inputs=[numbers], par=1, config={"test.crash_at": 50})
        record = RecordBolt.spec(inputs=[crashy], par=1)

    n = 150
    # one worker per task (3 workers, dealt by task id): the crash takes down crashy's worker only
    stats, cluster = run(T, tmp_path, n, **{"topology.message.timeout.secs": 2, "topology.max.spout.pending": 20,
                                            "topology.workers": 3})
    assert_all_acked_once(tmp_path, n)
    assert stats["crashy"]["restarts"] == 1 and stats["crashy"]["errors"] == 1
    assert any("deliberate crash on tuple 50" in msg for _, _, msg in cluster.errors)
    assert 50 in [i for event, i, _ in spout_events(tmp_path) if event == "fail"], "the failing tuple is failed"
    assert "deliberate crash" in next((tmp_path / "logs").glob("crashy-*.log")).read_text()
    # the terminal reads one line a report and a death, the exception named; the traceback stays in the logs
    said = [r.getMessage() for r in caplog.records if r.name.startswith("keysplit.local")]
    crash = [m for m in said if "crashy[0]" in m]
    assert crash and all("\n" not in m and "Traceback" not in m for m in crash), crash
    assert any("reported an error: Python " in m and "deliberate crash on tuple 50 (the whole report: " in m
               for m in crash), crash


def test_hung_bolt_misses_heartbeats_and_is_restarted(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        record = RecordBolt.spec(inputs=[numbers], par=1,
                                 config={"test.hang_at": 30, "topology.subprocess.timeout.secs": 2.5})

    n = 100
    stats, _ = run(T, tmp_path, n, timeout=40, **{"topology.message.timeout.secs": 3,
                                                  "topology.max.spout.pending": 10, "topology.workers": 2})
    assert (tmp_path / "hung").exists()
    assert stats["record"]["restarts"] == 1, "killed for missing heartbeats, then restarted"
    assert stats["numbers"]["timed_out"] >= 1
    assert_all_acked_once(tmp_path, n)


def test_direct_emit_to_a_regular_subscription_is_storms_error(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        router = DirectBolt.spec(inputs=[numbers], par=1, config={"test.direct_to": "record"})
        record = RecordBolt.spec(inputs={router["default"]: Grouping.SHUFFLE}, par=2)

    with pytest.raises(TopologyError, match=r"Cannot emitDirect to a task expecting a regular grouping.*'router'"):
        run(T, tmp_path, 10, timeout=20)


def test_regular_emit_to_a_direct_subscription_is_storms_error(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        plain = PlainBolt.spec(inputs=[numbers], par=1)
        record = RecordBolt.spec(inputs={plain["default"]: Grouping.DIRECT}, par=2)

    with pytest.raises(TopologyError, match=r"Cannot do regular emit to direct stream.*'plain'"):
        run(T, tmp_path, 10, timeout=20)


def test_component_that_fails_to_import_is_a_clear_startup_error(tmp_path):
    from local_components.missing import UnimportableBolt

    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        broken = UnimportableBolt.spec(inputs=[numbers], par=1)

    with pytest.raises(TopologyError) as err:
        run(T, tmp_path, 1, extra_env={"KEYSPLIT_TEST_BREAK_IMPORT": "1"})
    message = str(err.value)
    assert "\n" not in message, "one line"
    assert "'broken'" in message and "local_components.missing.UnimportableBolt" in message
    assert "No module named 'keysplit_no_such_dependency'" in message
    assert "local_components/missing.py" in err.value.detail, "the traceback from its stderr comes with the error"


def test_crash_loop_on_restart_gives_up_with_a_clear_error(tmp_path):
    from local_components.missing import UnimportableBolt

    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        broken = UnimportableBolt.spec(inputs=[numbers], par=1)

    marker = tmp_path / "break-now"
    conf = {"test.out": str(tmp_path), "test.n": 10, "keysplit.local.max.restarts": 2,
            "keysplit.local.restart.delay.secs": 0.1}
    with LocalCluster(T, conf, cwd=str(ROOT), env={"PYTHONPATH": str(TESTS), "KEYSPLIT_TEST_BREAK_IF": str(marker)}
                      ) as cluster:
        marker.touch()  # from now on the component cannot be imported: every restart fails
        cluster.kill_task("broken")
        with pytest.raises(TopologyError, match=r"broken\[0\].*keeps dying: restarted 2 times.*No module named"):
            cluster.run_until(lambda: False, timeout=30)
        assert cluster.stats()["broken"]["restarts"] == 3


def test_context_numbers_tasks_like_storm():
    class T(Topology):
        numbers = NumberSpout.spec(par=2)
        record = RecordBolt.spec(inputs=[numbers], par=3)

    cluster = LocalCluster(T, {}, cwd=str(ROOT))
    assert cluster.task_ids("numbers") == [1, 2] and cluster.task_ids("record") == [3, 4, 5]
    with pytest.raises(TopologyError, match="no component 'nope'"):
        cluster.task_ids("nope")
    cluster.shutdown()


# ---- the pieces, without processes ----------------------------------------------------------------------

def test_xor_ledger_completes_only_when_every_edge_is_acked():
    class Spout:
        pending = 0

    acker, spout = Acker(seed=1), Spout()
    root = acker.root(spout, "m1", deadline=10.0)
    edges = [acker.anchor((root,)) for _ in range(3)]  # the spout tuple goes to 3 tasks
    assert acker.ack((root,), edges[0]) == [] and acker.ack((root,), edges[2]) == []
    child = acker.anchor((root,))  # a bolt emits a child anchored to the last edge before acking it
    assert acker.ack((root,), edges[1]) == []
    assert [r.msg_id for r in acker.ack((root,), child)] == ["m1"] and spout.pending == 0


def test_message_timeout_expires_pending_trees_only():
    class Spout:
        pending = 0

    acker, spout = Acker(seed=2), Spout()
    a = acker.root(spout, "a", deadline=1.0)
    edge_a = acker.anchor((a,))
    b = acker.root(spout, "b", deadline=2.0)
    acker.anchor((b,))
    acker.ack((a,), edge_a)
    assert acker.expire(1.5) == [] and [r.msg_id for r in acker.expire(2.0)] == ["b"] and spout.pending == 0


def test_a_tree_times_out_at_the_second_rotation_of_its_spouts_pending_map():
    # Storm's spout executor fails a tree when the second rotation (every message timeout, from the executor's
    # start) after its emit drops it: between T and 2T after the emit, at each executor's own phase
    class Spout:
        pending = 0

    acker, early, late = Acker(seed=3), Spout(), Spout()
    emits = {"e1": (early, 0.0, 0.5), "e2": (early, 0.0, 2.9), "l1": (late, 1.0, 1.5), "l2": (late, 1.0, 4.5)}
    for msg_id, (spout, origin, t) in emits.items():
        deadline = rotation_deadline(t, origin, 3.0)
        assert 3.0 < deadline - t <= 6.0
        acker.root(spout, msg_id, deadline)
    assert [r.msg_id for r in acker.expire(6.0)] == ["e1", "e2"]  # the early spout rotates at 3 and 6
    assert [r.msg_id for r in acker.expire(7.0)] == ["l1"]  # the late one at 4 and 7 (l2 waits for 10)
    assert acker.next_deadline() == 10.0 and early.pending == late.pending - 1 == 0


def test_fields_hash_is_deterministic_and_spreads():
    grouper = FieldsGrouper([10, 11, 12, 13], [1])
    picks = {w: grouper.choose([0, w]) for w in (f"w{i}" for i in range(400))}
    assert all(grouper.choose([9, w]) == t for w, t in picks.items()), "same field, same task"
    counts = collections.Counter(t[0] for t in picks.values())
    assert set(counts) == {10, 11, 12, 13} and min(counts.values()) > 60
    assert choose_task_index(["a", 1], 5) == choose_task_index(["a", 1], 5)


def test_shuffle_is_even_per_cycle():
    grouper = ShuffleGrouper([1, 2, 3], seed=3)
    picks = [grouper.choose([])[0] for _ in range(300)]
    assert all(sorted(picks[i:i + 3]) == [1, 2, 3] for i in range(0, 300, 3))


def test_message_reader_splits_on_end_lines_across_reads():
    reader = MessageReader()
    wire = (encode({"command": "sync"}) + encode([3, 4]) + encode({"command": "log", "msg": "a\nend\nb"})).encode()
    cut = 7
    messages = reader.feed(wire[:cut]) + reader.feed(wire[cut:])
    assert messages == [{"command": "sync"}, [3, 4], {"command": "log", "msg": "a\nend\nb"}]



def test_bad_setting_is_a_clear_error():
    class T(Topology):
        numbers = NumberSpout.spec(par=1)

    with pytest.raises(TopologyError, match=r"topology.max.spout.pending must be a non-negative number, got 'many'"):
        LocalCluster(T, {"topology.max.spout.pending": "many"}, cwd=str(ROOT))
