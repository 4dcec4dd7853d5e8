"""Each run's summary names what bound its throughput (runs/collect.py ``what_bound``), from the numbers it has:
the counters' busy time, their loads, the spouts' window against max pending, a line's latency and the run's
length."""

from __future__ import annotations

import pytest

from keysplit.runs.collect import what_bound


def summary(**changes) -> dict:
    """A closed-loop run of 80,000 words in 10,000 lines over 8 counters at 1 ms, 10 s long."""
    s = {"duration_s": 10.0, "messages": 80_000, "lines": 10_000, "cpu_delay_ms": 1.0, "loads": [10_000] * 8,
         "rate": None, "words_per_second": 8_000.0, "latency_ms": {"mean": 600.0}, "max_pending": 50_000,
         "window": 12_000, "flush_secs": 1.0}
    return {**s, **changes}


@pytest.mark.parametrize(("changes", "busy", "bound_by", "says"), [
    ({}, [9.5] * 8, "workers", "W / D = 8,000 words/s"),
    ({"loads": [24_000] + [8_000] * 7}, [9.5] + [3.2] * 7, "hot counter", "24,000 of 80,000 words"),
    ({"max_pending": 1_000, "window": 1_000, "latency_ms": {"mean": 1000.0}, "words_per_second": 7_600.0,
      "duration_s": 10.5}, [1.2] * 8, "in-flight cap", "1,000 lines x 8.0 words / 1.00 s = 8,000 words/s"),
    # at max pending, but at a quarter of what Little's law lets 1,000 lines carry: the window did not hold it back
    ({"max_pending": 1_000, "window": 1_000, "latency_ms": {"mean": 1000.0}, "words_per_second": 2_000.0,
      "duration_s": 40.0}, [4.0] * 8, "cpu", "no counter was busy more than 10%"),
    ({"duration_s": 1.9, "messages": 8_000, "loads": [1_000] * 8, "latency_ms": {"mean": 800.0}}, [1.0] * 8,
     "flush latency", "a line's 0.80 s"),
    ({"duration_s": 30.0}, [10.0] * 8, "cpu", "no counter was busy more than 33%"),
    ({"rate": 2_000.0, "words_per_second": 1_990.0}, [2.5] * 8, "rate", "2,000 words/s"),
    # a counter killed: its lines in flight came back after the 30 s timeout, the counters idle meanwhile (not "cpu")
    ({"duration_s": 40.0, "timed_out_lines": 120, "message_timeout_secs": 30}, [10.0] * 8, "message timeout",
     "120 line(s) were replayed only once topology.message.timeout.secs = 30 s had passed"),
    ({"duration_s": 400.0, "timed_out_lines": 3, "message_timeout_secs": 30}, [10.0] * 8, "cpu", "busy more"),
])
def test_the_summary_names_what_bound_the_run(changes, busy, bound_by, says):
    got = what_bound(summary(**changes), busy)
    assert got["bound_by"] == bound_by and says in got["bound"], got
