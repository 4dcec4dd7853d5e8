"""Evaluation metrics of Gedik §3.4 and §5 over a whole domain (numpy arrays, one entry per item).

- per-resource load ``L_k(i) = sum_{p(d) = i} beta_k(f(d))`` (eqs. 1, 3, 5; see ``resources`` for eq. 3),
- relative load imbalance ``b = (prod_k b_k)^(1/3)`` with ``b_k = r_k / alpha_k`` and ``r_k = max_i L_k(i) /
  min_i L_k(i)`` (eqs. 2-6, 11); a channel without load gives ``r_k = inf``,
- migration cost ``M = sum_d beta_s(f(d)) * 1(p^(t)(d) != p^(t+1)(d))`` (eq. 9) and the relative migration
  cost ``m = M / Lbar_s`` with ``Lbar_s = sum_d beta_s(f(d)) / N^(t+1)``, the ideal of adding one channel
  (eqs. 10, 12).

>>> import numpy as np
>>> from keysplit.partitioning.resources import Resources
>>> f = np.array([0.5, 0.3, 0.2])
>>> b, parts = relative_imbalance(np.array([0, 1, 1]), f, 2, Resources.parse("LLL", alpha=1.2))
>>> round(b, 4), [round(x, 4) for x in parts]
(0.8333, [0.8333, 0.8333, 0.8333])
>>> round(relative_migration(np.array([0, 0, 0]), np.array([0, 1, 1]), f, 2, Resources.parse("LCL")), 3)
1.0
"""

from __future__ import annotations

import math

import numpy as np

from keysplit.partitioning.resources import Resources


def channel_loads(assign: np.ndarray, weights: np.ndarray, workers: int) -> np.ndarray:
    """L(i) for each channel i: the sum of ``weights`` of the items assigned to it."""
    return np.bincount(assign, weights=weights, minlength=workers)[:workers]


def load_ratio(loads: np.ndarray) -> float:
    """r = max / min (eqs. 2, 4, 6); inf when a channel has no load, 1 for a single channel."""
    lo = float(loads.min())
    hi = float(loads.max())
    if hi == lo:
        return 1.0
    return hi / lo if lo > 0 else math.inf


def relative_imbalance(assign: np.ndarray, freq: np.ndarray, workers: int,
                       resources: Resources) -> tuple[float, list[float]]:
    """``(b, [b_s, b_c, b_n])`` of eq. 11 for the assignment ``assign`` (channel per item)."""
    parts = []
    for k in range(3):
        weights = np.broadcast_to(np.asarray(resources.weight(k, freq), dtype=np.float64), freq.shape)
        parts.append(load_ratio(channel_loads(assign, weights, workers)) / resources.alphas[k])
    b = math.prod(parts) ** (1.0 / 3.0)
    return b, parts


def migration_cost(before: np.ndarray, after: np.ndarray, freq: np.ndarray, resources: Resources) -> float:
    """eq. 9: the state of the items whose channel changed."""
    state = np.broadcast_to(np.asarray(resources.state(freq), dtype=np.float64), freq.shape)
    return float(state[before != after].sum())


def relative_migration(before: np.ndarray, after: np.ndarray, freq: np.ndarray, workers: int,
                       resources: Resources) -> float:
    """eq. 12: migration cost over the ideal Lbar_s = sum beta_s(f) / N^(t+1) (eq. 10)."""
    state = np.broadcast_to(np.asarray(resources.state(freq), dtype=np.float64), freq.shape)
    ideal = float(state.sum()) / workers
    return migration_cost(before, after, freq, resources) / ideal if ideal > 0 else 0.0
