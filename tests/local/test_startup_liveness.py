"""A start-up that is slow but alive is waited for; one that hangs is named in one line (local/liveness.py).

Storm never fails a slow-loading task (its worker heartbeats from a timer of its own); its supervisor's one
limit, ``supervisor.worker.start.timeout.secs``, is for a worker that shows no sign of life. The local runner's
``keysplit.local.startup.timeout.secs`` is that limit: seconds with no CPU time and nothing on stderr. Here it is
a few seconds, and the slow task works on the CPU for longer than that before its handshake: it starts. The
hung task sleeps before its handshake: the run fails naming it, what was seen and what to do.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from streamparse import Topology

from keysplit.local import LocalCluster, TopologyError
from keysplit.local.liveness import Liveness, process_stat

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))

from local_components.comps import NumberSpout  # noqa: E402
from local_components.start_modes import StartModeBolt  # noqa: E402

from tests.local.test_local_runner import acked, assert_all_acked_once  # noqa: E402

LIMIT = 2.0


class T(Topology):
    numbers = NumberSpout.spec(par=1)
    slow = StartModeBolt.spec(inputs=[numbers], par=1)


def _cluster(tmp_path: Path, mode: str) -> LocalCluster:
    conf = {"test.out": str(tmp_path), "test.n": 5, "keysplit.local.startup.timeout.secs": LIMIT}
    return LocalCluster(T, conf, cwd=str(ROOT), log_dir=str(tmp_path / "logs"),
                        env={"PYTHONPATH": str(TESTS), "KEYSPLIT_TEST_START": mode})


def test_a_start_slower_than_the_limit_but_busy_is_waited_for(tmp_path):
    started = time.monotonic()
    with _cluster(tmp_path, f"busy:{3 * LIMIT}") as cluster:  # start(): 3x the limit before the handshake
        assert time.monotonic() - started > 3 * LIMIT  # it did take longer than the limit: and was waited for
        assert cluster.run_until(lambda: len(acked(tmp_path)) >= 5, timeout=120, poll=0.05)
    assert_all_acked_once(tmp_path, 5)


def test_a_task_that_hangs_before_its_handshake_is_named_with_what_to_do(tmp_path):
    cluster = _cluster(tmp_path, "hang")
    with pytest.raises(TopologyError) as err:
        cluster.start()
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("task slow[0] (local_components.start_modes.StartModeBolt, pid ")
    assert f"did not answer the multi-lang handshake and used no CPU and wrote nothing on stderr for {LIMIT:g} s" \
        in message
    assert "(keysplit.local.startup.timeout.secs; its process is asleep): it hangs before its component starts" \
        in message
    assert message.endswith("if it is only slow, raise that limit (keysplit run --startup-timeout)")
    assert "stderr: " in message  # where to look
    assert all(not t.running for t in cluster.tasks.values())  # every task stopped


def test_liveness_counts_cpu_time_and_stderr_as_signs_of_life(tmp_path):
    import subprocess

    err = tmp_path / "err"
    with open(err, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-c", "import sys, time\nsys.stdin.readline()\n"
                                 "sys.stderr.write('x'); sys.stderr.flush()\nsys.stdin.readline()\n"],
                                stdin=subprocess.PIPE, stderr=fh)
    try:
        while process_stat(proc.pid).state != "S":  # asleep on stdin: no more CPU
            time.sleep(0.05)
        assert process_stat(proc.pid).cpu_secs > 0  # what starting Python cost
        seen = Liveness(proc.pid, err, now=0.0)
        assert seen.silent_for(1.0) == 1.0  # the first look: the marks to compare with
        assert seen.silent_for(200.0) == 200.0
        assert seen.describe() == ("used no CPU and wrote nothing on stderr", "asleep")
        proc.stdin.write(b"\n")
        proc.stdin.flush()
        while err.stat().st_size == 0:
            time.sleep(0.05)
        assert seen.silent_for(300.0) == 0.0  # it wrote: alive at 300
    finally:
        proc.kill()
        proc.wait()
    assert process_stat(proc.pid) is None  # gone (reaped)
