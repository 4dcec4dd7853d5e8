"""The project's state folder (``$KEYSPLIT_HOME`` or ``./.keysplit``): the managed Redis's data, stored
calibrations, task logs. It holds every word and count of every run, so it is private to its user."""

from __future__ import annotations

import os
from pathlib import Path


def keysplit_home(home: str | os.PathLike | None = None) -> Path:
    """The project's state directory: ``home``, else ``$KEYSPLIT_HOME``, else ``./.keysplit``."""
    return Path(home or os.environ.get("KEYSPLIT_HOME") or Path.cwd() / ".keysplit").resolve()


def private_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` (and parents) if needed and make it 0700: the state folder holds every word and count
    of every run (dump.rdb), the server's password and the task logs, none of them for other users."""
    path = Path(path)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def private_home(home: str | os.PathLike | None = None) -> Path:
    """:func:`keysplit_home`, created private (0700)."""
    return private_dir(keysplit_home(home))
