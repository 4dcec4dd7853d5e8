"""The replay's bounds on a Spark master that answers but never runs anything (docs/design/overload.md).

A real standalone master with no worker accepts the connection and the application, and never grants an
executor: without a bound of its own the replay would wait for ever. The first task (the executors' import
probe, spark_replay/session.py) is cancelled after ``KEYSPLIT_SPARK_START_SECS`` (120 s by default; 4 s here)
with one line. An unreachable master is refused at once (tests/cli/test_hostile_input.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest

SPARK_HOME = Path(pyspark.__file__).parent  # pip's pyspark is a whole Spark: bin/spark-class, jars/


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def idle_master(tmp_path):
    """A Spark standalone master on 127.0.0.1 with no worker; its URL."""
    port, ui = _free_port(), _free_port()
    argv = [str(SPARK_HOME / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(port), "--webui-port", str(ui)]
    with open(tmp_path / "master.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, env={**os.environ, "SPARK_HOME": str(SPARK_HOME)},
                                start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "master.log").read_text()
                    time.sleep(0.2)
            yield f"spark://127.0.0.1:{port}"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the master's own process group (start_new_session)
            proc.wait()


def test_a_master_that_never_grants_an_executor_is_one_line_after_the_bound(idle_master, tmp_path):
    env = {**os.environ, "KEYSPLIT_HOME": str(tmp_path / "home"), "KEYSPLIT_SPARK_START_SECS": "4"}
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "keysplit.cli", "replay", "--dataset", "zipf:messages=100", "-g",
                             "kg", "--master", idle_master, "--out", str(tmp_path / "r")],
                            capture_output=True, text=True, timeout=120, check=False, env=env)
    took = time.monotonic() - started
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"no Spark executor ran the first task within 4 s (master {idle_master})" in result.stderr
    assert 4 <= took < 60 and not (tmp_path / "r").exists()


def test_a_bad_bound_is_refused_before_spark_starts(tmp_path):
    env = {**os.environ, "KEYSPLIT_SPARK_START_SECS": "soon"}
    result = subprocess.run([sys.executable, "-m", "keysplit.cli", "replay", "--dataset", "zipf:messages=100", "-g",
                             "kg", "--master", "spark://127.0.0.1:1", "--out", str(tmp_path / "r")],
                            capture_output=True, text=True, timeout=60, check=False, env=env)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "KEYSPLIT_SPARK_START_SECS='soon': expected a positive number of seconds" in result.stderr
