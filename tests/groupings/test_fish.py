"""FISH (docs/groupings/fish.md): CHK on ring successors, estimated-wait assignment, and the
paper's claims on a time-evolving (drift) stream, measured against D-Choices, W-Choices, PKG and SG.

The paper's claims are kept together, in its order, so that one file reads as the reproduction."""

from __future__ import annotations

import functools
import json
import math

import pytest

from keysplit.cli import main
from keysplit.datasets import open_dataset
from keysplit.errors import SpecError
from keysplit.execution import execution, half_fast
from keysplit.groupings import build_grouping, paper_setting
from keysplit.groupings.hosting import route
from keysplit.hashing import HashRing, bucket
from keysplit.simulator import simulate
from keysplit.stream import Resize

# The FISH paper's ZF setting, scaled down: a Zipf ranking that rotates after 80% of the stream.
DRIFT = "drift:z=1.0,keys=10000,messages=100000,seed=1"
SOURCES = 5


def keys_of(spec: str) -> list[str]:
    return [k for _, ks in open_dataset(spec).records() for k in ks]


@functools.cache
def run(grouping: str, workers: int, dataset: str = DRIFT):
    ds = open_dataset(dataset)
    # the paper's setting: independent hash choices for D-C, W-C and PKG (distinct=false)
    return simulate(ds, paper_setting(grouping), workers, SOURCES, messages_hint=ds.params["messages"])


# -- the spec ------------------------------------------------------------------------------------------


def test_spec_parameters_and_defaults():
    [g] = build_grouping("fish:alpha=0.9,epoch=5000", workers=10)
    assert g.describe() == "fish:epoch=5000,alpha=0.9"
    assert g.epoch_counts.epoch == 5000 and g.epoch_counts.alpha == 0.9 and g.epoch_counts.capacity == 1000
    assert g.theta == pytest.approx(1 / 50)  # 1/(5W)
    assert build_grouping("fish:theta=0.1", workers=10)[0].theta == 0.1


@pytest.mark.parametrize("spec", ["fish:alpha=1.5", "fish:epoch=0", "fish:assign=fastest", "fish:placement=x",
                                  "fish:theta=0", "fish:interval=0", "fish:vnodes=0", "fish:d=3",
                                  "fish:hot=some"])
def test_bad_parameters_are_one_line_spec_errors(spec):
    with pytest.raises(SpecError):
        build_grouping(spec, workers=8)


