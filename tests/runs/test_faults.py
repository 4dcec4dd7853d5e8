"""Faults built for real, each ending in one line naming its cause, exit 2, nothing lost and nothing left behind:
a full disk under the managed Redis (a real small file system), two ``--resume`` of one run racing (two real
processes), a runner killed with -9, a run stopped while loading, a machine where no topology can start.

The full disk is a 64 MB tmpfs mounted for the test (this machine runs as root). Where mounting is not allowed,
the same test runs with a real write limit instead (``RLIMIT_FSIZE`` on the server, with SIGXFSZ ignored, so its
writes fail as on a full disk): never skipped. ``KEYSPLIT_TEST_DISK=fsize`` forces that variant."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from cli_process import counts_file, interrupt_while_loading, keysplit, start, wait_for, write_text

from keysplit.runs import redis_server
from keysplit.storm.keys import RunKeys


def servers_in(folder: Path) -> list[int]:
    """The live redis-server processes working in ``folder`` (Redis chdir-s to its data directory)."""
    found = []
    for proc in psutil.process_iter(["name", "status"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["name"] == "redis-server" and proc.info["status"] != psutil.STATUS_ZOMBIE \
                    and proc.cwd() == os.path.realpath(folder):
                found.append(proc.pid)
    return found


def acked(home: Path, run_id: str) -> int:
    server = redis_server.running_server(home)
    if server is None:
        return 0
    conn = redis_server.client(server.url, reconnect=False)
    with contextlib.suppress(Exception):
        if conn.hget(RunKeys(run_id).record, "state") == "running":
            return int(conn.hget(RunKeys(run_id).spout(0), "acked") or 0)
    return 0


class Disk:
    """A place whose writes can be made to fail for real, and then succeed again."""

    def __init__(self, root: Path, kind: str) -> None:
        self.root, self.kind = root, kind
        self.filler = root / "filler"

    def prepare(self, home: Path) -> None:
        """The fsize variant starts the server itself (it keeps running across commands), with SIGXFSZ ignored:
        a write past the limit then fails (EFBIG, or a short write Redis reports as ENOSPC) instead of killing it.
        Python ignores SIGXFSZ; subprocess restores the default for its children unless told not to."""
        if self.kind == "fsize":
            code = ("import functools, subprocess, sys\n"
                    "subprocess.run = functools.partial(subprocess.run, restore_signals=False)\n"
                    "from keysplit.runs import redis_server\nredis_server.start_server(sys.argv[1])\n")
            subprocess.run([sys.executable, "-c", code, str(home)], check=True, timeout=120)

    def fill(self, home: Path, room: int = 4096) -> None:
        """Leave about ``room`` bytes that the server can still write."""
        if self.kind == "tmpfs":
            with open(self.filler, "wb") as fh, contextlib.suppress(OSError):
                while True:
                    fh.write(b"\0" * (1 << 20))
                    fh.flush()
            os.truncate(self.filler, max(0, self.filler.stat().st_size - room))
        else:
            server = redis_server.running_server(home)
            largest = max(p.stat().st_size for p in redis_server.aof_files(home / "redis"))
            resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (largest + room, resource.RLIM_INFINITY))  # soft

    def free(self, home: Path) -> None:
        if self.kind == "tmpfs":
            self.filler.unlink()
        else:
            server = redis_server.running_server(home)
            resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    def cause(self, home: Path) -> tuple[str, ...]:
        """What the one line may say: a full disk; under a size limit also a write that failed otherwise."""
        data = home / "redis"
        return (f"disk full at {data}",) if self.kind == "tmpfs" else \
            (f"disk full at {data}", f"Redis cannot write its data at {data}")


def _mount(root: Path) -> bool:
    if os.environ.get("KEYSPLIT_TEST_DISK", "tmpfs") != "tmpfs" or os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", str(root)],
                          capture_output=True, check=False).returncode == 0


@pytest.fixture
def disk(tmp_path):
    root = tmp_path / "disk"
    root.mkdir()
    mounted = _mount(root)
    yield Disk(root, "tmpfs" if mounted else "fsize")
    for pid in servers_in(root / "home" / "redis"):  # a server that cannot save does not stop: kill it
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if mounted:
        subprocess.run(["umount", "-l", str(root)], check=False)


@pytest.fixture
def home(tmp_path):
    """A state folder whose server, if a failing test left one, is stopped (or killed) at the end."""
    path = tmp_path / "home"
    yield path
    with contextlib.suppress(Exception):
        redis_server.stop_server(path, force=True)
    for pid in servers_in(path / "redis"):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.every_redis
def test_a_full_disk_is_one_line_keeps_every_run_and_never_starts_a_second_server(disk, tmp_path):
    home = disk.root / "home"
    exact = write_text(tmp_path / "t.txt", 4000)
    loaded = keysplit("run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--load-only", "--run-id", "kept",
                      home=home, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    disk.prepare(home)
    proc = start("run", "wordcount", "-g", "pkg", "--dataset", "text:t.txt", "-S", "1", "-W", "2", "-A", "1",
                 "--cpu-delay", "1", "--run-id", "R", home=home, cwd=tmp_path)
    try:
        wait_for(lambda: acked(home, "R") > 200, 180, "the run to ack lines")
        [server] = servers_in(home / "redis")
        disk.fill(home)
        started = time.monotonic()
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    # at once (it waited 212 s, then blamed a lost server), one line naming the cause and the way back
    assert time.monotonic() - started < 30, err
    assert proc.returncode == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert any(cause in err for cause in disk.cause(home)), (disk.kind, err)
    assert "--resume R" in err
    assert servers_in(home / "redis") == [server]  # left up, with what it acknowledged, and alone
    for _ in range(2):  # every further command: the same line, and never a second server on the same data
        listed = keysplit("runs", home=home, cwd=tmp_path)
        assert listed.returncode == 2 and listed.stderr.count("\n") == 1, listed.stderr
        assert any(cause in listed.stderr for cause in disk.cause(home)), listed.stderr
        assert servers_in(home / "redis") == [server]

    disk.free(home)  # the server writes what it held once there is room (it retries every second)

    def writable() -> bool:
        return keysplit("runs", "--json", home=home, cwd=tmp_path).returncode == 0

    wait_for(writable, 30, "the server to write again")
    runs = {r["run_id"]: r for r in json.loads(keysplit("runs", "--json", home=home, cwd=tmp_path).stdout)}
    assert runs["kept"]["state"] == "loaded" and runs["kept"]["lines"] == 4000
    assert runs["R"]["state"] == "interrupted"
    resumed = keysplit("run", "wordcount", "--resume", "R", "--counts-out", "c.tsv", "--json", home=home,
                       cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout)
    assert counts_file(tmp_path / "c.tsv") == dict(exact) and summary["totals"] == "exact"  # nothing lost
    conn = redis_server.connect(home=home)
    assert conn.xlen(RunKeys("kept").feed) == 4000  # the run stored before the fault is whole
    redis_server.stop_server(home, force=True)
    assert servers_in(home / "redis") == []


@pytest.mark.every_redis
def test_a_disk_full_while_the_feed_loads_says_the_run_cannot_be_resumed(disk, tmp_path):
    home = disk.root / "home"
    write_text(tmp_path / "t.txt", 20000)
    disk.prepare(home)
    if disk.kind == "tmpfs":
        redis_server.start_server(home)
    [server] = servers_in(home / "redis")
    disk.fill(home, room=32 << 10)  # room for the run's record, not for its feed
    result = keysplit("run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--run-id", "F", home=home,
                      cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert any(cause in result.stderr for cause in disk.cause(home)), (disk.kind, result.stderr)
    assert "stopped while loading its feed and cannot be resumed" in result.stderr, result.stderr
    assert "--resume" not in result.stderr and servers_in(home / "redis") == [server]


def test_two_resumes_of_one_run_at_once_run_it_once(home, tmp_path):
    exact = write_text(tmp_path / "t.txt", 1500)
    loaded = keysplit("run", "wordcount", "-g", "pkg", "--dataset", "text:t.txt", "-S", "2", "-W", "3", "-A", "1",
                      "--load-only", "--run-id", "L", home=home, cwd=tmp_path)
    assert loaded.returncode == 0, loaded.stderr
    procs = [start("run", "wordcount", "--resume", "L", "--json", "--counts-out", f"c{i}.tsv", home=home,
                   cwd=tmp_path) for i in range(2)]
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            proc.kill()
    assert sorted(code for code, _, _ in results) == [0, 2], results
    [(_, out, _)] = [r for r in results if r[0] == 0]
    [(_, _, err)] = [r for r in results if r[0] == 2]
    assert err.count("\n") == 1 and "only an interrupted or loaded run can be resumed" in err, err
    summary = json.loads(out)
    assert sum(summary["loads"]) == summary["messages"] == sum(exact.values())  # routed once, not twice
    assert summary["totals"] == "exact" and summary.get("resumes") == 1
    [counts] = [p for p in tmp_path.glob("c*.tsv")]  # the loser wrote nothing
    assert counts_file(counts) == dict(exact)
    shown = keysplit("runs", "show", "L", "--json", home=home, cwd=tmp_path)
    assert sum(json.loads(shown.stdout)["summary"]["loads"]) == sum(exact.values()), shown.stdout


def _temp_of(pid: int) -> list[Path]:
    base = Path(tempfile.gettempdir())
    return sorted(p for prefix in ("keysplit-local-", "keysplit-resources-") for p in base.glob(f"{prefix}{pid}-*"))


def test_what_a_runner_killed_with_9_leaves_in_tmp_is_removed_by_the_next_run(home, tmp_path):
    write_text(tmp_path / "t.txt", 3000)
    proc = start("run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "-S", "1", "-W", "2", "-A", "1",
                 "--cpu-delay", "2", "--run-id", "K", home=home, cwd=tmp_path)
    try:
        wait_for(lambda: acked(home, "K") > 50, 180, "the run to ack lines")
        left = _temp_of(proc.pid)
        assert len(left) == 2, left
        children = psutil.Process(proc.pid).children(recursive=True)
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    wait_for(lambda: not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children), 30,
             "the orphaned tasks to exit")
    assert all(p.exists() for p in left)  # what kill -9 leaves
    write_text(tmp_path / "s.txt", 20)
    after = keysplit("run", "wordcount", "-g", "kg", "--dataset", "text:s.txt", "-S", "1", "-W", "1", "-A", "1",
                     home=home, cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    assert not any(p.exists() for p in left)
    redis_server.stop_server(home, force=True)


def test_a_run_stopped_while_loading_is_not_offered_a_resume(home, tmp_path):
    returncode, err = interrupt_while_loading(home, tmp_path, signal.SIGINT)
    assert returncode == 130 and err.count("\n") == 1, err
    assert "--resume" not in err and "keysplit runs delete L" in err and "not completely loaded" in err, err


def test_a_machine_where_no_topology_can_start_is_told_to_raise_its_limit_not_to_shrink_the_run(tmp_path):
    write_text(tmp_path / "t.txt", 10)
    result = keysplit("run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "-S", "1", "-W", "1",
                      home=tmp_path / "home", cwd=tmp_path,
                      preexec_fn=functools.partial(resource.setrlimit, resource.RLIMIT_NOFILE, (64, 64)))
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "ulimit -n 64" in result.stderr and "raise that limit" in result.stderr
    assert "lower -S" not in result.stderr
    assert not (tmp_path / "home").exists()  # refused before anything started


def test_counts_out_on_a_full_disk_after_a_finished_run_says_the_counts_are_safe_in_redis(disk, home, tmp_path):
    """The run finished and its counts are in Redis; only the file cannot be written: the summary is printed, and
    the one line names the cause, where the counts are and the command that writes them."""
    text = tmp_path / "t.txt"
    lines = [[f"word{i}", f"word{i // 2}", "common"] for i in range(8000)]
    text.write_text("".join(" ".join(words) + "\n" for words in lines))  # counts: ~100 KB
    exact: dict = {}
    for words in lines:
        for word in words:
            exact[word] = exact.get(word, 0) + 1
    disk.prepare(home)  # fsize: the server runs on its own, out of reach of the limit put on the command below
    done = keysplit("run", "wordcount", "-g", "kg", "--dataset", f"text:{text}", "-S", "1", "-W", "2", "-A", "1",
                    "--run-id", "full", home=home, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    counts = disk.root / "counts.tsv"
    extra: dict = {}
    if disk.kind == "tmpfs":
        disk.fill(home, room=0)
    else:  # a file size limit on this command (SIGXFSZ ignored, so the write fails as on a full disk)
        def limit() -> None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))  # its state files fit
        extra = {"preexec_fn": limit, "restore_signals": False}
    done = keysplit("run", "wordcount", "--collect", "full", "--counts-out", str(counts), home=home, cwd=tmp_path,
                    **extra)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"keysplit: error: cannot write --counts-out {counts}: ")
    assert "; run full finished and its counts are safe in Redis: write them once there is room with `keysplit " \
           f"run wordcount --collect full --counts-out {counts}`" in done.stderr
    assert "run full" in done.stdout and not counts.exists()  # the summary shown, no partial file
    if disk.kind == "tmpfs":
        disk.free(home)
    done = keysplit("run", "wordcount", "--collect", "full", "--counts-out", str(counts), home=home, cwd=tmp_path)
    assert done.returncode == 0 and counts_file(counts) == dict(exact)  # what the line said to type
