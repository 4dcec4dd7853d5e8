"""Algorithm 3, REDIST: at each step, among all unplaced items and all channels, place the (item, channel)
with the lowest utility per unit of frequency, U(rho, gamma) / f(c). O(R^2 * N) utility evaluations."""

from __future__ import annotations

import numpy as np

from keysplit.partitioning.penalties import Balance, Setup
from keysplit.partitioning.utility import Utility


def redist(setup: Setup, balance: Balance, utility: Utility) -> dict[str, int]:
    n = setup.workers
    channels = np.arange(n)
    remaining = np.arange(len(setup.items))  # D_c, in decreasing frequency order
    explicit: dict[str, int] = {}
    m = setup.m0
    while len(remaining):
        rho = balance.rho_place(remaining)  # rows: candidates c, columns: placements l
        moved = setup.state_weight[remaining][:, None] * (channels[None, :] != setup.old[remaining][:, None])
        u = utility(rho, setup.gamma(m + moved)) / setup.freq[remaining][:, None]  # u' = U(a, gamma) / f(c)
        row, j = divmod(int(np.argmin(u)), n)
        x = int(remaining[row])
        m += moved[row, j]
        explicit[setup.items[x]] = j
        balance.place(x, j)
        remaining = np.delete(remaining, row)
    return explicit
