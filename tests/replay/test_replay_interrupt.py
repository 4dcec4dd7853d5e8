"""Ctrl-C of `keysplit replay` while its Spark jobs run: one line, not py4j's tracebacks.

A terminal's Ctrl-C is a SIGINT to the whole foreground process group, the JVM included, so several gateway calls
break at once and py4j logs each with its traceback (through the root logger: spark_replay/session.py
quiet_py4j), about 50 lines before keysplit's own. Here the replay runs in a process group of its own, and the
group gets the SIGINT once the replay has written its generator's file: the driver then waits in a gateway call
for the Spark job that reads it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys


def test_ctrl_c_of_a_running_replay_prints_one_line_and_no_traceback(tmp_path):
    env = {**os.environ, "KEYSPLIT_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "keysplit.cli", "replay", "--dataset", "zipf:z=1.1,keys=5000,messages=200000,seed=3",
         "-g", "kg,pkg,dchoices", "-W", "8", "-S", "4", "--master", "local[2]", "--driver-memory", "1g", "--out",
         str(tmp_path / "out")],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    said = []
    try:
        for line in proc.stderr:
            said.append(line)
            if line.startswith("replay: generator written to "):  # the job that reads it starts now
                os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
                break
        rest = proc.stderr.read()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert said and said[-1].startswith("replay: generator written to "), said  # stopped while its job ran
    lines = rest.splitlines()
    assert proc.returncode == 130, rest
    assert len(lines) <= 3 and "Traceback" not in rest and "py4j" not in rest, rest
    assert lines[-1] == f"keysplit: replay stopped by Ctrl-C; nothing was written to {tmp_path / 'out'}"
    assert not (tmp_path / "out").exists()
