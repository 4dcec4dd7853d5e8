"""When a counter flushes: at the wall-clock multiples of its period T, the same instants in every counter.

A line is acked once every counter that holds one of its words has flushed, so it waits for the *last* of them.
Storm starts each executor's ticks from its own start (apache/storm ``storm-client/src/jvm/org/apache/storm/executor/
Executor.java``, ``setupTicks``: ``scheduleRecurring(tickTimeSecs, tickTimeSecs, ...)`` on the worker's timer, called
when the executor starts), so counters flushed at their ticks flush at as many phases of the period as there are
counters, and a line of several words waited for the latest: measured on Storm 2.8.8 at light load, a 10-word line's
p50 was 916 ms at T = 1 s where one flush costs T/2 on average (docs/benchmarks/storm-cluster.md). Flushing at the
multiples of T of the wall clock puts every counter's flush at one instant, on every worker of a cluster whose clocks
agree (NTP keeps them within milliseconds), so a line waits for one flush: T/2 on average, whatever its length.

Ticks keep coming, and a counter still flushes at each of its ticks (on Storm at the executor's own phase: an
earlier flush for the words it holds, never a later one), but the instant every counter shares is the clock's: the
counter's own timer thread flushes at each multiple (storm/bolts.py ``CounterBolt``). Integer seconds are all
Storm's ticks can do (``topology.tick.tuple.freq.secs``), so the timer is the counter's, not Storm's.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from logging import Logger


class FlushClock:
    """The periods ``floor(wall time / T)`` of a flush period ``T``; a flush is due once the period has changed since
    the last one.

    >>> clock = FlushClock(1.0, clock=lambda: 10.25)
    >>> clock.due(), clock.until_next()
    (False, 0.75)
    >>> clock.due(11.0), clock.due(10.999)
    (True, False)
    >>> clock.flushed(11.0); clock.due(11.9), clock.due(12.0)
    (False, True)
    """

    def __init__(self, period: float, clock: Callable[[], float] = time.time) -> None:
        if not period > 0 or math.isinf(period):
            raise ValueError(f"a flush period must be a positive number of seconds, got {period}")
        self.period = period
        self.clock = clock
        self.last = self.index(clock())  # the period of the last flush (a new counter: the one it started in)

    def index(self, now: float) -> int:
        return math.floor(now / self.period)

    def due(self, now: float | None = None) -> bool:
        """Whether a multiple of T has passed since the last flush."""
        return self.index(self.clock() if now is None else now) > self.last

    def flushed(self, now: float | None = None) -> None:
        """A flush happened at ``now``."""
        self.last = self.index(self.clock() if now is None else now)

    def until_next(self, now: float | None = None) -> float:
        """Seconds from ``now`` to the next multiple of T."""
        now = self.clock() if now is None else now
        return (self.index(now) + 1) * self.period - now


def start_flush_timer(flushes: FlushClock, lock: threading.Lock, flush: Callable[[], None],
                      written: Callable[[], None], logger: Logger) -> None:
    """A task's flush timer thread: at each multiple of T, ``flush()`` under ``lock`` unless a tuple or tick did
    since, then ``written()`` (the main thread may be waiting for input: what the flush wrote must leave now). A timer
    that stopped would leave an idle task's inputs unacked until they time out, so an error ends the process."""

    def serve() -> None:
        try:
            while True:
                time.sleep(flushes.until_next())
                with lock:
                    if flushes.due():
                        flush()
                        written()
        except Exception:
            logger.exception("the flush timer failed; stopping the task")
            os._exit(1)

    threading.Thread(target=serve, name="flush-timer", daemon=True).start()
