"""The `keysplit` command as a user runs it: real subprocesses, JSON for scripts, one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

KEYSPLIT = [sys.executable, "-m", "keysplit.cli"]
DATASET = "zipf:z=1.0,keys=1000,messages=20000,seed=3"


def keysplit(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([*KEYSPLIT, *args], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONHASHSEED": "random"})
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_simulate_json_has_the_documented_fields_and_is_reproducible():
    args = ("simulate", "--dataset", DATASET, "-W", "5,10", "-S", "3", "-g", "kg,pkg:d=3,load=global,sg", "--json")
    first, second = (json.loads(keysplit(*args).stdout) for _ in range(2))
    assert set(first["dataset"]) == {"spec", "messages", "keys", "p1"}
    assert first["dataset"]["messages"] == 20000
    assert [r["grouping"] for r in first["runs"]] == ["kg", "pkg:d=3,load=global", "sg"] * 2
    assert set(first["runs"][0]) == {
        "grouping", "workers", "sources", "avg_imbalance_fraction", "final_imbalance_fraction",
        "load_stddev", "dist_cost", "loads", "messages_per_second",
    }
    for run in first["runs"]:
        assert sum(run["loads"]) == 20000 and len(run["loads"]) == run["workers"]
    # Same seeds, same decisions (messages_per_second is the only wall-clock measurement).
    for a, b in zip(first["runs"], second["runs"]):
        a.pop("messages_per_second"), b.pop("messages_per_second")
    assert first == second


def test_simulate_prints_a_table():
    out = keysplit("simulate", "--dataset", DATASET, "-W", "4", "-g", "kg,pkg").stdout
    assert "avg imbalance" in out and "\nkg " in out and "\npkg " in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("simulate", "--dataset", "text:/no/such/file"), "dataset file not found: /no/such/file"),
        (("simulate", "--dataset", DATASET, "-g", "pkg:d=9", "-W", "4"), "d=9 exceeds the number of workers"),
        (("simulate", "--dataset", DATASET, "-g", "magic"), "unknown grouping 'magic'"),
        (("simulate", "--dataset", DATASET, "-W", "0"), "every value must be at least 1"),
        (("datasets", "stats", "zipf:z=abc"), "z='abc' is not a valid float"),
    ],
)
def test_user_mistakes_get_one_line_and_no_traceback(args, message):
    result = keysplit(*args, check=False)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_empty_and_binary_files(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    result = keysplit("simulate", "--dataset", f"text:{empty}", check=False)
    assert result.returncode == 2 and "dataset file is empty" in result.stderr
    nowords = tmp_path / "punct.txt"
    nowords.write_text("... !!!\n")
    result = keysplit("datasets", "stats", f"text:{nowords}", check=False)
    assert result.returncode == 2 and "has no records" in result.stderr


def test_datasets_generate_then_stats(tmp_path):
    out = tmp_path / "zipf.csv"
    result = keysplit("datasets", "generate", DATASET, "--out", str(out))
    spec = result.stdout.split("--dataset ")[1].strip()
    assert spec == f"csv:{out},key=key"
    stats = json.loads(keysplit("datasets", "stats", spec, "--json").stdout)
    original = json.loads(keysplit("datasets", "stats", DATASET, "--json").stdout)
    assert {k: stats[k] for k in ("messages", "keys", "p1")} == {k: original[k] for k in ("messages", "keys", "p1")}


def test_help_lists_groupings_and_datasets():
    assert "pkg" in keysplit("simulate", "--help").stdout
    assert "lognormal" in keysplit("datasets", "--help").stdout


def test_simulate_draws_the_imbalance_plot(tmp_path):
    png = tmp_path / "imbalance.png"
    keysplit("simulate", "--dataset", DATASET, "-W", "4", "-g", "kg,pkg", "--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_the_demo_runs_end_to_end(tmp_path):
    """`make demo` verbatim: corpus, simulation, three topology runs, Spark replay and comparison."""
    out = tmp_path / "demo"
    result = subprocess.run([*KEYSPLIT, "demo", "--out", str(out)], capture_output=True, text=True, timeout=900,
                            env={**os.environ, "KEYSPLIT_HOME": str(tmp_path / "home")})
    assert result.returncode == 0, result.stderr[-3000:]
    comparison = json.loads((out / "compare" / "comparison.json").read_text())
    assert [row["grouping"] for row in comparison["rows"]] == ["kg", "sg", "pkg"]
    assert all(row["counts_equal"] for row in comparison["rows"])
    assert {p.name for p in (out / "compare").glob("*.png")} == {"throughput_latency.png", "loads.png",
                                                                  "imbalance.png"}
    assert (out / "simulate.png").stat().st_size > 10_000
