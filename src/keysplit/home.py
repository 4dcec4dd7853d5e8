"""The project's state folder (``$KEYSPLIT_HOME``, else the nearest ``.keysplit`` from the current folder up, else
``./.keysplit``): the managed Redis's data, stored
calibrations, task logs. It holds every word and count of every run, so it is private to its user.

A state folder, or any folder keysplit keeps in it, is used only when it belongs to the user running keysplit:
a symlink planted there by another local user (``ln -s /tmp/theirs /srv/team/.keysplit``) or a folder owned by
someone else is refused with one line, never followed, chmod-ed or written into (keysplit often runs as root,
which the kernel would let write anywhere)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from keysplit.errors import KeysplitError


def keysplit_home(home: str | os.PathLike | None = None) -> Path:
    """The project's state directory: ``home``, else ``$KEYSPLIT_HOME``, else the ``.keysplit`` folder found the
    way git finds its repository (:func:`find_home`); a symlink or a folder there that is not the user's own is
    refused (:func:`check_own`) before it is resolved."""
    path = Path(os.path.abspath(home or os.environ.get("KEYSPLIT_HOME") or find_home(Path.cwd())))
    check_own(path)
    return path.resolve()


def find_home(start: Path) -> Path:
    """``.keysplit`` in ``start`` or in its nearest parent that has one, else ``start/.keysplit`` (created there
    when first needed): a command run from a subfolder of a project finds the project's runs, as git finds
    ``.git``. A parent's ``.keysplit`` is taken only when it is a real folder of this user's; one that is not (a
    symlink, another user's) is passed over, as are all folders above ``$KEYSPLIT_CEILING`` when it is set
    (git's ``GIT_CEILING_DIRECTORIES``). ``start``'s own is always the answer when it exists, so
    :func:`check_own` judges it and a planted one is refused, not skipped."""
    own = start / ".keysplit"
    if os.path.lexists(own):
        return own
    ceiling = os.environ.get("KEYSPLIT_CEILING")
    me = os.geteuid()
    for folder in start.parents:
        if ceiling and Path(ceiling) not in folder.parents:
            break
        try:
            st = os.lstat(folder / ".keysplit")
        except OSError:
            continue
        if stat.S_ISDIR(st.st_mode) and st.st_uid == me:
            return folder / ".keysplit"
    return own


def _owner(uid: int) -> str:
    try:
        import pwd

        return f"uid {uid} ({pwd.getpwuid(uid).pw_name})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def check_own(path: str | os.PathLike) -> None:
    """Nothing when ``path`` does not exist or is a folder of this user's (reached, if through a symlink, by a
    link of this user's); else a one-line KeysplitError: a symlink or folder of another user, a dangling
    symlink, a file, or a shared folder like /tmp (world-writable, sticky)."""
    path = Path(path)
    me = os.geteuid()
    try:
        link = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise KeysplitError(f"cannot use the state folder {path}: {exc.strerror or exc}") from None
    if stat.S_ISLNK(link.st_mode):
        if link.st_uid != me:
            raise KeysplitError(f"{path} is a symlink owned by {_owner(link.st_uid)}, not by you: keysplit does not "
                                "follow it; remove it, or set KEYSPLIT_HOME to a folder of your own")
        try:
            target = os.stat(path)
        except OSError:
            raise KeysplitError(f"{path} is a symlink to {os.readlink(path)}, which does not exist; remove it or "
                                "create that folder") from None
    else:
        target = link
    if not stat.S_ISDIR(target.st_mode):
        raise KeysplitError(f"{path} is not a folder; keysplit keeps its state in a folder there: remove it, or set "
                            "KEYSPLIT_HOME to another place")
    if target.st_uid != me:
        raise KeysplitError(f"{path} belongs to {_owner(target.st_uid)}, not to you ({_owner(me)}): keysplit keeps "
                            "private data there and does not use another user's folder; set KEYSPLIT_HOME to a "
                            "folder of your own")
    if target.st_mode & stat.S_ISVTX and target.st_mode & 0o002:
        raise KeysplitError(f"{path} is a shared folder (world-writable, sticky, like /tmp), not a private one; "
                            f"set KEYSPLIT_HOME to a folder of its own, e.g. {path}/keysplit-$USER")


def private_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and parents) if needed and make it 0700: the state folder holds every word and count
    of every run (dump.rdb), the server's password and the task logs, none of them for other users. A path
    that is not this user's own folder is refused first (:func:`check_own`)."""
    path = Path(path)
    check_own(path)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise KeysplitError(f"cannot create the folder {path}: {exc.strerror or exc}") from None
    check_own(path)  # a symlink planted between the check and mkdir (which then found it "existing")
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def private_home(home: str | os.PathLike | None = None) -> Path:
    """:func:`keysplit_home`, created private (0700)."""
    return private_dir(keysplit_home(home))
