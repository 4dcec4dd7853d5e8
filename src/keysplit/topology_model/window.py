"""The spouts' adaptive window in the topology model: the rule of ``keysplit.storm.window`` for the model's kernel.

The model has one in-flight bound for all spouts (``max_pending x spouts``), so it keeps one window for them all:
limit ``max_pending x spouts``, at least ``aimd_min x spouts`` lines, growing ``aimd_increase x spouts`` lines per
window of completions (each of the P spouts grows by ``aimd_increase`` per window of its own acks, a P-th of the
whole). What differs from the spout, and why it is enough here:

- the model replays nothing: a line that outlives the message timeout still completes once (its ``timeouts``
  count says how many did). It learns of the timeout when the line completes, not at ``emit + timeout``, and
  cuts then, once per round as the spout does (only a line emitted after the last cut cuts again);
- so the model does not reproduce a meltdown's replays; what it reproduces is where a saturated closed loop
  settles: the lines in flight, hence the queueing and the latency, are bounded by the window the timeouts leave,
  not by max pending;
- open loop (``--arrivals open``) too, where the kernel forgives the schedule's lag after a cut as the spout does
  (storm/spout_pacing.py).

- the window starts at ``start x spouts`` lines (``keysplit.storm.window.window_start``: Little's law for W / D
  at the target; max pending without a delay, or when lower) and grows only while the lines
  completing took no longer than the latency target (``keysplit.storm.window.latency_target``: what a line waits
  when nothing queues, and half a flush period more), the first one over it ending slow start (unless it was
  emitted before the first completion: the start-up's), as the spouts' window does;
- it grows only while it limits the spouts (at least half of it out, or it held a line back while the completed
  line was out: the kernel notes when, :func:`note_full`), as the spouts' window does.

State, one float64 array (numba's kernel updates it in place; see :func:`new_window` for the slots).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from keysplit.storm.window import WINDOW_START, WindowPolicy

#: Slots of the window's state: size, slow-start threshold, time of the last cut, completions since it, the lowest
#: size, the cuts, the rule's limit, increase, decrease and minimum, and the width of a bucket of recent
#: completions, the latency target (0: none), the time of the first completion (inf: none yet), when the window last
#: held a line back (-inf: never); then :data:`BUCKETS` counts and the periods they count (the last message
#: timeout's completions).
W_SIZE, W_THRESHOLD, W_LAST_CUT, W_ACKS, W_LOWEST, W_CUTS, W_LIMIT, W_INCREASE, W_DECREASE, W_MIN, W_WIDTH, \
    W_TARGET, W_FIRST, W_FULL = range(14)
BUCKETS = 16
_COUNTS, _PERIODS = 14, 14 + BUCKETS


def new_window(max_pending: int, spouts: int, timeout: float, policy: WindowPolicy | None = None,
               target: float = 0.0, start: int | None = WINDOW_START, slow_start: bool = True) -> np.ndarray:
    """A window of at most ``max_pending x spouts`` lines; ``timeout`` and ``target`` (the latency up to which it
    grows past its start, 0: none, and it starts at max pending) in seconds; ``start`` the lines each spout's
    window starts at (``keysplit.storm.window.window_start``; None: max pending)."""
    policy = policy or WindowPolicy()
    limit = float(max_pending * spouts)
    state = np.zeros(_COUNTS + 2 * BUCKETS)
    state[W_FIRST] = math.inf
    state[W_FULL] = -math.inf
    state[W_WIDTH] = timeout / BUCKETS
    state[_PERIODS:] = -float(BUCKETS)
    state[W_THRESHOLD] = state[W_LIMIT] = limit
    grows = target > 0 and policy.decrease < 1.0  # decrease 1: Storm's fixed max pending, as the spout's
    starts_below = grows and start is not None  # None: max pending
    state[W_SIZE] = state[W_LOWEST] = min(limit, float(max(1, start) * spouts)) if starts_below else limit
    state[W_TARGET] = target if grows else 0.0
    if grows and not slow_start:  # a start sized for the workers' rate grows additively only, as the spout's
        state[W_THRESHOLD] = state[W_SIZE]
    state[W_LAST_CUT] = -math.inf
    state[W_INCREASE], state[W_DECREASE] = policy.increase * spouts, policy.decrease
    state[W_MIN] = float(policy.minimum * spouts)
    return state


@numba.njit(cache=True)
def window_lines(state: np.ndarray) -> int:
    """The lines the spouts may have in flight now."""
    return int(max(state[W_MIN], math.floor(state[W_SIZE])))


@numba.njit(cache=True)
def note_full(state: np.ndarray, now: float) -> None:
    """The window held a line back at ``now`` (the spout's ``AdaptiveWindow.allows`` refusing one)."""
    state[W_FULL] = max(state[W_FULL], now)


@numba.njit(cache=True)
def on_complete(state: np.ndarray, emitted: float, now: float, timed_out: bool, in_flight: int) -> None:
    """A line emitted at ``emitted`` completed at ``now`` (``timed_out``: later than the message timeout), leaving
    ``in_flight`` lines out: cut once per round on a timeout, else grow (slow start below the threshold, additive
    above) while the window limits the spouts (at least half of it in use, or it held a line back since this one
    was emitted), as ``keysplit.storm.window.AdaptiveWindow`` does."""
    period = math.floor(now / state[W_WIDTH])
    if timed_out:
        if emitted >= state[W_LAST_CUT] and state[W_DECREASE] < 1.0:
            recent = 0.0  # completions within the last timeout: a cut never goes below them
            for b in range(BUCKETS):
                if period - state[_PERIODS + b] < BUCKETS:
                    recent += state[_COUNTS + b]
            size = max(state[W_MIN], recent, min(state[W_SIZE], float(in_flight + 1)) * state[W_DECREASE])
            if size >= state[W_SIZE]:
                return
            state[W_SIZE] = size
            state[W_LOWEST] = min(state[W_LOWEST], size)
            if state[W_ACKS] > 0:
                state[W_THRESHOLD] = size
            state[W_ACKS] = 0.0
            state[W_LAST_CUT] = now
            state[W_CUTS] += 1.0
        return
    state[W_ACKS] += 1.0
    slot = int(period % BUCKETS)
    if state[_PERIODS + slot] != period:
        state[_PERIODS + slot], state[_COUNTS + slot] = period, 0.0
    state[_COUNTS + slot] += 1.0
    size = state[W_SIZE]
    state[W_FIRST] = min(state[W_FIRST], now)
    if state[W_TARGET] > 0 and now - emitted > state[W_TARGET]:  # a queue, not the window, bounds: no more slow start
        if emitted >= state[W_FIRST]:  # (a line emitted before the first completion waited for the start-up)
            state[W_THRESHOLD] = min(state[W_THRESHOLD], size)
        return
    if size < state[W_LIMIT] and (in_flight + 1 >= size / 2 or state[W_FULL] >= emitted):
        step = 1.0 if size < state[W_THRESHOLD] else state[W_INCREASE] / size
        state[W_SIZE] = min(state[W_LIMIT], size + step)
