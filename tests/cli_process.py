"""The `keysplit` command as a user runs it, for the tests that drive it as a process (faults, lifecycle)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from keysplit.runs import redis_server
from keysplit.storm.keys import RunKeys

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"]


def write_text(path: Path, lines: int) -> Counter:
    """A text of ``lines`` lines of 1 to 5 words; its exact word counts."""
    exact: Counter = Counter()
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(lines):
            words = [WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(1 + i % 5)]
            exact.update(words)
            fh.write(" ".join(words) + "\n")
    return exact


def keysplit(*args: str, home: Path, cwd: Path, timeout: float = 300, **kwargs) -> subprocess.CompletedProcess:
    """Run `keysplit ARGS` with its state under ``home``, to the end."""
    env = {**os.environ, "KEYSPLIT_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "keysplit.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False, **kwargs)


def start(*args: str, home: Path, cwd: Path) -> subprocess.Popen:
    """Start `keysplit ARGS` with its state under ``home`` (stdout and stderr piped)."""
    env = {**os.environ, "KEYSPLIT_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "keysplit.cli", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def counts_file(path: Path) -> dict[str, int]:
    return {w: int(c) for w, c in (line.split("\t") for line in path.read_text().splitlines())}


def interrupt_while_loading(home: Path, cwd: Path, sig: signal.Signals, run_id: str = "L") -> tuple[int, str]:
    """Start a run of 3M messages, send it ``sig`` once its feed is loading, and wait for it to end; its exit code
    and stderr."""
    proc = start("run", "wordcount", "-g", "kg", "--dataset", "zipf:messages=3000000,keys=1000", "--run-id", run_id,
                 home=home, cwd=cwd)
    try:
        def loading() -> bool:
            server = redis_server.running_server(home)
            return server is not None and redis_server.client(server.url).xlen(RunKeys(run_id).feed) > 0

        wait_for(loading, 120, "the feed to be loading")
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    return proc.returncode, err
