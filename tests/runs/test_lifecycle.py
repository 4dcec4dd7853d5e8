"""Runs that never corrupt or lose data (docs/guides/local.md): run ids are names and never reused, outputs never
replace inputs and are written whole, SIGTERM/SIGHUP/kill -9 leave nothing behind, an interrupted run can be listed,
resumed, collected and deleted, a lost Redis is one line, and the state folder is private.

Everything here is real: `keysplit` in subprocesses, a real redis-server, real task processes, real signals."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from cli_process import counts_file, interrupt_while_loading, keysplit, start, wait_for, write_text

from keysplit.errors import KeysplitError
from keysplit.outputs import atomic_file
from keysplit.runs import redis_server
from keysplit.runs.records import check_run_id, read_record, reserve, set_state
from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import split_password

ROOT = Path(__file__).resolve().parents[2]
def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` with a hash of its content and its mode."""
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() or path.is_symlink():
            data = path.read_bytes() if path.exists() else b""
            out[str(path.relative_to(folder))] = hashlib.sha256(data).hexdigest() + oct(path.lstat().st_mode)
    return out


@pytest.fixture(scope="module")
def not_redis():
    """A TCP server that answers like a web server, not like Redis."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    server.close()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A state folder with a running managed server (left up between commands) and a finished and an
    interrupted run recorded in it."""
    home = tmp_path_factory.mktemp("home")
    server = redis_server.start_server(home)
    conn = redis_server.client(server.url)
    for run_id, state in (("done", "finished"), ("stopped", "interrupted")):
        keys = RunKeys(run_id)
        reserve(conn, keys, {"grouping": "pkg", "dataset": "text:x.txt"})
        set_state(conn, keys, state)
    yield home, conn
    redis_server.stop_server(home, save=False, force=True)


