"""One task of the topology: a component subprocess with non-blocking pipes and its counters.

The runner keeps each task's input in its own queue and writes it to the pipe in batches, so a slow bolt
fills its pipe and then its queue (which the cluster watches for back-pressure) without blocking anyone.
Urgent messages (the handshake, task-id replies, heartbeats) jump ahead of queued tuples, which a
multi-lang component tolerates: pystorm keeps commands and task-id lists in separate queues.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections import deque
from pathlib import Path
from typing import Any

from keysplit.latency import LatencyHistogram

from .context import ComponentInfo
from .liveness import Liveness
from .protocol import MessageReader

#: Messages joined into one write.
WRITE_BATCH = 512
#: Bytes read per ``os.read`` (a Linux pipe holds 64 KiB).
READ_SIZE = 1 << 16

COUNTERS = ("emitted", "transferred", "executed", "acked", "failed", "timed_out", "dropped", "errors", "restarts",
            "deaths", "forgotten")


class TaskProcess:
    """A running (or restarting) task: ``component`` x ``index``, Storm task id ``task_id``."""

    def __init__(self, component: ComponentInfo, index: int, task_id: int, conf: dict[str, Any],
                 routers: dict[str, Any]) -> None:
        self.component = component
        self.name = component.name
        self.is_spout = component.is_spout
        self.index = index
        self.task_id = task_id
        self.conf = conf
        self.routers = routers
        self.prefixes: dict[str, str] = {}
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.rfd = -1
        self.wfd = -1
        self.alive = False
        self.ready = False
        self.answered = False  # this process answered the handshake (stays True after it dies)
        self.generation = 0
        self.started_at = 0.0
        self.restart_at: float | None = None
        self.reader = MessageReader()
        self.urgent: list[str] = []
        self.queue: deque[str] = deque()
        self.wbuf: memoryview | None = None
        self.blocked = False  # waiting for the pipe to drain (registered for EVENT_WRITE)
        self.inflight: dict[str, tuple[tuple[int, ...], int]] = {}  # tuple id -> (roots, edge id)
        self.inputs: set[str] = set()  # delivered, neither acked nor failed (Storm's ShellBolt._inputs)
        self.worker = 0  # the worker process (slot) this task runs in
        # spout state
        self.pending = 0  # pending tuple trees (topology.max.spout.pending)
        self.sent_kinds: deque[bool] = deque()  # commands awaiting "sync": True for "next"
        self.next_out = 0  # "next" commands sent and not yet answered by "sync"
        self.next_at = 0.0
        self.emits_since_next = 0  # emits since the spout last had no "next" outstanding
        self.nexts_sent = 0  # "next" commands sent in that time
        self.per_next = 1.0  # emits per "next" call, measured over the last such period
        self.idle = False  # the last period emitted nothing
        self.last_sync = 0.0
        self.complete_latency = LatencyHistogram()  # ms from a tree's emit to its ack (Storm's complete latency)
        self.first_emit: float | None = None  # monotonic: the first acked tree's emit, and the last ack
        self.last_ack: float | None = None
        # monotonic time this process of a spout answered its first ``next``: its ``initialize`` has returned and
        # it can emit (None before, and while it is down); a run's "idle" counts only from then (runs/topology_run)
        self.up_since: float | None = None
        self.stderr_path: Path | None = None
        self.liveness: Liveness | None = None  # signs of life until the handshake is answered (liveness.py)
        self.log_file: Any = None
        for name in COUNTERS:
            setattr(self, name, 0)

    # ---- process lifecycle -------------------------------------------------------------------------
    def spawn(self, cwd: str, env: dict[str, str], stderr_path: Path, handshake: str, now: float) -> None:
        """Start the subprocess and queue the handshake (written before anything else)."""
        self.stderr_path = stderr_path
        with open(stderr_path, "ab") as err:
            self.proc = subprocess.Popen(self.component.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, cwd=cwd, env=env, bufsize=0, close_fds=True)
        self.pid = self.proc.pid
        self.liveness = Liveness(self.pid, stderr_path, now)
        self.rfd = self.proc.stdout.fileno()  # type: ignore[union-attr]
        self.wfd = self.proc.stdin.fileno()  # type: ignore[union-attr]
        os.set_blocking(self.rfd, False)
        os.set_blocking(self.wfd, False)
        self.alive = True
        self.ready = False
        self.answered = False
        self.generation += 1
        self.started_at = now
        self.last_sync = now
        self.restart_at = None
        self.reader = MessageReader()
        self.urgent = [handshake]
        self.queue.clear()
        self.wbuf = None
        self.blocked = False
        self.inflight.clear()
        self.inputs.clear()
        self.sent_kinds.clear()
        self.next_out = 0
        self.next_at = now
        self.emits_since_next = 0
        self.nexts_sent = 0
        self.per_next = 1.0
        self.idle = True  # one call first, to measure how many tuples a call emits
        self.up_since = None

    @property
    def running(self) -> bool:
        """Whether the task has a live process (not dead, not down with its worker waiting for a restart)."""
        return self.alive and self.proc is not None

    def close(self, kill: bool) -> int | None:
        """Close the pipes (and SIGKILL the process if ``kill``); return its exit code if known."""
        self.alive = False
        self.ready = False
        self.up_since = None
        proc = self.proc
        if proc is None:
            return None
        for stream in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                stream.close()  # type: ignore[union-attr]
        if kill and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.kill()
        try:
            return proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()

    def stderr_tail(self, lines: int = 40) -> str:
        """The last lines the process wrote to stderr (its traceback, when it crashed)."""
        if self.stderr_path is None or not self.stderr_path.exists():
            return ""
        with open(self.stderr_path, "rb") as f:
            f.seek(max(0, self.stderr_path.stat().st_size - 16384))
            text = f.read().decode("utf-8", "replace")
        return "\n".join(text.strip().splitlines()[-lines:])

    # ---- writing -----------------------------------------------------------------------------------
    def flush(self) -> bool | None:
        """Write queued messages until the pipe is full. True: all written; False: blocked; None: pipe broke."""
        while True:
            if self.wbuf is None:
                if self.urgent:
                    parts = self.urgent
                    self.urgent = []
                elif self.queue:
                    q = self.queue
                    n = len(q)
                    if n <= WRITE_BATCH:
                        parts = list(q)
                        q.clear()
                    else:
                        parts = [q.popleft() for _ in range(WRITE_BATCH)]
                else:
                    return True
                self.wbuf = memoryview("".join(parts).encode())
            try:
                n = os.write(self.wfd, self.wbuf)
            except BlockingIOError:
                return False
            except OSError:  # BrokenPipeError, or the fd was closed
                return None
            if n == len(self.wbuf):
                self.wbuf = None
            else:
                self.wbuf = self.wbuf[n:]
                return False

    def tree_completed(self, emitted: float) -> None:
        """A tree of this spout completed: count the ack and time it (emit to ack)."""
        now = time.monotonic()
        self.acked += 1
        self.complete_latency.record((now - emitted) * 1000.0)
        self.first_emit = emitted if self.first_emit is None else min(self.first_emit, emitted)
        self.last_ack = now

    def counters(self) -> dict[str, int]:
        """This task's counters, plus its current pending trees (spouts) or queued tuples (bolts)."""
        out = {name: getattr(self, name) for name in COUNTERS}
        out["pending"] = self.pending
        out["queued"] = len(self.queue)
        out["unacked"] = len(self.inputs)
        out["worker"] = self.worker
        out["pid"] = self.pid or 0
        return out
