"""Algorithm 2, SCAN: place the tracked items in decreasing frequency order, each on the channel with the
best utility U(rho, gamma) given the items placed so far. O(R * N) utility evaluations.

Ties go to the lowest channel index, as the pseudo-code's strict ``U < u`` does (redist likewise). rho only
sees max - min, so while two channels are both at the minimum every placement below the maximum ties; with
U^A, U^ATM or U^ATLM nothing breaks the tie and the last channels receive only small items. That is why, as in
the paper's Fig. 7b, U^APM and U^APLM (where gamma breaks it towards the item's old channel) balance best.
"""

from __future__ import annotations

import numpy as np

from keysplit.partitioning.penalties import Balance, Setup
from keysplit.partitioning.utility import Utility


def scan(setup: Setup, balance: Balance, utility: Utility) -> dict[str, int]:
    n = setup.workers
    channels = np.arange(n)
    explicit: dict[str, int] = {}
    m = setup.m0  # migration so far (starts with D_o's)
    for x, d in enumerate(setup.items):  # D_c <- SORT(D_p^(t+1), f), decreasing
        rho = balance.rho_place(np.array([x]))[0]  # a <- rho(H_p + {d => l}) for every l
        moved = setup.state_weight[x] * (channels != setup.old[x])  # beta_s(f(d)) * 1(l != h)
        u = utility(rho, setup.gamma(m + moved))
        j = int(np.argmin(u))  # first l with the lowest utility
        m += moved[j]
        explicit[d] = j
        balance.place(x, j)
    return explicit
