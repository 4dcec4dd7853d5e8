"""The paper's per-word CPU delay, emulated by sleeping: many counters fit on few cores, and each still serves at
most 1 / delay words a second.

A sleep wakes late (the kernel's timer slack, 50 µs by default, then waiting for a core), so a counter that slept
``delay`` per word would serve fewer than 1 / delay words a second, and fewer the busier the machine. The clock
here sleeps until word k's due time instead, k x delay after its batch began, so one word's overshoot shortens the
next word's sleep; a batch that was already waiting when the one before it ended (the counter is busy) has its
first word's sleep shortened by that one's last overshoot, so the overshoot at a batch's end is paid back too
(reading the batch is not: it is the counter's own cost). While words are waiting the counter serves 1 / delay
words a second less only what reading and counting them costs; an idle counter owes nothing. The process asks
for a timer slack of 1 µs (Linux ``prctl(PR_SET_TIMERSLACK)``; elsewhere nothing changes), so each sleep itself
ends closer to its due time.
"""

from __future__ import annotations

import ctypes
import sys
import time

#: The per-word CPU delay of a run (here and on a cluster), a replay and the demo when none is given (ms): one
#: default, so that a default run and a default replay model the same topology, and one at which the workers, not
#: the machine, bind.
DEFAULT_CPU_DELAY_MS = 1.0

#: prctl option that sets the calling thread's timer slack, in nanoseconds (linux/prctl.h).
PR_SET_TIMERSLACK = 29


def tighten_timer_slack(nanoseconds: int = 1000) -> bool:
    """Ask the kernel to wake this thread's sleeps within ``nanoseconds`` of their time; whether it agreed."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


class DelayClock:
    """Per-word due times for a counter with a CPU delay of ``delay`` seconds (module docstring).

    >>> clock = DelayClock(0.001)
    >>> clock.begin(10.0); clock.due
    10.0
    >>> clock.ended, clock.late = 10.0051, 0.0001  # a batch ended 0.1 ms after its last word's due time
    >>> clock.begin(10.0052); round(clock.due, 4)  # the next one was waiting: its first word pays the 0.1 ms back
    10.0051
    >>> clock.begin(11.0); clock.due  # after an idle gap it begins when it arrives
    11.0
    """

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.due = 0.0  # when the current word's work is done
        self.ended = -1.0  # when the last batch ended (perf_counter seconds)
        self.late = 0.0  # how far past its last word's due time it ended

    def begin(self, now: float) -> None:
        """A batch begins at ``now``."""
        busy = now - self.ended < self.delay  # it was waiting while the last batch was served
        self.due = now - self.late if busy else now

    def work(self) -> float:
        """Sleep until the next word is done; returns the time it woke."""
        self.due += self.delay
        now = time.perf_counter()
        if self.due > now:
            time.sleep(self.due - now)
            now = time.perf_counter()
        return now

    def one(self, now: float) -> None:
        """A batch of one word, begun at ``now``, served."""
        self.begin(now)
        self.work()
        self.end()

    def end(self) -> None:
        """The batch's words are done."""
        self.ended = time.perf_counter()
        self.late = min(max(0.0, self.ended - self.due), self.delay)
