"""What a user reads after a fault or a mistake: the loads after a killed counter add up to the words, a
stored run that cannot be resumed never says ``--resume``, a damaged summary and a Redis that evicts keys are one
line each, the knobs that set how long a run waits are bounded, a password on the command line or in a file others
can read is warned about, and a warning about invalid UTF-8 comes once."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from cli_process import keysplit

from keysplit.runs import redis_server
from keysplit.runs.prepare import RunOptions, prepare_run
from keysplit.runs.records import set_state
from keysplit.runs.wordcount import run_wordcount
from keysplit.storm.keys import RUNS, RunKeys
from keysplit.storm.settings import split_password
from tests.storm.test_wordcount_topology import exact_counts, write_text


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The managed Redis of a state folder of this module's (``server.home``)."""
    path = tmp_path_factory.mktemp("reports-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KEYSPLIT_HOME", str(path))
        yield redis_server.start_server(path)
        redis_server.stop_server(path, force=True)


@pytest.fixture
def home(server):
    return Path(server.directory).parent


def _one_line_error(result: subprocess.CompletedProcess, *needles: str) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


def test_the_loads_after_a_killed_counter_add_up_to_the_words(server, tmp_path):
    # each counter's load is the words whose commit came from it: a killed counter's replayed lines are counted
    # once in the loads, and the words it counted twice show as redone work
    path = tmp_path / "lines.txt"
    write_text(path, 600, seed=11)
    prepared = prepare_run(RunOptions("pkg", f"text:{path}", sources=2, workers=2, aggregators=1, max_pending=200,
                                  message_timeout=3, worker_processes=3, timeout=240,
                                  kills=("counter@0.3", "counter:1@0.6")))
    summary = run_wordcount(prepared, redis_server.connect(server.url), server.url)
    words = sum(exact_counts(path).values())
    assert summary["totals"] == "exact" and summary["worker_restarts"] >= 2 and summary["replayed"] > 0
    assert sum(summary["loads"]) == summary["messages"] == words
    assert [w - r for w, r in zip(summary["work"], summary["redone"])] == summary["loads"]
    assert all(r >= 0 for r in summary["redone"]) and sum(summary["work"]) >= words


def test_a_kill_that_fires_after_the_last_ack_says_it_tested_nothing_in_flight(home, tmp_path):
    # one line: the kill at half of it can only fire once that line is acked, as a late poll does on a fast run
    (tmp_path / "one.txt").write_text("a b c\n", encoding="utf-8")
    result = keysplit("run", "wordcount", "-g", "kg", "--dataset", "text:one.txt", "-S", "1", "-W", "1", "-A", "1",
                      "--kill", "counter@0.5", home=home, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "counter:0 at 1 of 1 lines acked (after the last line was acked: nothing was in flight)" in result.stdout
    assert "fired only after every line was acked" in result.stderr


def test_a_run_stopped_while_loading_is_not_offered_a_resume_and_a_damaged_summary_is_one_line(server, home, tmp_path):
    conn = redis_server.connect(server.url)
    loading, damaged = RunKeys("stopped-loading"), RunKeys("damaged-summary")
    for keys in (loading, damaged):
        conn.zadd(RUNS, {keys.run_id: time.time()})
    set_state(conn, loading, "interrupted", reason="stopped while loading the feed")  # no feed_complete
    shown = keysplit("runs", "show", loading.run_id, home=home, cwd=tmp_path)
    assert shown.returncode == 0 and "--resume" not in shown.stdout and "cannot be resumed" in shown.stdout
    refused = keysplit("run", "wordcount", "--resume", loading.run_id, home=home, cwd=tmp_path)
    _one_line_error(refused, "before its feed was completely loaded")
    set_state(conn, damaged, "finished")
    for text in ("{not json", '{"run_id": "damaged-summary"}', "[1, 2]"):
        conn.set(damaged.summary, text)
        _one_line_error(keysplit("runs", "show", damaged.run_id, home=home, cwd=tmp_path), "damaged")
        calibrated = keysplit("calibrate", "--run", damaged.run_id, "--name", "x", home=home, cwd=tmp_path)
        _one_line_error(calibrated, "damaged")


def test_a_redis_that_evicts_keys_is_refused_in_one_line(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="ks-evict-"))  # a short path for the socket
    sock = folder / "redis.sock"
    binary = redis_server.find_server_binary()
    subprocess.run([binary, "--port", "0", "--unixsocket", str(sock), "--maxmemory", "100mb", "--maxmemory-policy",
                    "allkeys-lru", "--save", "", "--appendonly", "no", "--dir", str(folder), "--daemonize", "yes",
                    "--pidfile", str(folder / "redis.pid")], check=True, timeout=30)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        result = keysplit("run", "wordcount", "-g", "pkg", "--dataset", "zipf:messages=100", "--redis",
                          f"unix://{sock}", home=tmp_path / "home", cwd=tmp_path)
        _one_line_error(result, "evicts keys when full", "allkeys-lru", "noeviction")
    finally:
        with open(folder / "redis.pid") as fh:
            os.kill(int(fh.read()), 9)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_password_others_can_read_is_warned_about(server, home, tmp_path):
    url, password = split_password(server.url)
    shown = keysplit("runs", "--redis", server.url, home=home, cwd=tmp_path)
    assert shown.returncode == 0 and "every local user can read in `ps`" in shown.stderr
    secret = tmp_path / "secret"
    secret.write_text(password + "\n")
    for mode, warned in ((0o644, True), (0o600, False)):
        os.chmod(secret, mode)
        shown = keysplit("runs", "--redis", url, "--redis-password-file", str(secret), home=home, cwd=tmp_path)
        assert shown.returncode == 0 and ("readable by other users" in shown.stderr) == warned, shown.stderr


