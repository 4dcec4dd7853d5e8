"""What a hostile or careless user can ask for is refused with one line, exit 2, before it costs anything: outputs
aimed at keysplit's own state (the managed Redis's files), a state folder planted by another user, a jar written
through a symlink, sizes that cannot fit in memory, a line with no end, a FIFO or a device as a dataset, a CPU
delay of years, an unknown env, an unreachable Spark master, and a replay killed half-way.

The commands run through the CLI's entry point in this process where that is enough (a traceback fails the test),
in subprocesses where a process must die or a JVM start."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import psutil
import pytest

from keysplit.cli import main
from keysplit.errors import KeysplitError
from keysplit.runs import redis_server
from keysplit.sizes import MAX_WORKERS, available_bytes


def snapshot(folder: Path) -> dict[str, str]:
    out = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and not path.is_symlink():
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            out[str(path.relative_to(folder))] = digest + oct(path.stat().st_mode)
    return out


def one_line(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("keysplit: error: ") and "Traceback" not in err, err
    return err


@pytest.fixture
def stored(tmp_path, monkeypatch):
    """A state folder whose managed server holds a run's worth of data, stopped (its files at rest)."""
    home = tmp_path / "home"
    monkeypatch.setenv("KEYSPLIT_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    redis_server.connect(home=home).set("keysplit:probe", "kept")
    redis_server.stop_server(home)
    return home


def test_no_output_is_written_into_the_managed_redis_data_or_the_logs(stored, tmp_path, capsys):
    home = stored
    data = home / "redis"
    (tmp_path / "t.txt").write_text("a b c\n")
    (tmp_path / "link.tsv").symlink_to(data / "dump.rdb")
    before = snapshot(home)
    targets = [data / "appendonlydir" / "appendonly.aof.1.incr.aof", data / "appendonly.aof", data / "dump.rdb",
               tmp_path / "link.tsv", Path(".keysplit/../home/redis/x.tsv"), home / "logs" / "x.tsv"]
    for target in targets:
        err = one_line(capsys, ["run", "wordcount", "-g", "kg", "--dataset", "text:t.txt", "--counts-out",
                                str(target)])
        assert "keysplit's own" in err, err
    for argv in (["simulate", "--dataset", "text:t.txt", "-g", "kg", "--plot", str(data / "x.png")],
                 ["datasets", "generate", "zipf:messages=10", "--out", str(data / "appendonly.aof")],
                 ["replay", "--dataset", "text:t.txt", "-g", "kg", "--out", str(data)],
                 ["jar", "--out", str(data / "dump.rdb")]):
        assert "keysplit's own" in one_line(capsys, argv)
    assert snapshot(home) == before
    assert redis_server.connect(home=home).get("keysplit:probe") == "kept"  # and Redis still starts with it
    redis_server.stop_server(home)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files (uid 65534) needs root")
def test_a_state_folder_planted_by_another_user_is_never_followed_nor_touched(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("KEYSPLIT_HOME", raising=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # like /tmp: anyone may create entries
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(theirs, 0o755)
    os.chown(theirs, 65534, 65534)
    link = shared / ".keysplit"
    link.symlink_to(theirs)
    os.lchown(link, 65534, 65534)  # ln -s /tmp/theirs /srv/team/.keysplit, by that user
    monkeypatch.chdir(shared)
    assert "is a symlink owned by uid 65534" in one_line(capsys, ["runs"])
    os.lchown(link, 0, 0)  # a link of ours, to their folder
    assert "belongs to uid 65534" in one_line(capsys, ["runs"])
    monkeypatch.setenv("KEYSPLIT_HOME", str(theirs))  # their folder named directly
    assert "belongs to uid 65534" in one_line(capsys, ["run", "wordcount", "--collect", "x"])
    monkeypatch.setenv("KEYSPLIT_HOME", str(shared))  # a shared folder, like /tmp
    assert "is a shared folder" in one_line(capsys, ["runs"])
    monkeypatch.setenv("KEYSPLIT_HOME", str(tmp_path / "dangling"))
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert "which does not exist" in one_line(capsys, ["runs"])
    st = theirs.stat()  # never chmod-ed, chown-ed or written into
    assert (stat.S_IMODE(st.st_mode), st.st_uid, list(theirs.iterdir())) == (0o755, 65534, [])
    assert stat.S_IMODE(shared.stat().st_mode) == 0o1777 and sorted(p.name for p in shared.iterdir()) == [".keysplit"]


def test_the_jar_is_written_whole_never_through_a_symlink_and_makes_a_missing_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("not yours\n")
    (tmp_path / "out.jar").symlink_to(victim)
    assert "keysplit did not build it" in one_line(capsys, ["jar", "--out", "out.jar"])  # not ours: --force
    assert main(["jar", "--out", "out.jar", "--force"]) == 0
    capsys.readouterr()
    assert victim.read_text() == "not yours\n"
    assert not (tmp_path / "out.jar").is_symlink() and zipfile.is_zipfile(tmp_path / "out.jar")
    assert main(["jar", "--out", "no/such/dir/x.jar"]) == 0  # made, as `sparse jar` makes _build/
    assert "created no/such/dir/" in capsys.readouterr().out and zipfile.is_zipfile(tmp_path / "no/such/dir/x.jar")
    (tmp_path / "file").write_text("")
    assert "cannot create its folder file/sub" in one_line(capsys, ["jar", "--out", "file/sub/x.jar"])
    assert main(["jar"]) == 0 and zipfile.is_zipfile(tmp_path / "_build" / "wordcount.jar")  # the default's folder
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_build", "file", "no", "out.jar", "victim.txt"]  # no temp


def test_absurd_sizes_are_refused_before_any_memory_is_taken(capsys):
    rss = psutil.Process().memory_info().rss
    huge = str(int(available_bytes() / 64) + 1)  # its per-worker state alone cannot fit
    memory = "with -S 5 needs about"
    cases = [(["simulate", "--dataset", "zipf:messages=1000", "-g", "kg", "-W", "99999999999"],
              f"more workers than keysplit can count (at most {MAX_WORKERS:,})"),
             (["simulate", "--dataset", "zipf:messages=1000", "-g", "kg,pkg", "-W", huge], memory),
             (["advise", "--dataset", "zipf:messages=1000", "-W", huge], memory),
             (["replay", "--dataset", "zipf:messages=1000", "-g", "kg", "-W", huge, "--out", "/nonexistent/r"],
              memory)]
    for argv, message in cases:
        started = time.monotonic()
        err = one_line(capsys, argv)
        assert message in err, err
        assert time.monotonic() - started < 10
    assert psutil.Process().memory_info().rss - rss < 200 << 20


def test_the_simulators_key_table_checks_each_growth_before_allocating_it():
    from keysplit.simulator.keyids import KeyTable

    rss = psutil.Process().memory_info().rss
    with pytest.raises(KeysplitError, match="the key table of 1,024 keys at W=1,000,000,000"):
        KeyTable(d=2, workers=10**9, sources=1, split="shuffle")  # 1024 keys x 125 MB of seen bits
    assert psutil.Process().memory_info().rss - rss < 100 << 20


def test_a_line_without_an_end_is_refused_in_bounded_memory(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KEYSPLIT_HOME", str(tmp_path / "home"))
    sparse = tmp_path / "zeros.txt"
    with open(sparse, "wb") as fh:  # 5 GB without a newline, sparse: nothing on disk
        fh.truncate(5 << 30)
    words = tmp_path / "words.txt"
    with open(words, "w", encoding="utf-8") as fh:  # 40 MB of real words on one line
        for _ in range(40):
            fh.write("word " * 200_000 + "x ")
        fh.write("\nand a second line\n")
    rss = psutil.Process().memory_info().rss
    # NUL bytes only: refused as binary from its first 8 KiB, before any line is read
    assert "is not text" in one_line(capsys, ["datasets", "stats", f"text:{sparse}"])
    for argv in (["datasets", "stats", f"text:{words}"], ["simulate", "--dataset", f"text:{words}", "-g", "kg"],
                 ["run", "wordcount", "-g", "kg", "--dataset", f"text:{words}"]):
        err = one_line(capsys, argv)
        assert "line 1: a line longer than 16 MiB" in err, err
    assert psutil.Process().memory_info().rss - rss < 300 << 20
    assert not (tmp_path / "home").exists()  # the run was refused before any server started


def test_a_fifo_or_a_device_is_not_called_empty(tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "is a FIFO (named pipe), not a regular file" in one_line(capsys, ["datasets", "stats", f"text:{fifo}"])
    assert "is a character device, not a regular file" in one_line(capsys, ["datasets", "stats", "text:/dev/zero"])
    (tmp_path / "e.txt").write_text("")
    assert "dataset file is empty" in one_line(capsys, ["datasets", "stats", f"text:{tmp_path / 'e.txt'}"])


def test_a_cpu_delay_of_years_and_an_unknown_env_are_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no config.json here
    for command in (["run", "wordcount", "-g", "kg", "--dataset", "zipf:messages=10"],
                    ["replay", "--dataset", "zipf:messages=10", "-g", "kg"]):
        with pytest.raises(SystemExit) as exit_info:
            main([*command, "--cpu-delay", "1e12"])
        assert exit_info.value.code == 2 and "at most 60,000 ms" in capsys.readouterr().err
    err = one_line(capsys, ["run", "wordcount", "-g", "kg", "--dataset", "zipf:messages=10", "--env", "nosuch",
                            "--redis", "redis://127.0.0.1:1/0"])
    assert "--env nosuch: there is no config.json" in err


def test_an_unreachable_spark_master_is_one_line_at_once(tmp_path):
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "keysplit.cli", "replay", "--dataset", "zipf:messages=100", "-g",
                             "kg", "--master", "spark://127.0.0.1:1", "--out", str(tmp_path / "r")],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "cannot reach the Spark master spark://127.0.0.1:1" in result.stderr
    assert time.monotonic() - started < 30 and not (tmp_path / "r").exists()


def test_a_replay_killed_half_way_leaves_no_result_and_the_next_one_cleans_up(tmp_path):
    out = tmp_path / "r"
    env = {**os.environ, "KEYSPLIT_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-m", "keysplit.cli", "replay", "--dataset",
                             "zipf:messages=3000000,keys=1000", "-g", "kg,pkg", "-W", "4", "-S", "2", "--out",
                             str(out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not list(tmp_path.glob(".r.replay-*/dataset.csv")):  # building, beside --out
            assert proc.poll() is None and time.monotonic() < deadline, "the replay did not start building"
            time.sleep(0.2)
        time.sleep(1.0)
        os.killpg(proc.pid, signal.SIGKILL)  # the command and its JVM
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert not out.exists()  # nothing that looks like a result
    [stale] = tmp_path.glob(".r.replay-*")
    result = subprocess.run([sys.executable, "-m", "keysplit.cli", "replay", "--dataset", "zipf:messages=2000",
                             "-g", "kg", "-W", "2", "-S", "1", "--out", str(out)], env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert json.loads((out / "summary.json").read_text())["dataset"]["messages"] == 2000
    assert not stale.exists() and sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".r.")) == []
