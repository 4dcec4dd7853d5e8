"""What the construction algorithms share (Gedik §4.2, §4.2.1): the item sets, the migration penalty gamma
(eq. 18) and the balance penalty rho (eqs. 19-20), computed for many candidate mappings at once.

Notation (§4.2): D_p^(t) and D_p^(t+1) are the items tracked before and after; D_o = D_p^(t) \\ D_p^(t+1) (no
longer tracked), D_a = D_p^(t) | D_p^(t+1). For all three algorithms we take the initial migration m from D_o
and the ideal migration m_bar from D_a, as eq. 18 and the text of §4.2.2 define them (the pseudo-code of
Alg. 2/3 writes D_p^(t+1) for the first and Alg. 4 writes D_n for the second, which can be empty).

rho considers only the items in the (partial) explicit hash, as eq. 19 says: the splitter knows no
frequencies for untracked items. Resources with a constant beta are left out of rho (§4.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from keysplit.partitioning.function import BucketedRing, PartitioningFunction
from keysplit.partitioning.resources import Resources, beta
from keysplit.partitioning.threshold import theta


@dataclass
class Setup:
    """The common first steps of Algs. 2-4: H_c^(t+1), the tracked items, m and m_bar."""

    previous: PartitioningFunction
    ring: BucketedRing  # H_c^(t+1)
    workers: int  # N^(t+1)
    items: list[str]  # D_p^(t+1), in decreasing frequency order (ties by key)
    freq: np.ndarray  # f(d) for items
    old: np.ndarray  # p^(t)(d) for items
    state_weight: np.ndarray  # beta_s(f(d)) for items
    m0: float  # migration due to items not tracked anymore (D_o), first term of eq. 18's numerator
    m_bar: float  # ideal migration: sum over D_a of beta_s(f) / N^(t+1)

    @classmethod
    def create(cls, previous: PartitioningFunction, tracked: Mapping[str, float], frequencies: Mapping[str, float],
               workers: int, resources: Resources, vnodes: int) -> Setup:
        if previous.workers == workers:
            ring = previous.ring
        else:
            ring = BucketedRing(range(workers), vnodes=vnodes, seed=previous.ring.seed)  # CREATECONSISTENTHASH
        items = sorted(tracked, key=lambda d: (-tracked[d], d))
        gone = [d for d in previous.explicit_hash if d not in tracked]  # D_o
        m0 = sum(float(resources.state(frequencies.get(d, 0.0))) for d in gone
                 if previous.lookup(d) != ring.lookup(d))
        all_state = sum(float(resources.state(tracked[d])) for d in items)
        all_state += sum(float(resources.state(frequencies.get(d, 0.0))) for d in gone)
        freq = np.array([tracked[d] for d in items], dtype=np.float64)
        return cls(
            previous=previous,
            ring=ring,
            workers=workers,
            items=items,
            freq=freq,
            old=np.array([previous.lookup(d) for d in items], dtype=np.int64),
            state_weight=np.asarray(resources.state(freq), dtype=np.float64),
            m0=m0,
            m_bar=all_state / workers,
        )

    def gamma(self, m):
        """eq. 18 given the numerator m (0 when nothing is tracked at all)."""
        return m / self.m_bar if self.m_bar > 0 else m * 0.0


class Balance:
    """Per-channel loads of the explicit hash for each penalised resource, and rho for candidate changes.

    Resources with the same beta and alpha have the same rho_k, so they are evaluated once and weighted in
    the geometric mean of eq. 20.
    """

    def __init__(self, resources: Resources, workers: int, freq: np.ndarray) -> None:
        groups: dict[tuple[str, float], int] = {}
        for k in resources.penalized:
            key = (resources.kinds[k], resources.alphas[k])
            groups[key] = groups.get(key, 0) + 1
        total = sum(groups.values())
        self.workers = workers
        self.kinds = [kind for kind, _ in groups]
        self.thetas = [theta(alpha, workers) for _, alpha in groups]
        self.exponents = [count / total for count in groups.values()]
        self.weights = [np.asarray(beta(kind, freq), dtype=np.float64) for kind in self.kinds]  # beta_k(f(d))
        self.loads = [np.zeros(workers) for _ in self.kinds]  # L_k(i, H_p)

    def place(self, item: int, channel: int) -> None:
        for w, loads in zip(self.weights, self.loads):
            loads[channel] += w[item]

    def move(self, item: int, src: int, dst: int) -> None:
        for w, loads in zip(self.weights, self.loads):
            loads[src] -= w[item]
            loads[dst] += w[item]

    def _combine(self, parts: list[np.ndarray]) -> np.ndarray:
        out = np.ones_like(parts[0])
        for part, e in zip(parts, self.exponents):
            out = out * np.power(part, e)  # eq. 20: geometric mean over resources
        return out

    def _rho_k(self, spread: np.ndarray, total: np.ndarray | float, g: int) -> np.ndarray:
        """eq. 19: (max - min) / (theta_k * mean load)."""
        mean = np.asarray(total, dtype=np.float64) / self.workers
        denom = self.thetas[g] * mean
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(denom > 0, spread / np.where(denom > 0, denom, 1.0), 0.0)

    def rho(self) -> float:
        """rho of the current explicit hash."""
        if not self.kinds:
            return 0.0
        parts = [self._rho_k(np.array(loads.max() - loads.min()), loads.sum(), g)
                 for g, loads in enumerate(self.loads)]
        return float(self._combine(parts))

    def rho_place(self, items: np.ndarray) -> np.ndarray:
        """rho(H_p + {d => l}) for each candidate item d (rows) and channel l (columns)."""
        if not self.kinds:
            return np.zeros((len(items), self.workers))
        parts = []
        for g, loads in enumerate(self.loads):
            w = self.weights[g][items][:, None]
            max_excl, min_excl = _excluding_one(loads)
            grown = loads[None, :] + w
            spread = np.maximum(grown, max_excl[None, :]) - np.minimum(grown, min_excl[None, :])
            parts.append(self._rho_k(spread, loads.sum() + w, g))
        return self._combine(parts)

    def rho_readjust(self, src: np.ndarray, dst: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """rho after each readjustment <src, first, dst, second> (eq. 21); ``second`` is -1 for a move."""
        if not self.kinds:
            return np.zeros(len(src))
        parts = []
        has_second = second >= 0
        safe_second = np.where(has_second, second, 0)
        for g, loads in enumerate(self.loads):
            w = self.weights[g]
            shift = w[first] - np.where(has_second, w[safe_second], 0.0)
            new_src = loads[src] - shift
            new_dst = loads[dst] + shift
            max_excl, min_excl = _excluding_two(loads, src, dst)
            hi = np.maximum(np.maximum(new_src, new_dst), max_excl)
            lo = np.minimum(np.minimum(new_src, new_dst), min_excl)
            parts.append(self._rho_k(hi - lo, loads.sum(), g))
        return self._combine(parts)


def _excluding_one(loads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each channel l: the max and min load over the other channels."""
    n = len(loads)
    if n == 1:
        return np.array([-np.inf]), np.array([np.inf])
    order = np.argsort(loads, kind="stable")
    lo1, lo2, hi1, hi2 = order[0], order[1], order[-1], order[-2]
    max_excl = np.full(n, loads[hi1])
    max_excl[hi1] = loads[hi2]
    min_excl = np.full(n, loads[lo1])
    min_excl[lo1] = loads[lo2]
    return max_excl, min_excl


def _excluding_two(loads: np.ndarray, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each pair (a[x], b[x]) of distinct channels: the max and min load over the remaining channels."""
    order = np.argsort(loads, kind="stable")
    top = list(order[::-1][:3])
    bottom = list(order[:3])
    max_excl = np.full(len(a), -np.inf)
    min_excl = np.full(len(a), np.inf)
    # Walk the three largest (smallest) from the outside in; the first not in {a, b} is the answer.
    for c in reversed(top):
        max_excl = np.where((a != c) & (b != c), loads[c], max_excl)
    for c in reversed(bottom):
        min_excl = np.where((a != c) & (b != c), loads[c], min_excl)
    return max_excl, min_excl
