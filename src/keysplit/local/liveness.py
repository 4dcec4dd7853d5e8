"""Signs of life of a task that has not answered its multi-lang handshake yet: the CPU time its process uses and
the bytes it writes to stderr.

A Python task imports its modules before it reads the handshake, which takes a second on a quiet machine and a
minute or more on a busy one, nearly all of it on the CPU. Storm never fails a task for loading slowly: a worker
heartbeats to its supervisor from a timer of its own, launched first "so that slow-loading tasks don't cause the
worker to timeout to the supervisor" (apache/storm ``storm-client/.../daemon/worker/Worker.java`` ``start``),
and ``ShellBolt.prepare`` / ``ShellSpout.open`` wait for the subprocess's pid with no limit (``ShellProcess.launch``:
``multilang/JsonSerializer.java`` ``connect``, a blocking read). The supervisor's one limit is for a worker that
shows no sign of life at all: ``supervisor.worker.start.timeout.secs`` (120 s, ``conf/defaults.yaml``;
``storm-server/.../daemon/supervisor/Slot.java`` ``handleWaitingForWorkerStart`` kills and relaunches a worker
with no heartbeat by then). Here a task's process is its own worker, so its heartbeat is its progress: a task is
hung when it has used no CPU and written nothing for ``keysplit.local.startup.timeout.secs`` (default 120 s,
Storm's), however long it has been starting.

The CPU time comes from ``/proc/PID/stat`` (Linux). Where there is none, only stderr counts, and the limit is the
time since the task was spawned: the plain timeout Storm's supervisor applies.
"""

from __future__ import annotations

import os
from typing import NamedTuple

#: Seconds between two looks at a starting task's /proc entry and stderr.
SAMPLE_SECS = 1.0

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

#: ``/proc/PID/stat`` states worth naming when a task hangs (proc(5)).
STATES = {"T": "stopped (SIGSTOP or a debugger)", "t": "stopped by a debugger",
          "D": "in an uninterruptible wait (disk?)", "S": "asleep", "Z": "exited"}


class ProcessStat(NamedTuple):
    cpu_secs: float  # user + system time
    state: str  # R, S, D, T, Z, ...


def process_stat(pid: int) -> ProcessStat | None:
    """The CPU time and state of process ``pid`` (None where /proc cannot say: not Linux, or it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2:].split()  # the command name (in parentheses) may hold spaces
    try:
        return ProcessStat((int(fields[11]) + int(fields[12])) / _TICKS, fields[0])  # utime, stime (fields 14, 15)
    except (IndexError, ValueError):
        return None


class Liveness:
    """When a starting task last showed a sign of life; ``silent_for(now)`` samples it at most every
    :data:`SAMPLE_SECS`."""

    def __init__(self, pid: int, stderr_path: os.PathLike | str | None, now: float) -> None:
        self.pid = pid
        self.stderr_path = stderr_path
        self.last_life = now
        self.checked = float("-inf")
        self.mark: tuple[float | None, int] | None = None
        self.state = ""

    def _stderr_bytes(self) -> int:
        try:
            return os.stat(self.stderr_path).st_size if self.stderr_path else 0
        except OSError:
            return 0

    def silent_for(self, now: float) -> float:
        """Seconds since the process last used CPU or wrote to stderr (since its spawn, if never seen to)."""
        if now - self.checked >= SAMPLE_SECS:
            self.checked = now
            stat = process_stat(self.pid)
            self.state = stat.state if stat else ""
            mark = (stat.cpu_secs if stat else None, self._stderr_bytes())
            if self.mark is not None and mark != self.mark:
                self.last_life = now
            self.mark = mark
        return now - self.last_life

    def describe(self) -> tuple[str, str]:
        """What the last sample saw, for the one line that reports the task hung: what it did not do, and the
        state of its process ("" when /proc cannot say)."""
        if self.mark is None or self.mark[0] is None:
            return "wrote nothing on stderr", ""
        return "used no CPU and wrote nothing on stderr", STATES.get(self.state, "")