BAD_INPUTS = [
    # (arguments, what the one line says); {data} is the dataset file, {link} a symlink to it
    (["run", "wordcount", "-g", "kg", "--dataset", "text:{data}", "--counts-out", "sub/../t.txt"],
     "would overwrite the input"),
    (["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--counts-out", "{link}"],
     "would overwrite the input"),
    (["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--run-id", "../../../tmp/x"], "bad run id"),
    (["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--run-id", "a" * 101], "bad run id"),
    (["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--run-id", "a b"], "bad run id"),
    (["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "-W", "10000000"], "task processes"),
    (["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "-S", "100000", "-W", "2"], "task processes"),
    (["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--run-id", "done", "--counts-out", "new.tsv"],
     "already taken by a finished run"),
    (["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--run-id", "stopped"],
     "already taken by an interrupted run"),
    (["run", "wordcount", "--collect", "nosuch"], "no run 'nosuch'"),
    (["run", "wordcount", "--collect", "../x"], "bad run id"),
    (["run", "wordcount", "--collect", "stopped"], "feed was never completely loaded"),
    (["run", "wordcount", "--resume", "done"], "only an interrupted or loaded run can be resumed"),
    (["run", "wordcount", "--resume", "stopped"], "before its feed was completely loaded"),
    (["run", "wordcount", "--resume", "stopped", "-g", "pkg"], "takes the run's own settings"),
    (["run", "wordcount", "--resume", "x", "--collect", "x"], "cannot be combined"),
    (["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--redis", "{not_redis}"],
     "does not answer like Redis"),
    (["runs", "show", "nosuch"], "no run 'nosuch'"),
    (["runs", "delete", "done", "nosuch"], "nothing deleted"),
    (["runs", "delete", "../x"], "bad run id"),
    (["runs", "show"], "exactly one run id"),
    (["runs", "--redis", "{not_redis}"], "does not answer like Redis"),
    (["replay", "--dataset", "csv:o/dataset.csv,key=key", "-g", "kg", "--out", "o"], "would overwrite the input"),
    (["simulate", "--dataset", "text:d.png", "-g", "kg", "--plot", "./sub/../d.png"], "would overwrite the input"),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUTS,
                         ids=lambda v: " ".join(v)[:60] if isinstance(v, list) else None)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(args, message, shared, tmp_path, not_redis, monkeypatch,
                                                         capsys):
    """Through the CLI's entry point in this process (a traceback would fail the test; a subprocess per case
    would cost seconds each on a loaded machine)."""
    from keysplit.cli import main

    home, conn = shared
    monkeypatch.setenv("KEYSPLIT_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "t.txt"
    write_text(data, 20)
    (tmp_path / "sub").mkdir()
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "dataset.csv").write_text("key\na\nb\n")
    (tmp_path / "link.tsv").symlink_to(data)
    (tmp_path / "d.png").write_text("a text dataset with an image's name\n")
    filled = [a.format(data=data, link=tmp_path / "link.tsv", not_redis=not_redis) for a in args]
    before, redis_before = snapshot(tmp_path), conn.dbsize()
    assert main(filled) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("keysplit: error: "), err
    assert message in err and "Traceback" not in err
    assert snapshot(tmp_path) == before
    assert conn.dbsize() == redis_before  # and nothing stored


def test_run_ids_are_names():
    for good in ("R", "2026-01-01T12.00_pkg-1", "a" * 100):
        assert check_run_id(good) == good
    for bad in ("", ".", "..", "a/b", "../x", "a:b", "a*", "a\nb", "a" * 101, "é"):
        with pytest.raises(KeysplitError, match="bad run id"):
            check_run_id(bad)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "counts.tsv"
    path.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_file(path) as fh:
        fh.write("new, half")
        raise RuntimeError("disk full")
    assert path.read_text() == "old\n" and os.listdir(tmp_path) == ["counts.tsv"]
    with atomic_file(tmp_path / "fresh.tsv") as fh:
        fh.write("x\n")
    assert (tmp_path / "fresh.tsv").read_text() == "x\n"
    assert stat.S_IMODE((tmp_path / "fresh.tsv").stat().st_mode) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.every_redis
def test_a_lease_left_by_a_killed_process_is_reclaimed_by_the_next_command(tmp_path):
    """kill -9 gives a session no chance to release its lease: the next session drops it and, being the last
    one out, stops the server as the dead one would have."""
    home = tmp_path / "home"
    code = ("import os, signal\nfrom keysplit.runs import redis_server\n"
            f"with redis_server.session(home={str(home)!r}):\n    os.kill(os.getpid(), signal.SIGKILL)\n")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == -9
    assert redis_server.running_server(home) is not None  # left running, its lease held by a dead process
    try:
        with redis_server.session(home=home) as (conn, _):
            assert redis_server.live_leases(conn) == 1  # ours only
        assert redis_server.running_server(home) is None
    finally:
        redis_server.stop_server(home, force=True)


def test_a_run_whose_owner_died_reads_as_interrupted(shared):
    _, conn = shared
    code = ("import sys\nfrom keysplit.runs import redis_server\nfrom keysplit.storm.keys import RunKeys\n"
            "from keysplit.runs.records import set_state\n"
            "set_state(redis_server.client(sys.argv[1]), RunKeys('orphan'), 'running')\n")
    url = redis_server.running_server(shared[0]).url
    subprocess.run([sys.executable, "-c", code, url], check=True)
    assert read_record(conn, "orphan")["state"] == "interrupted"
    set_state(conn, RunKeys("mine"), "running")
    assert read_record(conn, "mine")["state"] == "running"  # this process is alive


@pytest.mark.every_redis
def test_state_folder_and_its_files_are_private_and_the_replay_uses_it(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)
    monkeypatch.setenv("KEYSPLIT_HOME", str(home))
    with redis_server.session(home=home) as (conn, _):
        conn.set("k", "v")
    for folder in (home, home / "redis"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    for name in ("dump.rdb", "redis.log", "redis.conf"):
        assert stat.S_IMODE((home / "redis" / name).stat().st_mode) == 0o600, name
    for path in (home / "redis").rglob("*"):  # Redis 7's appendonlydir/ and its files too
        assert stat.S_IMODE(path.stat().st_mode) == (0o700 if path.is_dir() else 0o600), path
    from spark_replay import session

    monkeypatch.setattr(session, "_private", [])  # the folder is chosen once per process
    planted = Path("/tmp") / f"keysplit-log4j2-{os.getuid()}.properties"  # what an older keysplit trusted
    config, log = Path(session._log_config()), Path(session.jvm_log_path())
    assert config.parent == log.parent == home / "spark" and config != planted
    assert stat.S_IMODE(config.parent.stat().st_mode) == 0o700
    assert "rootLogger.level = error" in config.read_text()


def test_a_ragged_csv_row_is_skipped_counted_and_reported_with_its_line(tmp_path, caplog):
    from keysplit.datasets import open_dataset

    path = tmp_path / "r.csv"
    path.write_text("user,time\na,1\nb\nc,3,extra\nd,4\n")
    with caplog.at_level(logging.WARNING):
        records = list(open_dataset(f"csv:{path},key=user,time=time").records())
    assert [keys for _, keys in records] == [["a"], ["d"]]
    assert "2 row(s) with more or fewer fields than the header's 2 were skipped (the first at line 3)" in caplog.text


def test_sighup_while_loading_stops_with_129_and_the_run_cannot_be_resumed(tmp_path):
    home = tmp_path / "home"
    returncode, err = interrupt_while_loading(home, tmp_path, signal.SIGHUP)
    assert returncode == 129 and err.count("\n") == 1 and "SIGHUP" in err, err
    assert redis_server.running_server(home) is None  # its lease released: the server it started stopped
    result = keysplit("runs", "--json", home=home, cwd=tmp_path)
    assert [r["state"] for r in json.loads(result.stdout)] == ["interrupted"]
    result = keysplit("run", "wordcount", "--resume", "L", home=home, cwd=tmp_path)
    assert result.returncode == 2 and "before its feed was completely loaded" in result.stderr
    assert keysplit("runs", "delete", "L", home=home, cwd=tmp_path).returncode == 0
    assert json.loads(keysplit("runs", "--json", home=home, cwd=tmp_path).stdout) == []


def test_timeout_covers_loading_the_feed(tmp_path):
    home = tmp_path / "home"
    write_text(tmp_path / "t.txt", 5000)
    result = keysplit("run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--run-id", "T", "--timeout",
                      "0.001", home=home, cwd=tmp_path)
    assert result.returncode == 2 and "did not finish within --timeout" in result.stderr
    assert "lines loaded into the feed" in result.stderr and result.stderr.count("\n") == 1
    runs = json.loads(keysplit("runs", "--json", home=home, cwd=tmp_path).stdout)
    assert [(r["run_id"], r["state"]) for r in runs] == [("T", "interrupted")]


def test_sigterm_resume_collect_reuse_and_delete(tmp_path):
    """The whole life of a run: SIGTERM mid-run (exit 143, one line, every task gone, lease released), listed
    as interrupted, resumed to exact totals, collected again without a traceback, its id refused
    for a new run (no doubled totals), deleted. The state folder stays private, and a clean stop leaves the
    tasks' stderr empty."""
    home = tmp_path / "home"
    exact = write_text(tmp_path / "t.txt", 1500)
    proc = start("run", "wordcount", "-g", "pkg", "--dataset", "text:t.txt", "-S", "1", "-W", "2", "-A", "1",
                 "--cpu-delay", "2", "--run-id", "R", home=home, cwd=tmp_path)
    children: list[psutil.Process] = []
    try:
        def running() -> bool:
            server = redis_server.running_server(home)
            if server is None:
                return False
            conn = redis_server.client(server.url)
            acked = int(conn.hget(RunKeys("R").spout(0), "acked") or 0)
            return conn.hget(RunKeys("R").record, "state") == "running" and acked > 100

        wait_for(running, 180, "the run to ack lines")
        children = psutil.Process(proc.pid).children(recursive=True)
        assert len(children) >= 5
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143 and err == ("keysplit: run stopped by SIGTERM; continue it with "
                                              "`keysplit run wordcount --resume R`\n"), err
    wait_for(lambda: not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children), 10,
             "the tasks to exit")
    assert redis_server.running_server(home) is None

    runs = json.loads(keysplit("runs", "--json", home=home, cwd=tmp_path).stdout)
    assert [(r["run_id"], r["state"], r["messages"]) for r in runs] == [("R", "interrupted", sum(exact.values()))]
    result = keysplit("run", "wordcount", "--resume", "R", "--counts-out", "c.tsv", "--json", home=home,
                      cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    counts = counts_file(tmp_path / "c.tsv")
    # exactly-once: the lines the stopped run had sent are replayed, and add nothing a second time
    assert counts == dict(exact) and summary["replayed"] > 0
    assert summary["resumes"] == 1 and summary["totals"] == "exact" and summary["delivery"] == "exactly-once"

    before = (tmp_path / "c.tsv").read_bytes()
    again = keysplit("run", "wordcount", "-g", "pkg", "--dataset", "text:t.txt", "--run-id", "R", "--counts-out",
                     "c.tsv", home=home, cwd=tmp_path)
    assert again.returncode == 2 and "already taken by a finished run" in again.stderr
    assert (tmp_path / "c.tsv").read_bytes() == before
    collected = keysplit("run", "wordcount", "--collect", "R", "--json", home=home, cwd=tmp_path)
    assert collected.returncode == 0 and "Traceback" not in collected.stderr
    assert json.loads(collected.stdout) == summary

    for folder in (home, home / "redis", home / "logs", home / "logs" / "R"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    logs = list((home / "logs" / "R").iterdir())
    assert logs and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in logs)
    for name in ("dump.rdb", "redis.log"):
        assert stat.S_IMODE((home / "redis" / name).stat().st_mode) == 0o600
    for path in logs:
        if path.suffix == ".stderr":
            assert "Logging error" not in path.read_text() and "StormWentAwayError" not in path.read_text(), path

    deleted = keysplit("runs", "delete", "R", home=home, cwd=tmp_path)
    assert deleted.returncode == 0 and not (home / "logs" / "R").exists()
    assert json.loads(keysplit("runs", "--json", home=home, cwd=tmp_path).stdout) == []


def test_redis_killed_mid_run_is_one_line(tmp_path):
    home, own = tmp_path / "home", tmp_path / "own-redis"
    server = redis_server.start_server(own)  # the run's server, killed below; not the managed one
    write_text(tmp_path / "t.txt", 1500)
    url, password = split_password(server.url)  # the password in a file: in the URL it warns (every user sees ps)
    (tmp_path / "pw").write_text(password)
    os.chmod(tmp_path / "pw", 0o600)
    proc = start("run", "wordcount", "-g", "pkg", "--dataset", "text:t.txt", "-S", "1", "-W", "2", "-A", "1",
                 "--cpu-delay", "2", "--redis", url, "--redis-password-file", str(tmp_path / "pw"), home=home,
                 cwd=tmp_path)
    try:
        conn = redis_server.client(server.url)

        def running() -> bool:
            return any(conn.hget(k, "state") == "running" for k in conn.scan_iter("keysplit:run:*:record"))

        wait_for(running, 180, "the run to start")
        time.sleep(1.0)
        os.kill(server.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        redis_server.stop_server(own, force=True)
    assert proc.returncode == 2, err
    assert err.count("\n") == 1 and "lost its Redis" in err and "Traceback" not in err, err


def test_the_summary_says_whether_totals_are_exact_and_names_the_timeout_setting(capsys):
    from keysplit.commands.run import print_summary

    summary = {"run_id": "R", "grouping": "kg", "dataset": "text:t.txt", "lines": 10, "messages": 30, "sources": 1,
               "workers": 2, "aggregators": 1, "cpu_delay_ms": 0.0, "flush_secs": 1.0, "words_per_second": 1.0,
               "lines_per_second": 1.0, "duration_s": 1.0, "replayed": 0, "totals": "exact", "timed_out": 0,
               "latency_ms": {"mean": 1.0, "p50": 1.0, "p95": 1.0, "p99": 1.0}, "final_imbalance_fraction": 0.0,
               "load_stddev": 0.0, "dist_cost": 1.0, "loads": [15, 15], "distinct_per_worker": [2, 2],
               "top_k": [["a", 10]], "message_timeout_secs": 30}
    print_summary(summary)
    out = capsys.readouterr().out
    assert "totals: exact" in out and "message timeout" not in out
    print_summary({**summary, "replayed": 7, "totals": "at-least", "timed_out": 7})
    out = capsys.readouterr().out
    assert "totals: at least" in out and "7 replayed line(s)" in out
    assert out.rstrip().endswith("7 line(s) were not acked within the message timeout of 30 s and were replayed: "
                                 "raise --message-timeout (topology.message.timeout.secs) or lower --max-pending")


def test_a_dataset_replaced_while_the_feed_loads_is_recorded_by_what_was_read(tmp_path, monkeypatch, caplog):
    """The run's dataset_sha256 is the fingerprint of the records it loaded, not of the file as it is afterwards;
    and keysplit says the file changed under it. The file is replaced (renamed over) once the first 2,000 lines are
    in the feed: the reader goes on with the file it opened."""
    from keysplit.datasets import open_dataset
    from keysplit.runs.prepare import RunOptions, prepare_run
    from keysplit.runs.wordcount import start_run

    home = tmp_path / "home"
    monkeypatch.setenv("KEYSPLIT_HOME", str(home))
    path = tmp_path / "t.txt"
    write_text(path, 5000)
    read_first = open_dataset(f"text:{path}").sha256()
    prepared = prepare_run(RunOptions("pkg", f"text:{path}", run_id="replaced"))
    replaced = []

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "load" and done >= 2000 and not replaced:
            (tmp_path / "new.txt").write_text("other words entirely\n" * 7)
            os.replace(tmp_path / "new.txt", path)
            replaced.append(done)

    try:
        server = redis_server.start_server(home)
        with caplog.at_level(logging.WARNING, logger="keysplit"):
            _, _, base = start_run(redis_server.connect(server.url), prepared, server.url, progress=progress)
    finally:
        redis_server.stop_server(home)
    assert replaced and base["lines"] == 5000
    assert base["dataset_sha256"] == read_first != open_dataset(f"text:{path}").sha256()
    assert f"{path} changed while run replaced loaded it: the run counts the 5000 lines it read" in caplog.text
