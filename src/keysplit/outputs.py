"""Writing outputs safely: never over an input, never through another user's link, and all-or-nothing.

Every command that writes a file checks first that the file is none of its inputs (the same file under any
spelling: a relative path, a symlink, a hard link), that no folder of its path is a symlink another user planted
in a sticky world-writable folder (:func:`refuse_foreign_links`), and writes it under a temporary name in the
same directory, renamed over the final name only when complete: a failure (a full disk, Ctrl-C, a crash) leaves
the old file or nothing, never an empty or half-written one.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from keysplit.errors import KeysplitError
from keysplit.processes import process_alive


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether the two paths name one file (also through a symlink, a hard link or another spelling)."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet): not the same file
        return False


def inside(path: str | os.PathLike, folder: str | os.PathLike) -> bool:
    """Whether ``path`` is ``folder`` or lies under it (symlinks resolved)."""
    p, f = os.path.realpath(path), os.path.realpath(folder)
    return p == f or p.startswith(f.rstrip(os.sep) + os.sep)


#: The folders keysplit manages inside its state folder: the managed Redis's data (its append-only files, whose
#: loss makes every stored run unreachable), the task logs, the JVM's logs. No output is ever written there.
STATE_FOLDERS = ("redis", "logs", "spark")


def foreign_link(path: str | os.PathLike) -> tuple[str, int, str] | None:
    """The first symlink on ``path`` (any of its folders, or itself) that another user controls, with their uid and
    where it is; None if there is none:

    - a link in a sticky world-writable folder (``/tmp``) owned by neither this user nor that folder's owner: Linux
      refuses to follow it when ``fs.protected_symlinks`` is set (``may_follow_link`` in ``fs/namei.c``), and
      keysplit applies the same rule whatever the setting;
    - any link in a folder that another user (not root) owns, such as ``/tmp/theirs/``: whoever owns the folder
      can put a link there, or replace one, whoever owns the link, and the kernel's rule does not reach one
      level below the sticky folder.

    Either can turn a write into one of this user's files."""
    me = os.geteuid()
    parts = os.path.abspath(os.fspath(path)).split(os.sep)
    folder = os.sep
    for name in parts[1:]:
        if not name:
            continue
        entry = os.path.join(folder, name)
        try:
            st = os.lstat(entry)
            parent = os.stat(folder)
        except OSError:
            return None  # nothing beyond a missing entry: no link to follow
        if stat.S_ISLNK(st.st_mode):
            sticky_shared = parent.st_mode & stat.S_ISVTX and parent.st_mode & stat.S_IWOTH
            if sticky_shared and st.st_uid not in (me, parent.st_uid):
                return entry, st.st_uid, "owns in a shared sticky folder"
            if parent.st_uid not in (me, 0):
                return entry, parent.st_uid, "controls: it is in their folder"
            entry = os.path.realpath(entry)  # an allowed link: the rest of the path is under its target
        folder = entry
    return None


def refuse_foreign_links(option: str, output: str | os.PathLike) -> None:
    """A one-line KeysplitError when ``output``'s path goes through a symlink another user controls
    (:func:`foreign_link`). Every writer calls it, through :func:`refuse_state` before any work and
    :func:`atomic_file` at the write."""
    found = foreign_link(output)
    if found is not None:
        link, uid, where = found
        raise KeysplitError(f"{option} {os.fspath(output)} goes through {link}, a symlink that another user (uid "
                            f"{uid}) {where}; keysplit does not follow it: choose another output path")


def refuse_state(option: str, output: str | os.PathLike) -> None:
    """A one-line KeysplitError when ``output`` is or lies in one of the folders keysplit manages in its state
    folder (:data:`STATE_FOLDERS`), under any spelling (a relative path, a symlink), or goes through another
    user's link (:func:`refuse_foreign_links`)."""
    from keysplit.home import find_home

    refuse_foreign_links(option, output)
    home = os.path.realpath(os.environ.get("KEYSPLIT_HOME") or find_home(Path.cwd()))
    target = os.path.realpath(output)
    for name in STATE_FOLDERS:
        folder = os.path.join(home, name)
        if inside(target, folder):
            raise KeysplitError(f"{option} {os.fspath(output)} is in keysplit's own {folder} (the managed Redis's "
                                "data, task and JVM logs), which no output may overwrite; choose another output")


