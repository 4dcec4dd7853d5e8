"""Algorithm 4, READJ: start from the old mappings and apply moves and swaps (eq. 21) while one lowers the
balance penalty rho; among those, apply the one with the best gain (u - u') / |f(d1) - f(d2)|.

Readings of the pseudo-code (named parameters where they change results):

- ``u`` is the utility of the current explicit hash (the pseudo-code sets u <- 0 and then overwrites it with
  each better candidate's utility inside the scan, which would compare candidates against each other's
  utilities rather than against the current state).
- The best gain starts at -inf, so the search goes on while any readjustment lowers rho, even one whose gain
  is negative (more migration than balance gained): this is the paper's "strong bias towards reducing the
  load imbalance" and its slightly higher migration. ``require_gain=True`` stops at the first step without
  a positive gain instead.
- "if a >= rho(H_p) then break, move on to next option" skips that candidate (continue), as its comment says.
- Items may move at most ``max_moves`` times (the paper's c = 5; a swap moves both items), bounding the
  number of steps; the paper saw no difference from the unlimited version.
- When N went down, items on removed channels start where H_c^(t+1) puts them, and that migration counts.
"""

from __future__ import annotations

import numpy as np

from keysplit.partitioning.penalties import Balance, Setup
from keysplit.partitioning.utility import Utility

#: Relative margin by which rho must drop for a readjustment to count as an improvement (float noise).
RHO_TOLERANCE = 1e-12


def readj(setup: Setup, balance: Balance, utility: Utility, max_moves: int = 5,
          require_gain: bool = False, trace: list | None = None) -> dict[str, int]:
    """The new explicit hash. ``trace``, if given, receives ``(i, d1, j, d2, rho, gamma)`` per applied step."""
    n = setup.workers
    items = setup.items
    r = len(items)
    ws = setup.state_weight
    old = setup.old
    # Tracked items stay put initially; those on channels that no longer exist go where H_c^(t+1) says.
    where = np.array([old[x] if old[x] < n else setup.ring.lookup(items[x]) for x in range(r)], dtype=np.int64)
    m = setup.m0 + float(np.sum(ws[where != old]))
    for x in range(r):
        balance.place(x, int(where[x]))
    moves = np.zeros(r, dtype=np.int64)
    u = float(utility(np.array(balance.rho()), setup.gamma(np.array(m))))
    idx = np.arange(r)
    while r:
        rho_now = balance.rho()
        free = moves < max_moves
        # moves <i, d1, j, -> for every free d1 and every channel j != i
        first = np.repeat(idx[free], n)
        dst = np.tile(np.arange(n), int(free.sum()))
        keep = dst != where[first]
        first, dst = first[keep], dst[keep]
        second = np.full(len(first), -1)
        # swaps <i, d1, j, d2> for free d1 on i and free d2 on j, i < j (a swap and its mirror are the same)
        a, b = np.nonzero((where[:, None] < where[None, :]) & free[:, None] & free[None, :])
        first = np.concatenate([first, a])
        second = np.concatenate([second, b])
        src = where[first]
        dst = np.concatenate([dst, where[b]])
        if not len(first):
            break
        rho = balance.rho_readjust(src, dst, first, second)
        better = rho < rho_now * (1.0 - RHO_TOLERANCE)
        if not better.any():
            break
        is_swap = second >= 0
        s2 = np.where(is_swap, second, 0)
        # eq. 22: migration added by the readjustment (negative when an item returns to its old channel)
        cost = ws[first] * ((old[first] == src).astype(float) - (old[first] == dst))
        cost += np.where(is_swap, ws[s2] * ((old[s2] == dst).astype(float) - (old[s2] == src)), 0.0)
        u_new = utility(rho, setup.gamma(m + cost))
        df = np.abs(setup.freq[first] - np.where(is_swap, setup.freq[s2], 0.0))
        with np.errstate(divide="ignore", invalid="ignore"):
            gain = np.where(better & (df > 0), (u - u_new) / np.where(df > 0, df, 1.0), -np.inf)
        best = int(np.argmax(gain))
        if gain[best] == -np.inf or (require_gain and gain[best] <= 0):
            break
        d1, d2, i, j = int(first[best]), int(second[best]), int(src[best]), int(dst[best])
        balance.move(d1, i, j)
        where[d1] = j
        moves[d1] += 1
        if d2 >= 0:
            balance.move(d2, j, i)
            where[d2] = i
            moves[d2] += 1
        m += float(cost[best])
        u = float(u_new[best])
        if trace is not None:
            trace.append((i, items[d1], j, items[d2] if d2 >= 0 else None, float(rho[best]), float(setup.gamma(m))))
    return {items[x]: int(where[x]) for x in range(r)}
