"""Worker changes (FISH §5, Fig. 17): a consistent-hash ring moves few keys; hash mod W moves almost all."""

from __future__ import annotations

import functools
import json

import pytest

from keysplit.cli import main
from keysplit.datasets import open_dataset
from keysplit.rebalance import mapping_moves, rebalance_run

DATASET = "drift:z=1.0,keys=5000,messages=60000,seed=1"
KEYS = [f"key{i}" for i in range(20000)]


@functools.cache
def change(spec: str, workers: int, to: int):
    return rebalance_run(open_dataset(DATASET), spec, workers, to, sources=5)


@pytest.mark.parametrize(("workers", "to"), [(10, 11), (10, 9), (32, 33), (32, 31)])
def test_on_the_ring_about_one_in_w_keys_changes_owner_and_with_mod_w_almost_all(workers, to):
    """§5: adding or removing one worker remaps only the keys next to its virtual nodes (ideal 1/max(W, W'));
    HASH mod W remaps a key unless h mod W == h mod W' (about (W-1)/W of them)."""
    m = mapping_moves(KEYS, workers, to)
    assert m["ideal"] == pytest.approx(1 / max(workers, to))
    assert m["ring"] <= 1.5 * m["ideal"]
    assert m["ring"] >= 0.5 * m["ideal"]
    assert m["mod"] >= 0.85


@pytest.mark.parametrize("to", [11, 9])
def test_fish_moves_far_less_key_state_than_without_the_ring(to):
    """Fig. 17: across a worker change, FISH on the ring sends few keys to workers without their state (beyond
    what key splitting does without any change); FISH on hash mod W, PKG and KG move almost every key."""
    ring, mod, pkg, kg = (change(g, 10, to) for g in ("fish", "fish:placement=mod", "pkg", "kg"))
    # A key's candidate pair changes when the joining or leaving worker is one of its 2 ring successors: ~2/W.
    excess = ring.moved_share - ring.control_moved_share
    assert 0 < excess <= 1.25 * 2 / 10
    for other in (mod, pkg, kg):
        assert other.moved_share - other.control_moved_share >= 0.5
        assert other.new_state_share - other.control_new_state_share >= 3 * (
            ring.new_state_share - ring.control_new_state_share)
    assert kg.control_moved_keys == 0  # key grouping never moves a key on its own


def test_without_the_ring_a_worker_change_nearly_doubles_fishs_memory():
    """Fig. 17: FISH without CH has about twice the memory overhead after a change; with CH little more than
    without a change."""
    ring, mod = change("fish", 10, 11), change("fish:placement=mod", 10, 11)
    assert ring.dist_cost - ring.control_dist_cost <= 0.15 * ring.control_dist_cost
    assert mod.dist_cost - mod.control_dist_cost >= 0.35 * mod.control_dist_cost


def test_every_key_seen_on_both_sides_of_the_change_is_counted():
    r = change("kg", 10, 11)
    assert r.at == 30000 and r.messages == 60000
    assert 0 < r.keys_both <= r.keys_before <= 5000
    assert r.state_before == r.keys_both  # KG: one worker per key


def test_cli_rebalance_prints_json(capsys):
    assert main(["rebalance", "--dataset", "drift:keys=500,messages=6000,seed=2", "--workers", "8", "--to", "9",
                 "--at", "3000", "-g", "fish,kg", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["at"] == 3000 and out["workers"] == 8 and out["to"] == 9
    assert [r["grouping"] for r in out["runs"]] == ["fish", "kg"]
    assert out["mapping"]["ring"] < out["mapping"]["mod"]


def test_cli_rebalance_table(capsys):
    assert main(["rebalance", "--dataset", "drift:keys=500,messages=6000,seed=2", "--to", "9", "-g", "fish"]) == 0
    out = capsys.readouterr().out
    assert "keys moved" in out and "hash mod W" in out


@pytest.mark.parametrize(("argv", "message"), [
    (["--to", "10"], "must differ"),
    (["--to", "11", "--at", "999999"], "past the end"),
    (["--to", "11", "-g", "fish:alpha=2"], "alpha"),
])
def test_cli_rebalance_errors_are_one_line(capsys, argv, message):
    assert main(["rebalance", "--dataset", "drift:keys=500,messages=6000", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keysplit: error:") and message in err and err.count("\n") == 1


@pytest.mark.parametrize(("rate", "message"), [
    ("nan", "expected a finite number, got 'nan'"),
    ("inf", "expected a finite number, got 'inf'"),
    ("-1", "must not be negative, got -1.0"),
])
def test_cli_rebalance_refuses_a_rate_that_is_not_a_positive_number(capsys, rate, message):
    with pytest.raises(SystemExit) as exited:
        main(["rebalance", "--dataset", "drift:keys=500,messages=6000", "--to", "11", f"--rate={rate}"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.splitlines()[-1].endswith(f"argument --rate: {message}")
