"""Gedik's partitioning functions: structure (Alg. 1), threshold math (eqs. 14-17), penalties (eqs. 18-20),
construction (Algs. 2-4) and the §5 claims at a small size."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from keysplit.errors import SpecError
from keysplit.hashing import HashRing
from keysplit.partitioning.construct import Config, construct
from keysplit.partitioning.experiment import ExperimentConfig, run_experiment, zipf_frequencies
from keysplit.partitioning.function import BucketedRing, PartitioningFunction
from keysplit.partitioning.metrics import relative_imbalance, relative_migration
from keysplit.partitioning.penalties import Balance, Setup
from keysplit.partitioning.readj import readj
from keysplit.partitioning.resources import Resources
from keysplit.partitioning.threshold import frequency_threshold, select_tracked, theta
from keysplit.partitioning.utility import utility

LCL = Resources.parse("LCL")


# --- structure (Alg. 1) -------------------------------------------------------------------------------------


def test_lookup_uses_the_explicit_hash_first_then_the_consistent_hash():
    p = PartitioningFunction(5, {"hot": 3, "warm": 0}, vnodes=200)
    assert p.lookup("hot") == 3 and p.lookup("warm") == 0
    ring = HashRing(range(5), vnodes=200)
    assert all(p.lookup(f"k{i}") == ring.lookup(f"k{i}") for i in range(3000))
    with pytest.raises(ValueError, match="outside"):
        PartitioningFunction(2, {"x": 2})


@pytest.mark.parametrize("workers", [1, 2, 7, 10])
def test_bucketed_ring_matches_the_binary_search_ring(workers):
    ring = BucketedRing(range(workers), vnodes=300)
    plain = HashRing(range(workers), vnodes=300)
    keys = [f"key-{i}" for i in range(4000)]
    assert [ring.lookup(k) for k in keys] == [plain.lookup(k) for k in keys]
    assert ring.assign(ring.key_hashes(keys)).tolist() == [plain.lookup(k) for k in keys]
    ring.add(workers)
    plain.add(workers)
    assert [ring.lookup(k) for k in keys] == [plain.lookup(k) for k in keys]  # re-indexed after a change


# --- threshold math (eqs. 14-17), hand-computed ---------------------------------------------------------------


def test_theta_matches_eq_15_and_its_derivation():
    assert theta(1.2, 10) == pytest.approx(1.8 / 10.2)  # 0.2 / (1 + 1.2/9)
    assert theta(1.2, 2) == pytest.approx(0.2 / 2.2)
    assert theta(1.2, 1) == 0.0
    for alpha, n in [(1.2, 10), (1.5, 4), (4.0, 32)]:
        loads = np.array([alpha] + [1.0] * (n - 1))  # one channel at alpha*x, the rest at x: max/min = alpha
        assert (loads.max() - loads.mean()) / loads.mean() == pytest.approx(theta(alpha, n))


def test_delta_for_each_resource_function_eq_17():
    s = 0.1
    t10 = 1.8 / 10.2
    assert frequency_threshold(Resources.parse("LCL"), 10, s) == pytest.approx(s * t10 / 10)  # 0.0017647
    assert frequency_threshold(Resources.parse("LCL"), 10, s) == pytest.approx(0.00176470588)
    assert frequency_threshold(Resources.parse("CCL"), 2, s) == pytest.approx(0.1 * (0.2 / 2.2) / 2)  # 0.0045454
    assert frequency_threshold(Resources.parse("CCC"), 10, s) == 1.0  # constant: nothing worth tracking
    q = frequency_threshold(Resources.parse("LQL"), 10, s, domain=10_000)
    assert q == pytest.approx(math.sqrt(s * t10 / (10_000 * 10)))  # 4.2008e-4 < the linear 1.76e-3
    assert q == pytest.approx(4.2008e-4, rel=1e-4)
    assert frequency_threshold(LCL, 1, s) == math.inf  # one channel: nothing to balance
    assert frequency_threshold(LCL, 10, 0.05) == pytest.approx(frequency_threshold(LCL, 10, 0.1) / 2)


def test_quadratic_post_processing_raises_delta_and_filters():
    freqs = {"a": 0.5, "b": 0.3, "c": 0.01, "d": 0.0005}
    r = Resources(("c", "q", "c"), (1.2, 1.2, 1.2))
    first = frequency_threshold(r, 2, 0.1, domain=10_000)
    assert first == pytest.approx(math.sqrt(0.1 * (0.2 / 2.2) / (10_000 * 2)))  # 6.742e-4: a, b, c pass
    delta, tracked = select_tracked(freqs, r, 2, 0.1, domain=10_000)
    # mean L_c = (0.25 + 0.09 + 0.0001 + 9997 * (0.19 / 9997)^2) / 2 = 0.1700518; delta' = sqrt(0.1 theta L)
    assert delta == pytest.approx(0.0393183, rel=1e-5)
    assert tracked == {"a": 0.5, "b": 0.3}


def test_bad_parameters_are_refused_with_clear_messages():
    with pytest.raises(SpecError, match="alpha_s must be greater than 1"):
        Resources.parse("LCL", alpha=0.9)
    with pytest.raises(SpecError, match="alpha_s must be greater than 1"):
        Resources.parse("LCL", alpha=1.0)
    with pytest.raises(SpecError, match="three letters from C, L, Q"):
        Resources.parse("LXL")
    for sigma in (0.0, -1.0, 1.01):
        with pytest.raises(SpecError, match=r"sigma must be in \(0, 1\]"):
            frequency_threshold(LCL, 10, sigma)
    with pytest.raises(SpecError, match="unknown utility function 'best'; valid: A, APM, APLM, ATM, ATLM"):
        Config(utility="best")
    with pytest.raises(SpecError, match="unknown construction algorithm 'greedy'; valid: scan, redist, readj"):
        Config(algo="greedy")
    with pytest.raises(SpecError, match="unknown approach"):
        run_experiment(ExperimentConfig(domain=100, approaches=("uniform", "magic")))


# --- penalties and utilities (eqs. 18-20, §4.3) ------------------------------------------------------------------


def test_utility_functions_by_hand():
    rho, gamma = np.array(0.5), np.array(math.e - 1)  # log(1 + gamma) = 1
    assert float(utility("A")(rho, gamma)) == pytest.approx(0.5)
    assert float(utility("APM")(rho, gamma)) == pytest.approx(0.5 + math.e - 1)
    assert float(utility("APLM")(rho, gamma)) == pytest.approx(1.5)
    assert float(utility("ATM")(rho, gamma)) == pytest.approx(0.5 * math.e)
    assert float(utility("ATLM")(rho, gamma)) == pytest.approx(1.0)


def test_balance_penalty_eq_19_20_by_hand():
    freq = np.array([0.5, 0.3, 0.2])
    bal = Balance(Resources.parse("LLL"), 2, freq)
    bal.place(0, 0)
    bal.place(1, 1)
    # loads [0.5, 0.3]: (0.5 - 0.3) / (theta(1.2, 2) * 0.4) = 5.5, the same for s, c and n
    assert bal.rho() == pytest.approx(0.2 / ((0.2 / 2.2) * 0.4))
    placed = bal.rho_place(np.array([2]))[0]  # item of 0.2 on channel 0 or 1
    assert placed[0] == pytest.approx(0.4 / ((0.2 / 2.2) * 0.5))
    assert placed[1] == pytest.approx(0.0)
    moved = bal.rho_readjust(np.array([0]), np.array([1]), np.array([0]), np.array([1]))  # swap 0.5 and 0.3
    assert moved[0] == pytest.approx(bal.rho())
    # a constant resource is left out of rho (§4.4): LCL and LLL give the same rho on linear loads
    lcl = Balance(Resources.parse("LCL"), 2, freq)
    lcl.place(0, 0)
    lcl.place(1, 1)
    assert lcl.rho() == pytest.approx(bal.rho())


def test_migration_penalty_eq_18_by_hand():
    previous = PartitioningFunction(2, {"a": 0, "b": 1, "gone": 1}, vnodes=100)
    ring3 = BucketedRing(range(3), vnodes=100)
    freqs = {"a": 0.4, "b": 0.3, "gone": 0.05}
    setup = Setup.create(previous, {"a": 0.4, "b": 0.3}, freqs, 3, LCL, vnodes=100)
    moved_gone = 0.05 if ring3.lookup("gone") != 1 else 0.0  # D_o: old channel 1 vs H_c^(t+1)
    assert setup.m0 == pytest.approx(moved_gone)
    assert setup.m_bar == pytest.approx((0.4 + 0.3 + 0.05) / 3)  # D_a's state over N^(t+1)
    assert setup.old.tolist() == [0, 1] and setup.items == ["a", "b"]


# --- construction (Algs. 2-4) -----------------------------------------------------------------------------------


def grow(algo: str, freqs: dict[str, float], upto: int, **kw) -> list[PartitioningFunction]:
    p = PartitioningFunction(1, vnodes=200)
    out = [p]
    for n in range(2, upto + 1):
        p = construct(p, freqs, n, Config(algo=algo, vnodes=200, **kw)).function
        out.append(p)
    return out


FREQS = {f"k{i}": float(f) for i, f in enumerate(zipf_frequencies(2000, 1.0)[:200])}


@pytest.mark.parametrize("algo", ["scan", "redist", "readj"])
def test_every_algorithm_maps_exactly_the_tracked_items(algo):
    for n, p in enumerate(grow(algo, FREQS, 6), 1):
        _, tracked = select_tracked(FREQS, LCL, n, 0.1, 10**6)
        assert set(p.explicit_hash) == set(tracked)
        assert all(0 <= c < n for c in p.explicit_hash.values())
        if n > 1:
            assert len(set(p.explicit_hash.values())) == n  # every channel gets some frequent items


@pytest.mark.parametrize("algo", ["scan", "redist", "readj"])
def test_explicit_hash_balances_the_tracked_items_better_than_consistent_hashing(algo):
    p = grow(algo, FREQS, 6)[-1]
    items = sorted(p.explicit_hash)
    f = np.array([FREQS[d] for d in items])

    def spread(assign):
        loads = np.bincount(assign, weights=f, minlength=6)
        return loads.max() - loads.min()

    explicit = np.array([p.explicit_hash[d] for d in items])
    consistent = np.array([p.ring.lookup(d) for d in items])
    assert spread(explicit) < 0.5 * spread(consistent)


def readj_trace(max_moves: int, require_gain: bool = False, util: str = "apm"):
    freqs = {f"k{i}": float(f) for i, f in enumerate(zipf_frequencies(500, 1.0)[:80])}
    p4 = grow("scan", freqs, 4)[-1]
    _, tracked = select_tracked(freqs, LCL, 5, 0.1, 10**6)
    setup = Setup.create(p4, tracked, freqs, 5, LCL, 200)
    balance = Balance(LCL, 5, setup.freq)
    trace: list = []
    start = Balance(LCL, 5, setup.freq)
    for x, c in enumerate(setup.old):
        start.place(x, int(c))
    explicit = readj(setup, balance, utility(util), max_moves, require_gain, trace)
    return start.rho(), balance.rho(), trace, explicit, setup


def test_readj_only_applies_readjustments_that_lower_rho():
    rho0, rho_end, trace, explicit, setup = readj_trace(5)
    rhos = [rho0] + [step[4] for step in trace]
    assert len(trace) > 3
    assert all(b < a for a, b in itertools.pairwise(rhos))  # rho strictly decreases, step after step
    assert rho_end == pytest.approx(rhos[-1])
    assert any(step[3] is not None for step in trace) and any(step[3] is None for step in trace)  # swaps and moves
    assert set(explicit) == set(setup.items)


def test_readj_caps_moves_per_item():
    for cap in (1, 2):
        _, _, trace, _, _ = readj_trace(cap)
        moves: dict[str, int] = {}
        for _, d1, _, d2, _, _ in trace:
            for d in (d1, d2):
                if d is not None:
                    moves[d] = moves.get(d, 0) + 1
        assert max(moves.values()) <= cap
    assert len(readj_trace(1)[2]) <= len(readj_trace(5)[2])


def test_readj_gain_rule_named_parameter():
    _, _, trace_any, _, _ = readj_trace(5)
    _, _, trace_gain, _, _ = readj_trace(5, require_gain=True)
    assert len(trace_gain) <= len(trace_any)
    assert trace_gain[-1][5] <= trace_any[-1][5]  # stopping at the first step without gain migrates no more


def test_shrinking_moves_items_off_removed_channels():
    p = grow("readj", FREQS, 6)[-1]
    for algo in ("scan", "redist", "readj"):
        q = construct(p, FREQS, 4, Config(algo=algo, vnodes=200)).function
        assert q.workers == 4 and all(c < 4 for c in q.explicit_hash.values())


def test_metrics_b_and_m_by_hand():
    f = np.array([0.4, 0.3, 0.2, 0.1])
    b, (bs, bc, bn) = relative_imbalance(np.array([0, 1, 1, 0]), f, 2, LCL)  # loads 0.5/0.5, counts 2/2
    assert (bs, bc, bn) == (pytest.approx(1 / 1.2),) * 3 and b == pytest.approx(1 / 1.2)
    b, (bs, bc, bn) = relative_imbalance(np.array([0, 1, 1, 1]), f, 2, LCL)  # loads 0.4/0.6, counts 1/3
    assert bs == pytest.approx(1.5 / 1.2) and bc == pytest.approx(3 / 1.2)
    assert b == pytest.approx((1.5 * 3 * 1.5) ** (1 / 3) / 1.2)
    # moving items of total frequency 0.3 when going to N=2: m = 0.3 / (1/2)
    assert relative_migration(np.zeros(4, int), np.array([0, 1, 0, 0]), f, 2, LCL) == pytest.approx(0.6)


# --- §5 claims at a small size (|D| = 10^4, 10 runs) -----------------------------------------------------------


@pytest.fixture(scope="module")
def experiment():
    return run_experiment(ExperimentConfig(domain=10_000, runs=10, stream=20_000))


def test_uniform_hashing_migrates_many_times_the_ideal(experiment):
    for n in range(3, 11):
        # hash mod N moves a share 1 - 1/N of the state when N-1 -> N, i.e. N - 1 times the ideal 1/N
        assert experiment.row("uniform", n).m == pytest.approx(n - 1, rel=0.15)
    assert experiment.mean("uniform", "m") > 4 * experiment.mean("consistent", "m")
    for algo in ("scan", "redist", "readj"):
        assert experiment.mean("uniform", "m") > 3 * experiment.mean(algo, "m")


def test_consistent_hashing_migrates_least_but_balances_worst(experiment):
    cons_m = experiment.mean("consistent", "m")
    assert 0.8 < cons_m < 1.1  # about the ideal
    for other in ("uniform", "scan", "redist", "readj"):
        assert cons_m < experiment.mean(other, "m")
    for algo in ("scan", "redist", "readj"):
        assert experiment.mean("consistent", "b") > 1.2 * experiment.mean(algo, "b")
    # its uneven arcs cost it the constant resource, which uniform hashing balances almost perfectly
    assert experiment.mean("consistent", "b_c") > experiment.mean("uniform", "b_c")
    assert experiment.row("consistent", 10).b > 1.5  # far beyond the tolerance alpha at N = 10


def test_readj_balances_best_at_slightly_higher_migration(experiment):
    b = {a: experiment.mean(a, "b") for a in ("scan", "redist", "readj")}
    m = {a: experiment.mean(a, "m") for a in ("scan", "redist", "readj")}
    assert b["readj"] < min(b["scan"], b["redist"])
    assert m["readj"] > max(m["scan"], m["redist"])
    assert m["readj"] < 1.15 * min(m["scan"], m["redist"])  # only slightly
    assert abs(b["scan"] - b["redist"]) < 0.01  # scan and redist are nearly indistinguishable


def test_function_size_grows_with_n_and_stays_compact(experiment):
    sizes = [experiment.row("readj", n).explicit for n in range(2, 11)]
    assert sizes == sorted(sizes) and sizes[-1] > sizes[0]
    assert sizes[-1] < 0.01 * 10_000  # |p| << |D|
    lossy = [experiment.row("readj", n).lossy for n in range(2, 11)]
    assert all(0 < s < 20_000 for s in lossy)
    assert lossy == sorted(lossy) and lossy[-1] > lossy[0]  # Fig. 11: a smaller delta at larger N, more entries


def test_quadratic_post_processing_keeps_the_explicit_hash_as_small_as_linear():
    # Fig. 9: with the post-processing step, LQL tracks the same items as LCL
    lcl = run_experiment(ExperimentConfig(domain=10_000, approaches=("scan",), vnodes=200))
    lql = run_experiment(ExperimentConfig(domain=10_000, approaches=("scan",), vnodes=200, resources="LQL"))
    assert [r.explicit for r in lql.rows] == [r.explicit for r in lcl.rows]
    raw = frequency_threshold(Resources.parse("LQL"), 10, 0.1, 10_000)
    f = zipf_frequencies(10_000, 1.0)
    assert int((f >= raw).sum()) > 3 * lql.row("scan", 10).explicit  # without it: several times more items
    # §5.3: with z = 1 a quadratic computation cost cannot be balanced ("in 30s" in the paper)
    assert lql.row("scan", 10).b_c > 10 > lcl.row("scan", 10).b_c


def test_lower_sigma_balances_better_at_more_migration_and_a_bigger_function():
    # Fig. 5 and Fig. 9: sigma trades balance against migration and the explicit hash's size
    runs = {s: run_experiment(ExperimentConfig(domain=10_000, runs=5, sigma=s, approaches=("redist",), vnodes=300))
            for s in (0.02, 0.1, 0.3)}
    b = [runs[s].mean("redist", "b") for s in (0.02, 0.1, 0.3)]
    m = [runs[s].mean("redist", "m") for s in (0.02, 0.1, 0.3)]
    size = [runs[s].row("redist", 10).explicit for s in (0.02, 0.1, 0.3)]
    assert b[0] < b[1] < b[2]
    assert m[0] > m[1] > m[2]
    assert size[0] > size[1] > size[2]


def test_utility_functions_trade_offs_of_fig_7():
    res = {u: run_experiment(ExperimentConfig(domain=10_000, runs=5, utility=u, approaches=("redist", "readj"),
                                              vnodes=300))
           for u in ("a", "apm", "aplm", "atm", "atlm")}
    b = {(a, u): r.mean(a, "b") for u, r in res.items() for a in ("redist", "readj")}
    m = {(a, u): r.mean(a, "m") for u, r in res.items() for a in ("redist", "readj")}
    # Fig. 7a, readj: U^A ignores migration and migrates the most; the balance hardly depends on U
    assert m[("readj", "a")] == max(m[("readj", u)] for u in res)
    assert max(b[("readj", u)] for u in res) < 1.05 * min(b[("readj", u)] for u in res)
    # Fig. 7b, redist: U^APM and U^APLM balance best; U^ATM and U^ATLM migrate least (35-40% below U^APM)
    for good in ("apm", "aplm"):
        for other in ("a", "atm", "atlm"):
            assert b[("redist", good)] < b[("redist", other)]
    for cheap in ("atm", "atlm"):
        assert m[("redist", cheap)] < 0.8 * m[("redist", "apm")]
