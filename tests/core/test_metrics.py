"""The metrics' definitions, checked on hand-computed cases."""

from __future__ import annotations

import math

import pytest

from keysplit.metrics import ImbalanceSeries, dist_cost, imbalance, imbalance_fraction, load_stddev


def test_imbalance_is_max_minus_mean():
    """PKG §2: I(t) = max_i L_i(t) - avg_i L_i(t)."""
    assert imbalance([4, 2, 0]) == 2.0
    assert imbalance([5, 5]) == 0.0
    assert imbalance_fraction([4, 2, 0]) == pytest.approx(2 / 6)


def test_load_stddev_is_over_percentages():
    """DKG eq. 7: loads 30/10 are 75%/25%, mean 50%, population std-dev 25."""
    assert load_stddev([30, 10]) == pytest.approx(25.0)
    assert load_stddev([1, 1, 1]) == 0.0
    assert load_stddev([3, 0, 0]) == pytest.approx(math.sqrt(((100 - 100 / 3) ** 2 + 2 * (100 / 3) ** 2) / 3))


def test_dist_cost_is_replication_relative_to_key_grouping():
    """DKG eq. 8: 3 keys, each on one worker -> 1.0; each on all of 4 workers -> 4.0."""
    assert dist_cost([1, 1, 1], 3) == 1.0
    assert dist_cost([3, 3, 3, 3], 3) == 4.0


def test_average_imbalance_fraction_is_the_mean_over_checkpoints():
    series = ImbalanceSeries(checkpoint=2)
    series.record(2, [2, 0])  # I = 1, I/t = 0.5
    series.record(4, [2, 2])  # I = 0
    assert series.avg_fraction == pytest.approx(0.25)
    with pytest.raises(ValueError):
        ImbalanceSeries(0)
