"""The counters' CPU delay (storm/cpu_delay.py): never faster than 1 / delay words a second, overshoot paid back."""

from __future__ import annotations

import time

from keysplit.storm.cpu_delay import DelayClock, tighten_timer_slack


def serve(clock: DelayClock, batches: list[int]) -> float:
    """Serve back-to-back batches of these sizes; the seconds it took."""
    start = time.perf_counter()
    for words in batches:
        clock.begin(time.perf_counter())
        for _ in range(words):
            clock.work()
        clock.end()
    return time.perf_counter() - start


def test_a_busy_counter_is_never_faster_than_its_delay_and_pays_back_each_batchs_overshoot():
    delay = 0.002
    clock = DelayClock(delay)
    took = serve(clock, [5] * 20)
    # each batch may start at most one overshoot (itself at most one delay) early: 100 words take >= 99 delays
    assert took >= 99 * delay
    assert 0.0 <= clock.late <= delay


def test_an_idle_counter_owes_nothing():
    clock = DelayClock(0.001)
    clock.begin(time.perf_counter())
    clock.work()
    clock.late, clock.ended = 0.001, time.perf_counter() - 1.0  # it ended late, a second ago
    now = time.perf_counter()
    clock.begin(now)
    assert clock.due == now  # no credit after an idle gap


def test_the_timer_slack_request_is_granted_on_linux():
    import sys

    assert tighten_timer_slack() == sys.platform.startswith("linux")