def test_simulate_help_lists_fish_and_its_parameters(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    out = capsys.readouterr().out
    assert "fish" in out and "alpha=0.5" in out and "epoch=1000" in out and "assign=wait" in out


def test_simulate_accepts_fish_with_parameters(capsys):
    assert main(["simulate", "--dataset", "drift:keys=500,messages=5000", "-W", "8",
                 "-g", "fish:alpha=0.9,epoch=500,fish"]) == 0
    out = capsys.readouterr().out
    assert "fish:epoch=500,alpha=0.9" in out


# -- hot-key classification and candidates (Alg. 2, §5) ---------------------------------------------------


def test_hot_keys_get_ceil_w_f_over_fmax_ring_successors():
    """CHK: d_k = clamp(ceil(W f_k / f_max), d_min, W) for hot keys, the first d_k distinct ring successors."""
    workers = 32
    [g] = build_grouping("fish", workers=workers)
    ring = HashRing(range(workers), vnodes=64)
    for k in keys_of("zipf:z=1.0,keys=10000,messages=20000,seed=2"):
        w = g.choose(k, 0.0)
        counts = g.epoch_counts
        c = counts.counts[k]
        if c >= g.theta * counts.total:
            d = min(max(math.ceil(workers * c / counts.max_count), 2), workers)
            assert g.hot_workers[k] >= d  # the largest d_k it was given while hot
            assert w in ring.successors(k, g.hot_workers[k])
        else:
            assert k not in g.hot_workers
            assert w in ring.successors(k, 2)
    top = max(g.epoch_counts.counts, key=g.epoch_counts.counts.get)
    assert g.hot_workers[top] == workers
    assert g.candidates(top) == ring.successors(top, workers)
    cold = next(k for k in keys_of("zipf:z=1.0,keys=10000,messages=20000,seed=2")[::-1] if k not in g.hot_workers)
    assert g.candidates(cold) == ring.successors(cold, 2)


def test_a_hot_key_keeps_its_largest_d_and_falls_back_to_two_choices_when_it_cools_down():
    [g] = build_grouping("fish:epoch=100", workers=16)
    for _ in range(300):  # "a" is the only key: hot, d = W
        g.choose("a", 0.0)
    assert g.hot_workers["a"] == 16
    for i in range(100):  # "b" takes over; "a" is less hot but keeps the d = 16 it was given
        for k in ("b", "b", "b", f"cold{i}", "a"):
            g.choose(k, 0.0)
    counts = g.epoch_counts
    assert math.ceil(16 * counts.counts["a"] / counts.max_count) < 16 <= g.hot_workers["a"]
    for i in range(1000):  # "a" is gone: its counter decays below theta and its d_k is dropped
        g.choose("b", 0.0)
        g.choose(f"cold{i}", 0.0)
    assert "a" not in g.hot_workers
    g.choose("a", 0.0)
    assert g.candidates("a") == HashRing(range(16)).successors("a", 2)


def test_placement_mod_uses_consecutive_workers_from_key_groupings_hash():
    [g] = build_grouping("fish:placement=mod", workers=10)
    assert g.candidates("x") == [bucket("x", 10), (bucket("x", 10) + 1) % 10]
    for _ in range(50):
        g.choose("x", 0.0)
    first = bucket("x", 10)
    assert g.candidates("x") == [(first + i) % 10 for i in range(10)]


def test_memory_stays_bounded_on_a_stream_of_many_distinct_keys():
    [g] = build_grouping("fish:epoch=1000,capacity=500", workers=64)
    for i, k in enumerate(keys_of("zipf:z=0.6,keys=200000,messages=60000,seed=4")):
        g.choose(k, 0.0)
        if (i + 1) % 1000 == 0:  # right after a prune: only keys hot now keep a d_k
            assert len(g.hot_workers) <= 1 / g.theta
    assert len(g.epoch_counts) <= 500
    assert len(g._hot_candidates) <= len(g.hot_workers)


def test_decisions_are_deterministic():
    ds = open_dataset("drift:keys=2000,messages=20000,seed=5")
    first = [w for *_, w in route(ds, build_grouping("fish", 16, 3))]
    again = [w for *_, w in route(ds, build_grouping("fish", 16, 3))]
    assert first == again


# -- heuristic worker assignment (§4.2) --------------------------------------------------------------------


def test_without_capacities_the_estimated_wait_is_least_loaded():
    """No capacity feedback: nothing is believed drained, so assign=wait makes PKG's least-loaded choices."""
    ds = open_dataset("drift:keys=3000,messages=30000,seed=6")
    wait = [w for *_, w in route(ds, build_grouping("fish", 16, 3))]
    load = [w for *_, w in route(ds, build_grouping("fish:assign=load", 16, 3))]
    assert wait == load


def test_backlog_estimate_follows_the_interval_formula():
    """§4.2.1: every interval, backlog = max(0, backlog + assigned_since - capacity * interval)."""
    [g] = build_grouping("fish:interval=2", workers=2)
    g.set_capacities([5.0, 20.0])
    for _ in range(50):
        g.choose("k", 0.5)  # one hot key, both workers candidates
    sent = list(g.local_loads)
    assert g.estimated_queue() == [float(x) for x in sent]
    assert g.estimated_wait() == pytest.approx([sent[0] / 5.0, sent[1] / 20.0])
    g.choose("k", 2.0)  # the first interval ended at t=2: drain 10 and 40
    expected = [max(0.0, sent[0] - 10.0), max(0.0, sent[1] - 40.0)]
    expected[0 if g.local_loads[0] > sent[0] else 1] += 1.0  # plus the tuple just sent
    assert g.estimated_queue() == pytest.approx(expected)
    g.choose("k", 9.0)  # three more intervals (t=4, 6, 8) drain 3 * capacity * 2
    assert g.estimated_queue()[0] <= 1.0 and g.estimated_queue()[1] <= 1.0


def test_estimated_wait_splits_a_hot_key_in_proportion_to_capacity():
    """A key all workers may take, at the workers' total capacity: shares follow capacities (§4.2.2),
    where least loaded splits evenly."""
    caps = [100.0, 300.0]
    [wait] = build_grouping("fish:interval=1", workers=2)
    wait.set_capacities(caps)
    [load] = build_grouping("fish:interval=1,assign=load", workers=2)
    load.set_capacities(caps)
    for i in range(4000):  # 400 tuples/s for 10 s
        wait.choose("hot", i / 400)
        load.choose("hot", i / 400)
    assert wait.local_loads[1] / 4000 == pytest.approx(0.75, abs=0.01)
    assert load.local_loads == [2000, 2000]


def test_set_capacities_checks_its_input():
    [g] = build_grouping("fish", workers=4)
    with pytest.raises(SpecError, match="4 positive"):
        g.set_capacities([1.0, 2.0])
    with pytest.raises(SpecError):
        g.set_capacities([1.0, 2.0, 0.0, 1.0])


@pytest.mark.parametrize("workers", [16, 64])
def test_with_heterogeneous_workers_waiting_time_beats_least_loaded(workers):
    """Fig. 16: half the workers twice as fast, offered exactly the cluster's capacity. Estimated-wait
    assignment finishes close to the end of the stream; least loaded (equal tuple counts) leaves the slow
    half behind: a longer execution time and far longer latencies."""
    ds = open_dataset("drift:z=1.0,keys=10000,messages=60000,seed=1")
    caps = half_fast(workers, 10_000.0)  # the simulator's default rate: 10,000 messages/s
    wait = execution(ds, "fish", workers, caps, SOURCES)
    load = execution(ds, "fish:assign=load", workers, caps, SOURCES)
    assert wait.execution_time <= 1.05 * wait.stream_time
    assert wait.execution_time <= 0.8 * load.execution_time
    assert wait.mean_latency * 10 <= load.mean_latency
    assert wait.p99_latency * 10 <= load.p99_latency


# -- worker changes (§5) ---------------------------------------------------------------------------------


def test_resize_adds_and_removes_workers_on_the_ring():
    ds = open_dataset("drift:keys=2000,messages=20000,seed=7")
    gs = build_grouping("fish", 10, 2)
    seen = set()
    for n, (*_, w) in enumerate(route(ds, gs)):  # route calls choose lazily: a resize applies from n + 1
        if n > 12000:
            assert w < 9
        elif n > 5000:
            seen.add(w)
        if n in (5000, 12000):
            for g in gs:
                g.resize(11 if n == 5000 else 9)
    assert seen == set(range(11))
    assert gs[0].theta == pytest.approx(1 / 45)
    assert gs[0].ring.workers == list(range(9))
    assert len(gs[0].local_loads) == 9


def test_simulate_resize_runs_fish():
    ds = open_dataset("drift:keys=2000,messages=20000,seed=7")
    r = simulate(ds, "fish", 10, 2, resizes=[Resize(10000, 12)], messages_hint=20000)
    assert r.workers == 12 and len(r.loads) == 12 and min(r.loads[10:]) > 0


def test_simulate_refuses_a_resize_it_could_not_honour():
    """One line each, before any routing: a grouping without resize, two changes at one message, a change past
    the end (which would silently never happen)."""
    ds = open_dataset("drift:keys=200,messages=2000,seed=5")
    with pytest.raises(SpecError, match="pkg cannot change its worker count mid-stream; --resize works with: "
                                        "fish, gedik"):
        simulate(ds, "pkg", 10, 2, resizes=[Resize(100, 12)])
    with pytest.raises(SpecError, match="two changes at the same message"):
        simulate(ds, "fish", 10, 2, resizes=[Resize(100, 12), Resize(100, 9)])
    assert main(["simulate", "--dataset", "drift:keys=200,messages=2000,seed=5", "-g", "fish",
                 "--resize", "2000:12"]) == 2


def test_a_removed_worker_keeps_its_load_in_the_final_vector():
    ds = open_dataset("drift:keys=500,messages=9000,seed=2")
    r = simulate(ds, "fish", 4, 2, resizes=[Resize(3000, 6), Resize(6000, 5)], engine="reference")
    assert r.workers == 5 and len(r.loads) == 6 and sum(r.loads) == 9000
    assert r.loads[5] > 0 and len(r.distinct_per_worker) == 6


def test_resize_keeps_most_keys_on_their_ring_successors():
    keys = [f"k{i}" for i in range(5000)]
    [g] = build_grouping("fish", workers=20)
    before = [g.candidates(k)[0] for k in keys]
    g.resize(21)
    after = [g.candidates(k)[0] for k in keys]
    moved = sum(a != b for a, b in zip(before, after)) / len(keys)
    assert moved < 2 / 21


# -- the paper's claims on time-evolving data (§6.2, §6.3) ----------------------------------------------------


# D-Choices and W-Choices as in the paper's main comparison (Figs. 10, 11): a SpaceSaving sketch that can resolve
# their threshold theta = 1/(5W), i.e. ceil(1/theta) counters. With the default of 100 counters the sketch
# cannot tell hot from cold once theta < 1/100 (W > 20) and W-Choices becomes shuffle grouping: the paper's
# motivating "W-C100", tested separately below.
WC, DC = "wchoices:capacity=auto", "dchoices:capacity=auto"
DRIFT_AT = 80_000  # the ranking rotates after 80% of DRIFT's 100,000 messages


def imbalance_between(result, start: int, end: int) -> float:
    """Mean I(t)/t over the checkpoints with start < t <= end."""
    points = [i / t for t, i in zip(result.series_t, result.series_imbalance) if start < t <= end]
    return sum(points) / len(points)


@pytest.mark.parametrize("workers", [16, 32, 64, 128])
def test_fig10_fish_is_at_or_below_d_choices_and_w_choices_on_a_drifting_stream(workers):
    """Fig. 10: over the whole stream FISH's average imbalance is at or below D-Choices' and W-Choices';
    PKG, with two choices for every key, collapses once W > 2/p1."""
    fish, dch, wch, pkg = (run(g, workers).avg_imbalance_fraction for g in ("fish", DC, WC, "pkg"))
    assert fish <= dch and fish <= wch, (fish, dch, wch)
    if workers >= 32:
        assert fish * 20 <= pkg


@pytest.mark.parametrize("workers", [16, 32, 64, 128])
def test_after_the_hot_keys_change_lifetime_counting_lags_and_fish_does_not(workers):
    """§2.3/Fig. 14: D-C and W-C count over the stream's lifetime, so the keys that turn hot at the drift reach
    their threshold late and go out on two choices meanwhile; FISH's decayed epochs see them within an epoch.
    In the 10,000 messages after the drift FISH is clearly better balanced than both."""
    after = {g: imbalance_between(run(g, workers), DRIFT_AT, DRIFT_AT + 10_000) for g in ("fish", DC, WC)}
    assert after["fish"] * 1.4 <= after[WC], after
    assert after["fish"] * 3 <= after[DC], after


@pytest.mark.parametrize("workers", [32, 64, 128])
def test_fig3_w_c100_is_shuffle_grouping_once_theta_drops_below_its_sketch(workers):
    """Fig. 3: "D-C100 and W-C100 are similar to SG". With 100 counters and theta = 1/(5W) < 1/100 every key that
    enters the sketch looks hot: W-C100 balances like SG and replicates like SG. FISH stays within 1.5x of SG's
    imbalance (the paper: "comparable load balance effect to SG with the worst case of 1.32x"), which at this
    size is about one message of max-minus-mean."""
    wc100, sg, fish = (run(g, workers) for g in ("wchoices", "sg", "fish"))
    assert wc100.dist_cost >= 0.95 * sg.dist_cost
    assert wc100.avg_imbalance_fraction <= 1.05 * sg.avg_imbalance_fraction
    assert fish.avg_imbalance_fraction <= 1.5 * sg.avg_imbalance_fraction


@pytest.mark.parametrize("workers", [16, 32, 64, 128])
def test_fig11_fish_memory_stays_near_key_grouping(workers):
    """Fig. 11: FISH's dist_cost (replication relative to KG) is well below SG's at every scale. Fig. 15: giving
    a hot key d_k workers (CHK) instead of all W (W-C's rule) saves memory, more so as W grows; against W-C100,
    whose sketch marks every key hot past W = 20, FISH needs less than 0.4x the memory."""
    fish, wch, wc100, sg = (run(g, workers).dist_cost for g in ("fish", WC, "wchoices", "sg"))
    assert fish <= 0.5 * sg
    assert fish <= wch
    assert fish < 2.0
    if workers >= 32:
        assert fish <= 0.4 * wc100
    if workers == 128:
        assert fish <= 0.75 * wch


def test_fig15_chk_saves_memory_over_giving_hot_keys_all_workers_more_so_as_w_grows():
    """Fig. 15: "FISH w/ W-C" (the same recent hot keys, each on all W workers) against CHK's d_k: CHK holds
    fewer copies at every W, the saving grows with W, and the balance stays close."""
    saved = []
    for workers in (16, 32, 64, 128):
        chk, all_w = run("fish", workers), run("fish:hot=all", workers)
        assert chk.dist_cost < all_w.dist_cost
        assert chk.avg_imbalance_fraction <= 1.15 * all_w.avg_imbalance_fraction
        saved.append(all_w.dist_cost - chk.dist_cost)
    assert saved == sorted(saved) and saved[-1] > 10 * saved[0]


def test_decay_is_what_keeps_fish_balanced_after_the_drift():
    """Fig. 12/14: alpha = 1 (lifetime counting) reacts late to the new hot keys; alpha = 0.5 does not."""
    decayed = sum(run("fish", w).avg_imbalance_fraction for w in (16, 32, 64, 128))
    lifetime = sum(run("fish:alpha=1", w).avg_imbalance_fraction for w in (16, 32, 64, 128))
    assert decayed < 0.85 * lifetime


def test_execution_time_model_is_a_fifo_server_per_worker():
    """The §6.1 metric: one worker serving 100 tuples/s, offered 1,000 tuples at 10,000/s, is done at 10 s."""
    ds = open_dataset("zipf:keys=10,messages=1000,seed=1")
    r = execution(ds, "sg", 1, [100.0], 1, rate=10_000.0)
    assert r.execution_time == pytest.approx(10.0)
    assert r.mean_latency == pytest.approx(sum((i + 1) / 100 - i / 10_000 for i in range(1000)) / 1000)
    assert r.loads == [1000] and r.throughput == pytest.approx(100.0)


def test_execution_subcommand_prints_json_for_scripts(capsys):
    """`keysplit execution --json`: with half the workers twice as fast, FISH's estimated-wait assignment
    finishes the stream sooner than plain least-loaded (Fig. 16)."""
    assert main(["execution", "--dataset", "drift:keys=500,messages=5000", "-W", "4", "-g", "fish,fish:assign=load",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    wait, load = out["runs"]
    assert (wait["grouping"], load["grouping"]) == ("fish", "fish:assign=load")
    assert wait["messages"] == load["messages"] == 5000 and sum(wait["loads"]) == 5000
    assert wait["execution_time"] < load["execution_time"]


def test_execution_command_runs_as_a_module():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "keysplit.execution", "--dataset", "drift:keys=500,messages=5000",
                          "-W", "4", "-g", "fish,fish:assign=load"], capture_output=True, text=True, check=True)
    assert "fish:assign=load" in out.stdout and "execution time" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "keysplit.execution", "--dataset", "drift:keys=500,messages=5000",
                          "-W", "4", "--capacities", "1,2"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.startswith("keysplit: error:")


@pytest.mark.parametrize(("dataset", "message"), [
    ("text:{tmp}/none.txt", "dataset file not found: {tmp}/none.txt"),
    ("text:{tmp}", "dataset path is a directory, not a file: {tmp}"),
    ("text:{tmp}/empty.txt", "dataset file is empty: {tmp}/empty.txt"),
    ("csv:{tmp}/ab.csv,key=zz", "no column 'zz' in the CSV header (columns: a, b)"),
    ("text:{tmp}/punct.txt", "has no records"),  # it used to print a table of zeros and exit 0
])
def test_execution_module_reports_a_bad_dataset_in_one_line(tmp_path, capsys, dataset, message):
    """`python -m keysplit.execution` runs this ``main``: every KeysplitError is one line and status 2."""
    from keysplit.execution import main as execution_main

    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "ab.csv").write_text("a,b\n1,2\n")
    (tmp_path / "punct.txt").write_text("... !!!\n")
    assert execution_main(["--dataset", dataset.format(tmp=tmp_path), "-W", "2", "-g", "sg"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keysplit: error: ") and message.format(tmp=tmp_path) in err and err.count("\n") == 1


@pytest.mark.parametrize(("option", "message"), [
    (("--rate", "nan"), "argument --rate: expected a finite number, got 'nan'"),
    (("--capacities", "inf"), "keysplit: error: capacities 'inf': need 1 or 2 positive, finite values"),
])
def test_execution_module_refuses_nan_and_inf(capsys, option, message):
    from keysplit.execution import main as execution_main

    try:
        status = execution_main(["--dataset", "zipf:keys=10,messages=100", "-W", "2", "-g", "sg", *option])
    except SystemExit as exited:  # argparse's refusal of an option's type
        status = exited.code
    assert status == 2 and capsys.readouterr().err.splitlines()[-1].endswith(message)


def test_resize_with_capacities_gives_a_joining_worker_the_mean_capacity_and_an_empty_queue():
    [g] = build_grouping("fish:interval=1", workers=4)
    g.set_capacities([10.0, 10.0, 20.0, 40.0])
    for i in range(200):
        g.choose(f"k{i % 7}", i / 100)
    g.resize(5)
    assert g.capacities == [10.0, 10.0, 20.0, 40.0, 20.0]
    assert g.estimated_queue()[4] == 0.0 and len(g.estimated_wait()) == 5
    assert 4 in {g.choose(f"k{i % 7}", 2.0 + i / 100) for i in range(200)}
    g.resize(3)
    assert g.capacities == [10.0, 10.0, 20.0]
    assert {g.choose(f"k{i % 7}", 4.0 + i / 100) for i in range(200)} <= {0, 1, 2}


def test_prepare_again_with_another_worker_count_keeps_working():
    """Storm re-prepares a grouping when a topology is rebalanced."""
    [g] = build_grouping("fish", workers=4)
    g.set_capacities([1.0, 2.0, 3.0, 4.0])
    g.choose("a", 0.0)
    g.prepare(6, 0, 1)
    assert len(g.capacities) == 6 and {g.choose(f"k{i}", 20.0) for i in range(300)} == set(range(6))
