"""The frequency threshold delta (Gedik §4.1.3, eqs. 14-17) and the quadratic post-processing step.

- eq. 15: ``theta_k = (alpha_k - 1) / (1 + alpha_k / (N - 1))``, the largest relative deviation of one
  channel's load from the mean that keeps max/min <= alpha_k (one channel at alpha_k * x, the rest at x).
- eq. 16: an untracked item of frequency delta may add ``beta_k(delta)`` to one channel; allow that to be a
  fraction sigma of the tolerated imbalance, ``beta_k(delta_k) <= sigma * theta_k * mean L_k``.
- eq. 17: delta_k = 1 (constant), ``sigma * theta_k / N`` (linear), ``sqrt(sigma * theta_k / (|D| * N))``
  (quadratic); ``delta = min_k delta_k``.
- post-processing for quadratic betas: with I the items at or above delta, the mean load is re-estimated as
  ``(sum_{d in I} beta_k(f(d)) + (|D| - |I|) * beta_k((1 - sum_I f) / (|D| - |I|))) / N`` and
  ``delta_k' = sqrt(sigma * theta_k * mean L_k)``. We divide by N so that, with I empty, delta_k' equals
  eq. 17's delta_k (eq. 17 uses mean L_k = 1/(|D| N)); the paper's text omits the /N but needs it for
  "delta' is higher than delta".

With N = 1 there is nothing to balance (theta = 0 and every key goes to the only channel): delta is
``inf`` and nothing is tracked.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from keysplit.errors import SpecError
from keysplit.partitioning.resources import Resources, beta


def theta(alpha: float, workers: int) -> float:
    """eq. 15: ``(alpha - 1) * (1 + alpha / (N - 1))^-1``; 0 for a single channel.

    >>> round(theta(1.2, 10), 6)
    0.176471
    """
    if workers <= 1:
        return 0.0
    return (alpha - 1.0) / (1.0 + alpha / (workers - 1))


def check_sigma(sigma: float) -> None:
    if not 0 < sigma <= 1:
        raise SpecError(f"sigma must be in (0, 1] (the share of the tolerated imbalance left to untracked keys), "
                        f"got {sigma}")


def delta_k(kind: str, alpha: float, workers: int, sigma: float, domain: int) -> float:
    """eq. 17 for one resource."""
    if workers <= 1:
        return math.inf
    t = theta(alpha, workers)
    if kind == "c":
        return 1.0
    if kind == "l":
        return sigma * t / workers
    return math.sqrt(sigma * t / (domain * workers))


def frequency_threshold(resources: Resources, workers: int, sigma: float = 0.1, domain: int = 10**6) -> float:
    """eq. 17: ``delta = min_k delta_k`` (before the quadratic post-processing).

    >>> round(frequency_threshold(Resources.parse("LCL"), 10), 8)
    0.00176471
    """
    check_sigma(sigma)
    return min(delta_k(kind, a, workers, sigma, domain) for kind, a in zip(resources.kinds, resources.alphas))


def quadratic_delta(kind: str, alpha: float, workers: int, sigma: float, domain: int,
                    tracked: Mapping[str, float]) -> float:
    """The post-processed delta_k' for a quadratic resource, from the items ``tracked`` at the first delta."""
    t = theta(alpha, workers)
    total_f = sum(tracked.values())
    rest = domain - len(tracked)
    load = sum(beta(kind, f) for f in tracked.values())
    if rest > 0:
        load += rest * beta(kind, max(0.0, 1.0 - total_f) / rest)  # worst case for the untracked items
    return math.sqrt(sigma * t * load / workers)


def select_tracked(frequencies: Mapping[str, float], resources: Resources, workers: int, sigma: float = 0.1,
                   domain: int = 10**6, slack: float = 0.0) -> tuple[float, dict[str, float]]:
    """``(delta, D_p)``: the threshold and the items whose frequency is at least ``delta - slack``.

    ``frequencies`` may hold only the candidates; ``domain`` is |D|, used only by quadratic resource
    functions. With lossy-counter estimates (undercounts by at most epsilon) pass ``slack = epsilon``: the
    paper tracks every item the counter returns for support delta, i.e. with ``c_a >= (delta - epsilon) n``.
    """
    if domain < 1:
        raise SpecError(f"the domain size |D| must be at least 1, got {domain}")
    delta = frequency_threshold(resources, workers, sigma, domain)
    tracked = {d: f for d, f in frequencies.items() if f >= delta - slack}
    if "q" in resources.kinds and workers > 1:
        deltas = []
        for kind, a in zip(resources.kinds, resources.alphas):
            if kind == "q":
                deltas.append(quadratic_delta(kind, a, workers, sigma, domain, tracked))
            else:
                deltas.append(delta_k(kind, a, workers, sigma, domain))
        delta = max(delta, min(deltas))
        tracked = {d: f for d, f in tracked.items() if f >= delta - slack}
    return delta, tracked