def refuse_inputs(option: str, output: str | os.PathLike, inputs: Iterable[str | os.PathLike]) -> None:
    """A one-line KeysplitError when ``output`` is one of ``inputs``, or a folder holding one of them, or lies in
    keysplit's own state folders (:func:`refuse_state`)."""
    refuse_state(option, output)
    for source in inputs:
        if same_file(output, source) or (os.path.isdir(output) and inside(source, output)):
            raise KeysplitError(f"{option} {os.fspath(output)} would overwrite the input {os.fspath(source)}; "
                                "choose another output")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _final_mode(path: str) -> int:
    """An existing file keeps its mode; a new one gets the usual 0666 & ~umask (mkstemp makes 0600)."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        return 0o666 & ~_umask()


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, option: str = "output", mode: str = "w",
                permissions: int | None = None) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success it replaces ``path``, on any failure it is removed.
    OSErrors become one-line KeysplitErrors naming ``option``. ``permissions``: the file's mode (else an existing
    file's, or 0666 & ~umask)."""
    path = os.fspath(path)
    refuse_foreign_links(option, path)
    folder = os.path.dirname(os.path.abspath(path))
    # The name comes before the file, and the file is made inside the block that removes it: a signal (SIGTERM
    # raises Stopped) that lands just after the file appears still removes it, which mkstemp's returned name could
    # not promise (the file exists before the name reaches this frame).
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{secrets.token_hex(8)}.tmp")
    ours = True
    try:
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:  # another file took the random name: not ours to remove
            ours = False
            raise
        with open(fd, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as fh:
            yield fh
        os.chmod(tmp, _final_mode(path) if permissions is None else permissions)
        os.replace(tmp, path)
    except OSError as exc:
        if ours:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise KeysplitError(f"cannot write {option} {path}: {exc.strerror or exc}") from None
    except BaseException:
        if ours:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def remove_stale(folder: str | os.PathLike, prefix: str) -> list[str]:
    """Remove the folders of ``folder`` named ``<prefix><pid>-...`` that this user owns and whose process no
    longer runs: the temporary folders a ``kill -9`` left behind (a process removes its own on any other end).
    Returns the paths removed."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        pid = name[len(prefix):].split("-", 1)[0] if name.startswith(prefix) else ""
        if not pid.isdigit() or process_alive(int(pid)):
            continue
        path = os.path.join(folder, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def replace_entry(built: str, final: str) -> None:
    """Move the finished file or folder ``built`` to ``final`` (same file system), replacing what was there.
    A folder cannot be renamed over a non-empty one: the old one is moved aside first and removed after."""
    if os.path.isdir(final) and not os.path.islink(final):
        aside = tempfile.mkdtemp(prefix=f".{os.path.basename(final)}.old.", dir=os.path.dirname(final) or ".")
        os.rename(final, os.path.join(aside, "old"))
        os.rename(built, final)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(built, final)


def non_finite(obj: Any, where: str = "") -> tuple[str, float] | None:
    """The place (``runs[0].latency_p50_ms``) and value of the first NaN or infinity in ``obj``'s dicts and
    lists, else None."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return where or "the value", obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        place = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
        found = non_finite(value, place)
        if found is not None:
            return found
    return None


def json_text(obj: Any, what: str, indent: int | None = 2) -> str:
    """``obj`` as strict JSON (RFC 8259 has no NaN or Infinity, which strict parsers reject): a one-line
    KeysplitError naming the field instead of ever writing one (``json.dumps`` would, by default)."""
    try:
        return json.dumps(obj, indent=indent, allow_nan=False)
    except ValueError:
        where, value = non_finite(obj) or ("a value", math.nan)
        raise KeysplitError(f"{what} would hold {where} = {value!r}, not a finite number, which JSON cannot carry; "
                            "nothing was written") from None
