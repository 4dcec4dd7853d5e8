"""`keysplit run` while it runs (commands/run_status.py, runs/progress.py): on a terminal one status line, the
tasks starting, then up, then the lines acked, the rate and the window; nothing of it when the output is piped or
with --json. And a task that hangs before its handshake ends the run with one line naming it and what to do
(--startup-timeout, local/liveness.py).

The terminal is a real pseudo-terminal (stdout and stderr both on it), the runs real `keysplit` processes.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from cli_process import keysplit, write_text

from keysplit.commands.run_status import CLEAR, RunStatus
from keysplit.runs import redis_server

# 600 lines of 1-5 words, 2 counters at 2 ms a word: about 3.6 s of acking at the least, so the rate (measured
# over a second or more) and the window (written at the spouts' first acknowledgements) are shown
RUN = ("run", "wordcount", "-g", "pkg", "--dataset", "text:t.txt", "-S", "2", "-W", "2", "-A", "1", "--cpu-delay",
       "2", "--message-timeout", "300")


def on_terminal(*args: str, home: Path, cwd: Path, timeout: float = 600) -> tuple[int, str]:
    """Run `keysplit ARGS` with stdout and stderr on a pseudo-terminal; its exit code and all it wrote there."""
    master, slave = pty.openpty()
    env = {**os.environ, "KEYSPLIT_HOME": str(home), "COLUMNS": "200"}
    proc = subprocess.Popen([sys.executable, "-m", "keysplit.cli", *args], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                            stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    try:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=timeout)
    finally:
        proc.kill()
        os.close(master)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_a_run_on_a_terminal_shows_its_tasks_then_acked_rate_and_window_and_nothing_when_piped(tmp_path):
    home = tmp_path / "home"
    write_text(tmp_path / "t.txt", 600)
    try:
        code, screen = on_terminal(*RUN, "--run-id", "tty", home=home, cwd=tmp_path)
        assert code == 0, screen
        updates = [u for u in screen.replace(CLEAR, "\r").split("\r") if u.strip()]
        starting = [u for u in updates if u.startswith("starting ")]
        running = [u for u in updates if " tasks up in " in u]
        assert starting and "answered the multi-lang handshake" in starting[0], updates[:5]
        assert running and updates.index(starting[-1]) < updates.index(running[0])  # tasks first, then acks
        assert any("lines/s" in u for u in running) and any(", window " in u for u in running), running
        assert "run tty: grouping pkg" in screen  # the summary follows, the status line erased before it
        assert screen.rstrip().endswith("marks of lines in flight)")

        piped = keysplit(*RUN, "--run-id", "piped", home=home, cwd=tmp_path)
        assert piped.returncode == 0 and piped.stderr == "", piped.stderr  # nothing extra when piped
        assert piped.stdout.startswith("run piped: grouping pkg")

        code, screen = on_terminal(*RUN, "--run-id", "json", "--json", home=home, cwd=tmp_path)
        assert code == 0 and "tasks up" not in screen and "\x1b" not in screen, screen[:300]
        assert json.loads(screen)["run_id"] == "json"  # the terminal holds the JSON object alone
    finally:
        redis_server.stop_server(home, force=True)


HANG_SPOUT = '''
import sys
import time

from streamparse import Spout

if getattr(sys.modules["__main__"].__spec__, "name", "") == "streamparse.run":  # the task (not keysplit run)
    time.sleep(3600)  # never gets to its handshake


class HangSpout(Spout):
    outputs = ["n"]

    def next_tuple(self):
        pass
'''

HANG_TOPOLOGY = '''
from hang.spouts import HangSpout
from streamparse import Topology


class Hang(Topology):
    hang = HangSpout.spec(par=1)
'''


def test_a_task_that_hangs_at_start_up_ends_the_run_with_one_line_naming_it_and_what_to_do(tmp_path):
    project = tmp_path / "project"
    (project / "src" / "hang").mkdir(parents=True)
    (project / "topologies").mkdir()
    (project / "src" / "hang" / "__init__.py").write_text("")
    (project / "src" / "hang" / "spouts.py").write_text(HANG_SPOUT)
    (project / "topologies" / "stuck.py").write_text(HANG_TOPOLOGY)  # not named after src/hang
    home = tmp_path / "home"
    try:
        result = keysplit("run", "topologies/stuck.py", "--until-idle", "1", "--startup-timeout", "2", home=home,
                          cwd=project)
    finally:
        redis_server.stop_server(home, force=True)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, \
        result.stderr
    assert result.stderr.startswith("keysplit: error: task hang[0] (hang.spouts.HangSpout, pid ")
    assert "did not answer the multi-lang handshake and used no CPU and wrote nothing on stderr for 2 s" \
        in result.stderr
    assert "raise that limit (keysplit run --startup-timeout)" in result.stderr


def test_the_status_line_is_drawn_only_on_a_terminal_and_never_wraps():
    class Screen:
        def __init__(self) -> None:
            self.text = ""

        def write(self, text: str) -> None:
            self.text += text

        def flush(self) -> None:
            pass

    off = Screen()
    RunStatus(stream=off, terminal=False)("run", 5, 10, window=4)
    RunStatus(stream=off, terminal=True, enabled=False)("run", 5, 10, window=4)  # --json
    assert off.text == ""
    screen = Screen()
    with RunStatus(stream=screen, terminal=True) as status:
        status("start", 0, 16)
        status("run", 50, 100, window=-1)
    assert "starting 16 tasks: 0 answered the multi-lang handshake" in screen.text
    assert "16 tasks up in 0 s | acked 50 of 100 lines (50%), window unlimited" in screen.text
    assert screen.text.endswith(CLEAR)  # erased at the end
    assert all(len(line) < 200 for line in screen.text.split("\r"))
