"""``keysplit advise`` on generated data whose answer is known (docs/guides/advise.md)."""

from __future__ import annotations

import json

import pytest

from keysplit.advise import advise
from keysplit.cli import main
from keysplit.datasets import open_dataset
from keysplit.errors import SpecError


def one(spec: str, workers: int, **kw):
    [a], _ = advise(open_dataset(spec), [workers], sources=5, sample=20_000, **kw)
    return a


def test_low_skew_gives_key_grouping():
    a = one("zipf:z=0.0,keys=100000,messages=40000,seed=1", 5)
    assert a.profile["p1"] < 1 / 25 and a.profile["hot_keys"] == 0
    assert a.recommended == "kg", a.reason


def test_p1_above_two_over_w_rules_out_two_choices():
    a = one("zipf:z=1.4,keys=10000,messages=40000,seed=1", 10)
    assert a.profile["p1"] > 2 / 10
    pkg = next(c for c in a.candidates if c.spec == "pkg")
    assert pkg.note.startswith("ruled out")
    assert a.recommended not in ("pkg", "pkg:d=2", "kg")
    chosen = next(c for c in a.candidates if c.spec == a.recommended)
    assert chosen.imbalance < pkg.imbalance / 10  # more choices do balance what two could not


def test_a_drifting_hot_set_gives_fish():
    a = one("drift:z=1.2,keys=3000,messages=40000,seed=4", 10)
    assert a.profile["drift_first_last"] < 0.5
    assert a.recommended == "fish", a.reason
    # the same skew without drift does not
    steady = one("zipf:z=1.2,keys=3000,messages=40000,seed=4", 10)
    assert steady.profile["drift_first_last"] > 0.8 and steady.recommended != "fish"


def test_a_memory_budget_of_one_gives_a_grouping_that_never_splits_a_key():
    a = one("zipf:z=1.2,keys=3000,messages=40000,seed=2", 10, memory=1.0)
    chosen = next(c for c in a.candidates if c.spec == a.recommended)
    assert chosen.dist_cost == 1.0 and a.recommended in ("kg", "potc", "gedik")
    assert all(c.note for c in a.candidates if c.dist_cost > 1.0)


def test_measures_match_the_dataset_and_the_fast_path(capsys):
    ds = open_dataset("zipf:z=1.1,keys=500,messages=5000,seed=3")
    [a], _ = advise(ds, [4], sources=2, sample=5000)
    st = ds.stats()
    assert (a.profile["messages"], a.profile["keys"]) == (st["messages"], st["keys"])
    assert a.profile["p1"] == pytest.approx(st["p1"])
    kg = next(c for c in a.candidates if c.spec == "kg")
    assert kg.dist_cost == 1.0 and kg.aggregation == 1.0
    assert kg.imbalance == pytest.approx(kg.full_imbalance)  # the sample is the whole stream here
    with pytest.raises(SpecError, match=r"below 1\.0"):
        advise(ds, [4], memory=0.5)


def test_cli_json_and_plot(tmp_path, capsys):
    plot = tmp_path / "advice.png"
    assert main(["advise", "--dataset", "zipf:z=1.0,keys=500,messages=5000,seed=3", "-W", "4,8", "--sample",
                 "3000", "--json", "--plot", str(plot)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [a["workers"] for a in out["advice"]] == [4, 8]
    assert all(a["recommended"] in [c["spec"] for c in a["candidates"]] for a in out["advice"])
    assert plot.stat().st_size > 0
    assert main(["advise", "--dataset", "nope:x=1"]) == 2
    assert capsys.readouterr().err.startswith("keysplit: error:")
