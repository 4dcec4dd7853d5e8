"""Whether a process runs, for the checks that find what a dead process left behind."""

from __future__ import annotations

import os


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
