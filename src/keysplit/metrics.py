"""Load-balance and memory metrics, in the papers' definitions.

- Imbalance (PKG §2): ``I(t) = max_i L_i(t) - mean_i L_i(t)``, with L_i(t) the messages worker i received
  among the first t. ``final_imbalance_fraction = I(m) / m``; ``avg_imbalance_fraction`` is the mean over
  checkpoints t_j (every ``checkpoint`` messages) of ``I(t_j) / t_j``, the "fraction of average imbalance"
  of the paper's Table 2 and Figs. 4-9.
- ``load_stddev`` (DKG eq. 7): population standard deviation of the per-worker load percentages
  ``100 * L_i / sum(L)``.
- ``dist_cost`` (DKG eq. 8): sum over workers of the distinct keys each saw, divided by the number of
  distinct keys. It is the memory (state replication) relative to key grouping: 1.0 for KG, up to W for SG.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def imbalance(loads: Sequence[float]) -> float:
    """I = max load - mean load (PKG §2)."""
    if not loads:
        return 0.0
    return max(loads) - sum(loads) / len(loads)


def imbalance_fraction(loads: Sequence[float]) -> float:
    """I(t) / t, with t = sum of the loads (the messages routed so far)."""
    total = sum(loads)
    return imbalance(loads) / total if total else 0.0


def load_stddev(loads: Sequence[float]) -> float:
    """Population standard deviation of the load percentages 100*L_i/sum(L) (DKG eq. 7)."""
    total = sum(loads)
    if not loads or not total:
        return 0.0
    shares = [100.0 * x / total for x in loads]
    mean = 100.0 / len(loads)
    return math.sqrt(sum((s - mean) ** 2 for s in shares) / len(shares))


def dist_cost(distinct_per_worker: Sequence[int], distinct_keys: int) -> float:
    """Sum of the distinct keys each worker holds / distinct keys overall (DKG eq. 8)."""
    return sum(distinct_per_worker) / distinct_keys if distinct_keys else 0.0


class ImbalanceSeries:
    """I(t) sampled every ``checkpoint`` messages; the mean of I(t_j)/t_j is the average imbalance fraction."""

    def __init__(self, checkpoint: int) -> None:
        if checkpoint < 1:
            raise ValueError(f"checkpoint must be at least 1 message, got {checkpoint}")
        self.checkpoint = checkpoint
        self.times: list[int] = []
        self.values: list[float] = []

    def record(self, t: int, loads: Sequence[float]) -> None:
        self.times.append(t)
        self.values.append(imbalance(loads))

    @property
    def avg_fraction(self) -> float:
        if not self.times:
            return 0.0
        return sum(v / t for t, v in zip(self.times, self.values)) / len(self.times)


def default_checkpoint(messages: int) -> int:
    """The default checkpoint spacing: m/1000 messages, at least 1."""
    return max(1, messages // 1000)
