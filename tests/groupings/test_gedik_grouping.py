"""The ``gedik`` grouping: one worker per key, rebuilt every period of event time and on resize, with each
rebuild's migration counted; bad parameters refused; the simulator and the CLI run it."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import pytest

from keysplit.datasets import open_dataset
from keysplit.errors import SpecError
from keysplit.groupings import build_grouping
from keysplit.groupings.hosting import prepare_groupings, route
from keysplit.simulator import simulate

RATE = 10_000.0


def run(spec: str, dataset: str, workers: int, sources: int = 3, resize_at: int | None = None,
        resize_to: int | None = None):
    """Route like ``simulate`` does (shuffle split, seq / rate event time, resize before message ``at``)."""
    ds = open_dataset(dataset)
    groupings = prepare_groupings(spec, workers, sources, ds, lambda: [0] * workers)
    decisions = []
    for seq, s, key, w in route(ds, groupings, rate=RATE):
        decisions.append((seq, s, key, w, groupings[0].function.workers))
        if resize_at is not None and seq + 1 == resize_at:
            for g in groupings:
                g.resize(resize_to)
    return groupings, decisions


def test_all_sources_share_one_function_so_a_key_has_one_worker_at_a_time():
    groupings, decisions = run("gedik:period=1", "zipf:z=1.2,keys=2000,messages=30000,seed=3", 6)
    assert all(g.partitioner is groupings[0].partitioner for g in groupings)
    # only the leader counts, as separate router processes can: the counter holds source 0's messages alone
    assert sum(groupings[0].partitioner.window_counts().values()) == sum(1 for _, s, *_ in decisions if s == 0)
    by_period: dict[tuple[int, str], set[int]] = defaultdict(set)
    for seq, _s, key, w, _ in decisions:
        by_period[(int(seq / RATE), key)].add(w)  # rebuilds happen only at period boundaries
    assert all(len(ws) == 1 for ws in by_period.values())
    assert len({s for _, s, *_ in decisions}) == 3


def test_the_migration_audit_holds_only_the_sliding_windows_keys():
    """Millions of distinct keys must not grow the router: the audit's exact counts span the lossy counter's
    window (W to 1.5 W messages with 3 counters), so a resize counts the keys of that window, not of the past."""
    [g] = build_grouping("gedik:window=1000,period=1000", workers=4)
    for i in range(50_000):
        g.choose(f"k{i}", i / RATE)  # every key new
    counts = g.partitioner.window_counts()
    assert 1000 <= len(counts) <= 1500 and set(counts) == {f"k{i}" for i in range(50_000 - len(counts), 50_000)}
    g.resize(5)
    [record] = g.history
    assert record.reason == "resize" and 0 < record.migrated_keys <= len(counts)


def test_rebuilt_every_period_of_event_time_with_migration_counted():
    groupings, _ = run("gedik:period=0.5,window=5000", "zipf:z=1.0,keys=5000,messages=40000,seed=1", 8)
    g = groupings[0]
    assert g.rebuilds == 7  # 40000 messages at 10^4/s = 4 s of event time: rebuilds at 0.5, 1.0, ..., 3.5
    assert [r.now for r in g.history] == pytest.approx([0.5 * k for k in range(1, 8)], abs=1e-3)
    assert all(r.reason == "period" for r in g.history)
    first = g.history[0]
    assert first.explicit > 5 and first.migrated_keys > 0  # the first build moves hot keys off the ring
    # with a stationary distribution, later rebuilds move far less than the first
    assert max(r.migration_cost for r in g.history[2:]) < first.migration_cost
    assert g.migrated_keys == sum(r.migrated_keys for r in g.history)
    assert g.stats()["rebuilds"] == 7 and g.stats()["lossy"] > 0


def test_resize_rebuilds_for_the_new_worker_count_and_counts_its_migration():
    groupings, decisions = run("gedik:period=100", "zipf:z=1.0,keys=5000,messages=30000,seed=2", 4,
                               resize_at=20_000, resize_to=5)
    g = groupings[0]
    assert [r.reason for r in g.history] == ["resize"]  # once, although every source was told
    record = g.history[0]
    assert (record.workers_before, record.workers_after) == (4, 5)
    assert 0.5 < record.relative_migration < 2.0  # close to the ideal 1/N of the state (eq. 12)
    after = {w for seq, _, _, w, _ in decisions if seq >= 20_000}
    assert after == set(range(5)) and len(g.local_loads) == 5
    before = {w for seq, _, _, w, _ in decisions if seq < 20_000}
    assert before == set(range(4))


def test_shrinking_moves_every_key_off_removed_workers():
    groupings, decisions = run("gedik:period=1", "zipf:z=1.0,keys=3000,messages=30000,seed=4", 6,
                               resize_at=15_000, resize_to=3)
    assert {w for seq, _, _, w, _ in decisions if seq >= 15_000} <= {0, 1, 2}
    resize = next(r for r in groupings[0].history if r.reason == "resize")
    assert resize.relative_migration > 0


def test_hot_keys_that_change_are_followed_by_the_sliding_counter():
    # the leader (source 0 of 3) counts a third of the stream: a window of 1,334 of its messages spans 4,000 of it
    groupings, _ = run("gedik:period=0.5,window=1334", "drift:z=1.2,keys=2000,messages=40000,seed=5,change=0.5", 5)
    explicit = groupings[0].function.explicit_hash
    # drift rotates the ranking by keys/2 half-way: k1001 is the new hottest key, k1 the old one
    assert "k1001" in explicit and "k1" not in explicit


def test_balances_better_than_key_grouping_on_skewed_keys():
    ds = open_dataset("zipf:z=1.0,keys=20000,messages=60000,seed=6")
    kg = simulate(ds, "kg", 10, 2, engine="reference")
    gedik = simulate(ds, "gedik:period=1", 10, 2)
    assert gedik.final_imbalance_fraction < 0.8 * kg.final_imbalance_fraction
    assert gedik.dist_cost < 1.1  # still (almost) one worker per key: only rebuilds duplicate state


@pytest.mark.parametrize(
    "spec, message",
    [
        ("gedik:alpha=0.9", "alpha=0.9 is out of range (alpha must be greater than 1)"),
        ("gedik:alpha=1", "alpha=1 is out of range (alpha must be greater than 1)"),
        ("gedik:sigma=0", "sigma=0 is out of range (sigma must be in (0, 1])"),
        ("gedik:sigma=1.5", "sigma=1.5 is out of range (sigma must be in (0, 1])"),
        ("gedik:utility=best", "utility='best' is not a valid choice of a|apm|aplm|atm|atlm"),
        ("gedik:algo=greedy", "algo='greedy' is not a valid choice of scan|redist|readj"),
        ("gedik:resources=LXL", "resources='LXL' is not a valid resource triple"),
        ("gedik:period=0", "period=0 is out of range (positive)"),
        ("gedik:epsilon=2", "epsilon=2 is out of range"),
        ("gedik:epsilon=0.01",  # delta(4) = 0.1 * (0.2 / 1.4) / 4
         "epsilon=0.01 must be below the frequency threshold delta=0.00357"),
        ("gedik:colour=red", "gedik has no parameter 'colour'"),
    ],
)
def test_bad_parameters_are_refused_with_a_clear_message(spec, message):
    with pytest.raises(SpecError) as err:
        build_grouping(spec, 4)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_algorithm_and_utility_builds_and_routes():
    for algo in ("scan", "redist", "readj"):
        for util in ("A", "APM", "APLM", "ATM", "ATLM"):
            [g] = build_grouping(f"gedik:algo={algo},utility={util},period=0.2,window=1000", 3)
            ws = [g.choose(f"k{i % 7 if i % 2 else i}", i / 1000) for i in range(1000)]
            assert set(ws) <= {0, 1, 2} and g.rebuilds == 4


def keysplit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "keysplit.cli", *args], capture_output=True, text=True, timeout=300)


def test_cli_simulate_runs_gedik_with_a_resize():
    out = keysplit("simulate", "--dataset", "zipf:z=1.0,keys=2000,messages=20000,seed=1", "-W", "4", "-S", "2",
                   "--groupings", "gedik:period=0.5,gedik:algo=scan,period=0.5", "--resize", "10000:6", "--json")
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)["runs"]
    assert [r["workers"] for r in runs] == [6, 6]
    assert all(sum(r["loads"]) == 20_000 for r in runs)
    for r in runs:  # 2 s of event time: rebuilds at 0.5, 1.0, 1.5 and one at the resize, migration counted
        stats = r["grouping_stats"]
        assert stats["rebuilds"] == 4 and stats["resizes"] == 1 and stats["migrated_keys"] > 0
        assert 0.3 < stats["resize_relative_migration"][0] < 3
    bad = keysplit("simulate", "--dataset", "zipf:keys=100,messages=100", "--groupings", "gedik:sigma=2")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "keysplit: error: gedik: sigma=2 is out of range (sigma must be in (0, 1])"


def test_cli_partition_experiment(tmp_path):
    png = tmp_path / "fig6.png"
    out = keysplit("partition-experiment", "--domain", "3000", "--runs", "1", "--max-workers", "5", "--stream",
                   "5000", "--json", "--plot", str(png))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert set(data["summary"]) == {"uniform", "consistent", "scan", "redist", "readj"}
    assert len(data["rows"]) == 5 * 5 and data["rows"][0]["m"] is None
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = keysplit("partition-experiment", "--domain", "2000", "--runs", "1", "--max-workers", "3",
                     "--stream", "0")
    assert table.returncode == 0 and "readj b" in table.stdout and "mean 2..N" in table.stdout
    bad = keysplit("partition-experiment", "--sigma", "0")
    assert bad.returncode == 2 and "sigma must be in (0, 1]" in bad.stderr
    bad = keysplit("partition-experiment", "--alpha", "0.5")
    assert bad.returncode == 2 and "alpha_s must be greater than 1" in bad.stderr
