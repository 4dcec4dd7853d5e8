"""``keysplit run``'s status while it runs: one line on stderr, rewritten in place, from the run drivers' progress
(runs/progress.py): the feed loading, the tasks starting, then the lines (or rows) acked, the rate and the spouts'
in-flight window. Only on a terminal (stdout and stderr both), never with ``--json``; cleared before the summary
and before any log line, so what stays on the screen is what a pipe would get.

```
16 tasks up in 14 s | acked 12,000 of 30,000 lines (40%), 3,100 lines/s, window 1,200 lines | 22 s
```
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from collections import deque
from typing import Any, TextIO

#: Seconds between redraws of the line (a phase change redraws at once).
REDRAW_SECS = 0.25
#: The rate is measured over the last this many seconds.
RATE_SECS = 5.0
#: Erase the line the cursor is on (ANSI: carriage return, erase in line).
CLEAR = "\r\x1b[K"


class _ClearBeforeLogs(logging.Filter):
    """On the root logger's handlers: erase the status line before a record is written after it."""

    def __init__(self, status: RunStatus) -> None:
        super().__init__()
        self.status = status

    def filter(self, record: logging.LogRecord) -> bool:
        self.status.clear()
        return True


class RunStatus:
    """The ``progress(phase, done, total, **detail)`` callback of a run, drawing the status line (a no-op unless
    ``enabled`` and on a terminal). ``unit``: what the feed holds (line, row)."""

    def __init__(self, unit: str = "line", enabled: bool = True, stream: TextIO | None = None,
                 terminal: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        if terminal is None:
            terminal = self.stream.isatty() and sys.stdout.isatty()
        self.shown = enabled and terminal
        self.unit = unit
        self.started = time.monotonic()
        self.phase = ""
        self.tasks = 0
        self.start_began: float | None = None
        self.up_after: float | None = None  # seconds the tasks took to answer their handshakes
        self.samples: deque[tuple[float, int]] = deque()
        self.drawn = False
        self.last_draw = 0.0
        self.filter = _ClearBeforeLogs(self)
        if self.shown:
            for handler in logging.getLogger().handlers:
                handler.addFilter(self.filter)

    def __call__(self, phase: str, done: int, total: int, **detail: Any) -> None:
        if not self.shown:
            return
        now = time.monotonic()
        changed = phase != self.phase
        self.phase = phase
        if phase == "start":
            self.tasks = total
            if self.start_began is None:
                self.start_began = now
        elif phase == "run":
            if self.up_after is None and self.start_began is not None:
                self.up_after = now - self.start_began
            self.samples.append((now, done))
            while len(self.samples) > 2 and now - self.samples[1][0] >= RATE_SECS:
                self.samples.popleft()
        if changed or now - self.last_draw >= REDRAW_SECS:
            self.last_draw = now
            self.draw(self.text(phase, done, total, detail.get("window"), now))

    def rate(self) -> float | None:
        """Acked per second over the last :data:`RATE_SECS` (None until two samples a second apart)."""
        (t0, n0), (t1, n1) = self.samples[0], self.samples[-1]
        return (n1 - n0) / (t1 - t0) if t1 - t0 >= 1.0 else None

    def text(self, phase: str, done: int, total: int, window: int | None, now: float) -> str:
        units = f"{self.unit}s"
        elapsed = f"{now - self.started:,.0f} s"
        if phase == "load":
            return f"loading the feed: {done:,} {units} | {elapsed}"
        if phase == "start":
            return f"starting {total} tasks: {done} answered the multi-lang handshake | {elapsed}"
        parts = [f"acked {done:,} of {total:,} {units}" + (f" ({100 * done / total:.0f}%)" if total else "")]
        rate = self.rate()
        if rate is not None:
            parts.append(f"{rate:,.0f} {units}/s")
        if window is not None:
            parts.append("window unlimited" if window < 0 else f"window {window:,} {units}")
        up = f"{self.tasks} tasks up in {self.up_after:,.0f} s | " if self.up_after is not None else ""
        return f"{up}{', '.join(parts)} | {elapsed}"

    def draw(self, text: str) -> None:
        width = shutil.get_terminal_size((100, 24)).columns - 1  # a wrapped line could not be rewritten
        self.stream.write(CLEAR + text[:width])
        self.stream.flush()
        self.drawn = True

    def clear(self) -> None:
        if self.drawn:
            self.stream.write(CLEAR)
            self.stream.flush()
            self.drawn = False

    def close(self) -> None:
        self.clear()
        self.shown = False
        for handler in logging.getLogger().handlers:
            handler.removeFilter(self.filter)

    def __enter__(self) -> RunStatus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