@pytest.mark.parametrize("option, value, says", [
    ("--flush", "1e9", "at most 3,600 s"),
    ("--batch-ms", "1e12", "at most 60,000 ms"),
    ("--rate", "1e-9", "at least 0.01667 words/s"),
])
def test_the_knobs_that_set_how_long_a_run_waits_are_bounded(tmp_path, option, value, says):
    result = keysplit("run", "wordcount", "-g", "pkg", "--dataset", "zipf:messages=10", option, value,
                      home=tmp_path / "home", cwd=tmp_path)
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "home").exists()  # refused before anything started


def test_a_resize_is_bounded_by_memory_as_w_is(tmp_path):
    result = keysplit("simulate", "--dataset", "zipf:messages=100", "--resize", "50:1000000000",
                      home=tmp_path / "home", cwd=tmp_path)
    _one_line_error(result, "-W 1,000,000,000", "memory")


def test_invalid_utf8_is_warned_about_once(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"hello w\xffrld\nfoo bar\n")
    result = keysplit("simulate", "--dataset", f"text:{path}", home=tmp_path / "home", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr.count("not valid UTF-8") == 1, result.stderr


def _plain_redis(folder: Path) -> list[str]:
    """A user's redis-server that keeps nothing on disk, on a Unix socket in ``folder`` (started, daemonised)."""
    argv = [redis_server.find_server_binary(), "--port", "0", "--unixsocket", str(folder / "redis.sock"), "--save",
            "", "--appendonly", "no", "--dir", str(folder), "--daemonize", "yes", "--pidfile",
            str(folder / "redis.pid")]
    subprocess.run(argv, check=True, timeout=30)
    deadline = time.monotonic() + 10
    while not (folder / "redis.sock").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return argv


def test_a_redis_that_keeps_nothing_on_disk_is_warned_of_and_its_empty_restart_named(tmp_path):
    """A user's Redis with no persistence: a warning at the start (as the eviction policy is checked), and when it
    restarts empty in the middle of the run, the one line names that, not the symptom ("no such key")."""
    from cli_process import start

    folder = Path(tempfile.mkdtemp(prefix="ks-plain-"))  # a short path for the socket
    argv = _plain_redis(folder)
    url = f"unix://{folder / 'redis.sock'}"
    proc = None
    try:
        shown = keysplit("runs", "--redis", url, home=tmp_path / "home", cwd=tmp_path)
        assert shown.returncode == 0 and 'keeps nothing on disk (appendonly no, save "")' in shown.stderr
        assert "CONFIG SET appendonly yes" in shown.stderr
        proc = start("run", "wordcount", "-g", "pkg", "--dataset", "zipf:messages=60000,keys=500", "--cpu-delay",
                     "1", "-S", "1", "-W", "2", "-A", "1", "--run-id", "emptied", "--redis", url,
                     home=tmp_path / "home", cwd=tmp_path)
        conn = redis_server.client(url, reconnect=False)
        deadline = time.monotonic() + 300
        while int(conn.hget(RunKeys("emptied").spout(0), "acked") or 0) == 0:  # running, lines acked
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        with open(folder / "redis.pid") as fh:
            os.kill(int(fh.read()), 9)
        (folder / "redis.sock").unlink(missing_ok=True)
        subprocess.run(argv, check=True, timeout=30)  # back at once, empty
        _, err = proc.communicate(timeout=300)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
        with open(folder / "redis.pid") as fh:
            os.kill(int(fh.read()), 9)
        shutil.rmtree(folder, ignore_errors=True)
    last = err.strip().splitlines()[-1]
    assert proc.returncode == 2, err
    assert last.startswith("keysplit: error: run emptied stopped: Redis at unix://") and "Traceback" not in err
    assert "no longer holds the run's keys: it restarted empty or was flushed (up " in last
    assert 'and keeps nothing on disk (appendonly no, save "")' in last and "no such key" not in last
