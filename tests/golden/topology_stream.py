"""The topology model's golden summaries: what the streamed kernel gives on the cases of
``tests/topology_model/test_topology_stream.py``, written to ``topology_stream.json`` beside this script.

The values were made by this script at commit 5589e96, where the streamed kernel was proven equal, line by line and
to the bit, to the whole-array event loop it replaced (the test kept that loop as a reference until then). A
change to the model that is meant to change these cases makes them again (``python tests/golden/topology_stream.py``)
and says why in its commit and here; the numbers are never typed by hand.

Made again since, once: when the spouts' window began to start at Little's law's lines for W / D and grow up to a
latency target (storm/window.py ``window_start``, ``latency_target``). Every line's times, the counters' busy times
and the timeouts came out the same to the bit in all three cases (the digests did not change); only "open"'s
window fields moved (5,000 and 5,000 at 5589e96, now where it started and grew to: its max pending is 5,000, its
window never bound).

Made again, a second time: when a busy counter began to flush right after the tuple that ends past a multiple of
T (storm/flush_clock.py), where it had flushed T after its last flush (besides its tick, behind its backlog, in
both). "closed" and "overload" came out the same to the bit; in "open" (counters 81-84% busy) some lines' times
moved, and of the summary only the counters' utilisation, in its fourth digit.

    .venv/bin/python tests/golden/topology_stream.py
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from keysplit.storm.window import WindowPolicy
from keysplit.topology_model import TopologyParams, line_starts, run_model

GOLDEN = Path(__file__).with_suffix(".json")


def words_stream(lines: int, workers: int, keys: int = 60, seed: int = 3, skew: bool = False) -> tuple:
    """Lines of 1 to 8 words (some empty, which the feed drops), keys at random, workers by key or at random."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 9, lines)
    m = int(lengths.sum())
    key_ids = rng.integers(0, keys, m)
    chosen = key_ids % workers if skew else rng.integers(0, workers, m)
    return line_starts(lengths), chosen, key_ids


CASES = {
    # closed loop, a hot worker (key grouping) with every overhead set: the back-pressure binds
    "closed": (TopologyParams(workers=4, aggregators=2, cpu_delay_ms=1.5, max_pending=40, overhead_us=80.0,
                              counter_overhead_us=60.0, tuple_us=20.0, commit_us=45.0, ack_delay_ms=3.0,
                              hop_delay_ms=2.0, tick_phase_s=-0.3), 3000, True),
    # open loop below saturation, max pending high
    "open": (TopologyParams(workers=3, aggregators=3, cpu_delay_ms=1.0, max_pending=5000, rate=3000.0,
                            overhead_us=50.0, tuple_us=10.0, tick_phase_s=-0.6), 4000, False),
    # open loop above what the workers serve: the queue grows, lines time out, max pending caps the spout
    # (Storm's fixed max pending: no adaptive window)
    "overload": (TopologyParams(workers=2, aggregators=1, cpu_delay_ms=2.0, max_pending=300, rate=20000.0,
                                message_timeout=1.0, aimd=WindowPolicy(decrease=1.0)), 2500, True),
}


def digest(*arrays: np.ndarray) -> str:
    """SHA-256 of the arrays' float64 bytes: every line's times, to the bit."""
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a, dtype=np.float64).tobytes())
    return h.hexdigest()


def golden(case: str) -> dict:
    """The streamed kernel's summary of ``case`` and the digest of its lines' emit and completion times."""
    params, lines, skew = CASES[case]
    starts, workers, keys = words_stream(lines, params.workers, skew=skew)
    kept = run_model(params, starts, workers, keys)
    return {"summary": kept.summary(), "times": digest(kept.emit, kept.done, kept.counter_busy),
            "timeouts": int(kept.timeouts)}


def main() -> int:
    GOLDEN.write_text(json.dumps({case: golden(case) for case in sorted(CASES)}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
