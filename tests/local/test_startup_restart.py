"""A task killed while the topology starts (docs/design/overload.md): its worker is relaunched, as Storm's supervisor
relaunches a worker that did not come up (local/supervisor.py), and the run goes on; a task that can never start
ends the run after ``keysplit.local.startup.attempts`` starts with one line.

The kill is real: a SIGKILL of the task's process while it is still importing its module, before its handshake.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from streamparse import Topology

from keysplit.local import LocalCluster, TopologyError

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))

from local_components.comps import NumberSpout  # noqa: E402
from local_components.missing import UnimportableBolt  # noqa: E402
from local_components.slow_start import SlowStartBolt  # noqa: E402

from tests.local.test_local_runner import acked, assert_all_acked_once  # noqa: E402
from tests.storm.test_exactly_once import _assert_exact, _run, home, redis_url  # noqa: E402, F401  (fixtures)
from tests.storm.test_wordcount_topology import write_text  # noqa: E402


def _kill_when_started(marker: Path) -> threading.Thread:
    """SIGKILL the process that wrote its pid into ``marker`` (the slow task, before its handshake)."""
    def kill() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = marker.read_text() if marker.exists() else ""
            if text.strip():
                os.kill(int(text), signal.SIGKILL)
                return
            time.sleep(0.02)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    return thread


def test_a_task_killed_during_start_up_relaunches_its_worker_and_the_run_goes_on(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        slow = SlowStartBolt.spec(inputs=[numbers], par=2)

    marker = tmp_path / "first-start"
    conf = {"test.out": str(tmp_path), "test.n": 30, "topology.workers": 2,
            "keysplit.local.restart.delay.secs": 0.1}
    cluster = LocalCluster(T, conf, cwd=str(ROOT), log_dir=str(tmp_path / "logs"),
                           env={"PYTHONPATH": str(TESTS), "KEYSPLIT_TEST_SLOW_ONCE": str(marker)})
    killer = _kill_when_started(marker)
    with cluster:  # start(): the killed task's worker is relaunched instead of the run failing
        killer.join(timeout=1)
        assert cluster.run_until(lambda: len(acked(tmp_path)) >= 30, timeout=30, poll=0.05)
        summary = cluster.summary()
    assert_all_acked_once(tmp_path, 30)
    victim = int(marker.read_text())
    assert all(t.pid != victim for t in cluster.tasks.values()), "the killed process was replaced"
    assert summary["worker_restarts"] == 1 and summary["task_deaths"] == 1
    # the whole worker of the killed task started again (its other tasks too), the other worker never
    restarted = {t.task_id: t.worker for t in cluster.tasks.values() if t.restarts}
    (worker,) = set(restarted.values())
    assert sorted(restarted) == sorted(t.task_id for t in cluster.tasks.values() if t.worker == worker)
    assert all(t.restarts == 1 for t in cluster.tasks.values() if t.worker == worker)


def test_a_task_that_never_starts_fails_the_run_after_its_attempts_with_one_line(tmp_path):
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        broken = UnimportableBolt.spec(inputs=[numbers], par=1)

    conf = {"test.out": str(tmp_path), "test.n": 1, "keysplit.local.startup.attempts": 2,
            "keysplit.local.restart.delay.secs": 0.1}
    cluster = LocalCluster(T, conf, cwd=str(ROOT), env={"PYTHONPATH": str(TESTS), "KEYSPLIT_TEST_BREAK_IMPORT": "1"})
    with pytest.raises(TopologyError) as err:
        cluster.start()
    message = str(err.value)
    assert "\n" not in message and "'broken'" in message and "(2 starts, keysplit.local.startup.attempts)" in message
    assert "No module named 'keysplit_no_such_dependency'" in message
    assert cluster.summary()["worker_restarts"] == 1


def test_a_task_that_exits_silently_is_said_to_have_written_nothing(tmp_path, caplog):
    """No "its stderr ends with:" over a blank line when there is nothing to show."""
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        broken = UnimportableBolt.spec(inputs=[numbers], par=1)

    conf = {"test.out": str(tmp_path), "test.n": 1, "keysplit.local.startup.attempts": 1}
    cluster = LocalCluster(T, conf, cwd=str(ROOT), env={"PYTHONPATH": str(TESTS), "KEYSPLIT_TEST_SILENT_EXIT": "1"})
    with pytest.raises(TopologyError) as err:
        cluster.start()
    assert "with code 3: no output on stderr" in str(err.value)
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == ["task broken[0] failed to start and wrote nothing on stderr"], errors


def test_keysplit_run_with_a_counter_killed_during_start_up_ends_exact(redis_url, tmp_path):  # noqa: F811
    # --kill counter@start: SIGKILL of the counter's process right after it was spawned, before its handshake,
    # through keysplit run's own fault injection (runs/faults.py); the run used to abort here
    path = tmp_path / "lines.txt"
    write_text(path, 200, seed=11)
    conn, summary = _run(redis_url, path, ["counter@start"], worker_processes=2)
    _assert_exact(conn, summary, path, ["counter@start"])
    assert summary["kills"] == [{"target": "counter:0", "fraction": "start", "acked": 0}]
    assert summary["worker_restarts"] == 1 and summary["task_deaths"] == 1


def test_a_start_up_kill_names_a_task_or_a_worker():
    from keysplit.errors import KeysplitError
    from keysplit.runs.faults import AT_START, parse_kill

    assert parse_kill("router:1@start") == parse_kill("router:1@start ") and parse_kill("worker@start").index == 0
    assert parse_kill("router:1@start").fraction == AT_START
    with pytest.raises(KeysplitError, match="only a task or a worker can be killed during start-up"):
        parse_kill("redis@start")
