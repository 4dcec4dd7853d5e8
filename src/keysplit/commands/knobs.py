"""The topology's knobs, under the same names in `keysplit run` and `keysplit replay`, and checked by `compare`.

``keysplit run`` declares them for the topology it starts; ``keysplit replay`` declares the ones ``run`` has and
the replay's model needs with :func:`add_topology_options` (a test checks both parsers spell them the same).
Both record them under the names of :data:`KNOBS` (the run summary's field names), so ``keysplit compare`` can
refuse a run and a replay whose knobs differ, as it refuses different datasets. The facts (``KNOBS``,
``ARRIVALS``, the overheads) are the topology model's (:mod:`keysplit.topology_model`); this module only declares
the options.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from keysplit.commands.common import non_negative_float, positive_float, positive_int
from keysplit.storm.window import DEFAULT_MAX_PENDING, WINDOW_START
from keysplit.stream import DEFAULT_BATCH, DEFAULT_BATCH_MS
from keysplit.topology_model.params import ARRIVALS, KNOBS

__all__ = ["ARRIVALS", "KNOBS", "add_shared_knobs", "add_topology_options", "overheads", "rate"]

# Bounds on the knobs that set how long a run waits, as --cpu-delay has one (keysplit.sizes.MAX_CPU_DELAY_MS): past
# them a run does nothing but wait (--flush 1e9 flushes never, --rate 1e-9 emits one word in 30 years).
#: The longest aggregation period T (``--flush``), seconds: an hour.
MAX_FLUSH_SECS = 3600.0
#: The longest a router holds a batch (``--batch-ms``), milliseconds: a minute.
MAX_BATCH_MS = 60_000.0
#: The lowest open-loop rate (``run --rate``), words per second: a word a minute.
MIN_RATE = 1 / 60


def _within(low: float, high: float, says: str) -> Callable[[str], float]:
    """A positive number in ``[low, high]``; else argparse's one line, ``says`` (the bound, in words)."""
    def parse(text: str) -> float:
        value = positive_float(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{says}, got {text}")
        return value
    return parse


flush_secs = _within(0.0, MAX_FLUSH_SECS, f"at most {MAX_FLUSH_SECS:,.0f} s (an hour)")
batch_ms = _within(0.0, MAX_BATCH_MS, f"at most {MAX_BATCH_MS:,.0f} ms (a minute)")
rate = _within(MIN_RATE, math.inf, f"at least {MIN_RATE:.4g} words/s (a word a minute)")


def add_shared_knobs(p: argparse.ArgumentParser) -> None:
    """The knobs `keysplit run` and `keysplit replay` both take, beyond -S, -W, --cpu-delay and --rate (which each
    command declares with its own default and help)."""
    p.add_argument("--aggregators", "-A", type=positive_int, default=2, metavar="A",
                   help="aggregator tasks (default 2)")
    p.add_argument("--spouts", type=positive_int, default=1, metavar="P", help="spout tasks (default 1)")
    p.add_argument("--flush", type=flush_secs, default=1.0, metavar="SECS",
                   help="aggregation period T: counters flush partial counts every T s (tick tuples; default 1)")
    p.add_argument("--max-pending", type=positive_int, default=DEFAULT_MAX_PENDING, metavar="N",
                   help="topology.max.spout.pending: lines in flight per spout at most; a spout's window starts at "
                   f"what W / D needs by Little's law (at least {WINDOW_START:,}; max pending at --cpu-delay 0) and "
                   f"grows while lines complete without queueing (default {DEFAULT_MAX_PENDING})")
    p.add_argument("--message-timeout", type=positive_int, default=30, metavar="SECS",
                   help="topology.message.timeout.secs: a line not acked in time is replayed (default 30)")
    p.add_argument("--batch", type=positive_int, default=DEFAULT_BATCH, metavar="N",
                   help="keysplit.batch: a router sends the words its grouping chose for one counter together, up to "
                   f"N in one tuple (1: one tuple per word; default {DEFAULT_BATCH})")
    p.add_argument("--batch-ms", type=batch_ms, default=DEFAULT_BATCH_MS, metavar="MS",
                   help="keysplit.batch_ms: ... or once the first of them waited this long, whichever comes first "
                   f"(default {DEFAULT_BATCH_MS:g})")


def add_topology_options(p: argparse.ArgumentParser) -> None:
    """The replay's copies of `keysplit run`'s knobs (same names and defaults), and the model's own options."""
    add_shared_knobs(p)
    p.add_argument("--arrivals", choices=ARRIVALS, default="closed",
                   help="closed (default): the topology model with the spouts kept at --max-pending, as "
                   "`keysplit run` runs; open: the same model with the spouts emitting --rate words/s (`keysplit "
                   "run --rate`); lindley: the earlier open-loop estimate, one D/D/1 queue per worker at --rate")
    p.add_argument("--calibration", metavar="NAME|FILE",
                   help="the model's costs: a profile made by `keysplit calibrate --name NAME` "
                   "($KEYSPLIT_HOME/calibrations/NAME.json), or a profile's file (default: none, every overhead 0)")
    p.add_argument("--overhead-us", type=non_negative_float, metavar="US",
                   help="runner and protocol time per tuple sent to a counter (a word with --batch 1), microseconds "
                   "(overrides the calibration)")
    p.add_argument("--counter-overhead-us", type=non_negative_float, metavar="US",
                   help="a counter's time per input tuple beyond the CPU delay, microseconds (overrides the "
                   "calibration)")
    p.add_argument("--tick-phase", type=float, metavar="SECS",
                   help="when the first tick falls after the first emit, modulo T (overrides the calibration)")


def overheads(args: argparse.Namespace) -> dict:
    """The calibration file's overheads with the command line's overrides (a KeysplitError for a bad file)."""
    from keysplit.topology_model.calibration import overheads as with_overrides

    return with_overrides(args.calibration, args.overhead_us, args.counter_overhead_us, args.tick_phase)
