"""Open loop (``keysplit.rate``): when a spout task's next line is due.

The P spout tasks together emit R words a second: a line of k words is due k / (R/P) seconds after the line
before it was due, so line i is due at (words before it) / R, the replay's ``sequence / rate``. A spout that fell
behind (a slow ``next``, a full window) catches up at once, as far as its windows allow.

Once a message timeout has cut the spout's adaptive window (storm/window.py), it catches up no more than
:data:`CATCH_UP_SECS` of its schedule at once: a token bucket of that depth. Without it, the lines the window held
back leave in one burst each time acks open the window, all at the same instant of the flush period: where the
period, not the load, decides which lines time out (a line waits for its counter's tick and then its aggregator's),
every burst lands at the phase that times out, the window is cut again, and the run never ends. Forgiving the lag
sends the held-back lines at the rate instead, spread over the period as the schedule spreads them, and an
overloaded topology is offered no more than the rate while the window settles.
"""

from __future__ import annotations

#: Once the window has been cut, how far behind its schedule a spout may still catch up at once (seconds).
CATCH_UP_SECS = 0.1


class RatePacer:
    """One spout task's schedule at ``rate`` words a second (its share of ``keysplit.rate``).

    >>> pacer = RatePacer(100.0)
    >>> pacer.ready(0.0), pacer.sent(10, 0.0, forgive=False), pacer.ready(0.05), pacer.ready(0.1)
    (True, None, False, True)
    >>> pacer.sent(10, 5.0, forgive=False); pacer.due  # behind: the next line is already due (caught up at once)
    0.2
    >>> pacer.sent(10, 5.0, forgive=True); round(pacer.due, 3)  # after a cut: at most CATCH_UP_SECS behind
    5.0
    """

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.due: float | None = None  # when the next line may be emitted (None: at once)

    def ready(self, now: float) -> bool:
        """Whether the next line is due at ``now``."""
        return self.due is None or now >= self.due

    def sent(self, words: int, now: float, *, forgive: bool) -> None:
        """A line of ``words`` words left at ``now``; ``forgive``: the window has been cut, so a lag beyond
        :data:`CATCH_UP_SECS` is forgiven, not caught up."""
        due = self.due if self.due is not None else now
        if forgive:
            due = max(due, now - CATCH_UP_SECS)
        self.due = due + words / self.rate
