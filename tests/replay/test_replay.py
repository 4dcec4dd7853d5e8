"""The Spark replay makes the simulator's decisions, counts exactly, and fails on bad input with one line.

Every test here runs the real job on the suite's one local SparkSession (``conftest.spark``).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import subprocess
import sys
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from keysplit.cli import main as cli_main
from keysplit.datasets import open_dataset
from keysplit.errors import KeysplitError
from keysplit.groupings import REGISTRY
from keysplit.groupings.hosting import route
from keysplit.metrics import default_checkpoint
from keysplit.simulator import simulate
from keysplit.stream import Resize
from spark_replay.job import ReplayOptions, run_replay

#: kg, sg, pkg, dchoices, dkg and fish, plus the global-oracle and probing PKG variants (one partition each).
GROUPINGS = ["kg", "sg", "pkg", "dchoices", "dkg", "fish", "pkg:load=global", "pkg:probe=0.05"]
SIMULATED_FIELDS = ("grouping", "workers", "sources", "avg_imbalance_fraction", "final_imbalance_fraction",
                    "load_stddev", "dist_cost", "loads")


def test_the_groupings_under_test_are_registered():
    # A grouping module that does not exist yet would make its cases fail below, never skip them.
    for spec in ("dchoices", "dkg", "fish"):
        assert spec in REGISTRY


def write_text(path, lines: int = 700, seed: int = 5) -> str:
    """A skewed text with blank lines, punctuation-only lines, CRLF ends, a lone CR and invalid UTF-8."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(120)]
    weights = [1.0 / (i + 1) ** 1.1 for i in range(len(vocab))]
    with open(path, "wb") as fh:
        for n in range(lines):
            if n % 97 == 0:
                fh.write(b"\n")
            elif n % 89 == 0:
                fh.write(b"-- ... --\r\n")
            elif n % 83 == 0:
                fh.write(b"caf\xe9 w1 \xff w2\n")
            else:
                words = rng.choices(vocab, weights, k=rng.randint(1, 9))
                sep = "\r" if n % 71 == 0 else " "
                fh.write((sep.join(words) + (", Don't STOP!" if n % 7 == 0 else "")).encode() + b"\n")
    return str(path)


def assert_same_as_simulate(summary: dict, dataset_spec: str, rate: float = 10_000.0, split: str = "shuffle"):
    dataset = open_dataset(dataset_spec)
    for run in summary["runs"]:
        sim = simulate(dataset, run["grouping"], run["workers"], run["sources"], rate=rate, split=split,
                       engine="reference")
        got = {k: run[k] for k in SIMULATED_FIELDS}
        want = {k: sim.summary()[k] for k in SIMULATED_FIELDS}
        assert got == want, run["grouping"]
        assert run["distinct_per_worker"] == sim.distinct_per_worker, run["grouping"]
        assert run["messages"] == sim.messages


@pytest.fixture(scope="module")
def zipf_spec():
    return "zipf:z=1.4,keys=300,messages=6000,seed=11"


@pytest.mark.parametrize("sources", [1, 3, 5])
def test_replay_makes_the_simulators_decisions_for_every_grouping(spark, tmp_path, zipf_spec, sources):
    opts = ReplayOptions(dataset=zipf_spec, groupings=GROUPINGS, workers=6, sources=sources,
                         out=str(tmp_path), partitions=3)
    summary = run_replay(spark, opts)
    assert [r["grouping"] for r in summary["runs"]] == GROUPINGS
    # The generator was written out first and replayed from the file; both have one fingerprint.
    assert summary["dataset"]["sha256"] == open_dataset(zipf_spec).sha256()
    assert_same_as_simulate(summary, zipf_spec)
    modes = {r["grouping"]: r["mode"] for r in summary["runs"]}
    if sources > 1:
        assert modes["pkg:load=global"].startswith("global") and modes["pkg:probe=0.05"].startswith("global")
        assert modes["pkg"].startswith("partitioned") and modes["fish"].startswith("partitioned")


def test_reference_engine_and_a_shared_state_grouping_make_the_same_decisions(spark, tmp_path, zipf_spec):
    groupings = ["kg", "sg", "pkg", "pkg:load=global", "pkg:probe=0.05", "gedik"]
    opts = ReplayOptions(dataset=zipf_spec, groupings=groupings, workers=5, sources=3, out=str(tmp_path), fast=False)
    summary = run_replay(spark, opts)
    assert not any(r["fast_path"] for r in summary["runs"])
    assert summary["runs"][-1]["mode"].startswith("global")  # gedik's sources share one partitioner
    assert_same_as_simulate(summary, zipf_spec)


@pytest.fixture(params=["rows", "arrow"])
def handover(request, monkeypatch):
    """Spark hands a small file's rows to Python one by one, a large file's as Arrow batches: both, here."""
    from spark_replay import sparkinput

    monkeypatch.setattr(sparkinput, "ARROW_MIN_BYTES", 0 if request.param == "arrow" else 1 << 62)
    return request.param


def test_text_file_cut_into_byte_ranges_replays_like_the_file(spark, tmp_path, handover):
    path = write_text(tmp_path / "book.txt")
    groupings = ["kg", "pkg", "dkg", "pkg:probe=0.01", "offgreedy"]
    opts = ReplayOptions(dataset=f"text:{path}", groupings=groupings, workers=5, sources=3, split="key", rate=5000.0,
                         out=str(tmp_path / "out"), partitions=7, top_k=5)
    summary = run_replay(spark, opts)
    assert summary["replay"]["input_partitions"] == 7
    assert_same_as_simulate(summary, f"text:{path}", rate=5000.0, split="key")
    # Exact counts: an independent count of the words, read back from the Parquet the executors wrote.
    independent = Counter()
    for _, keys in open_dataset(f"text:{path}").records():
        independent.update(keys)
    table = pq.read_table(summary["replay"]["counts"])
    replayed = dict(zip(table.column("key").to_pylist(), table.column("count").to_pylist()))
    assert replayed == dict(independent)
    want_top = sorted(independent.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert summary["runs"][0]["top_k"] == [list(kv) for kv in want_top]
    assert summary["dataset"]["sha256"] == open_dataset(f"text:{path}").sha256()


def test_timestamps_gzip_and_parquet_feed_the_same_event_times(spark, tmp_path, handover):
    rng = random.Random(3)
    rows = [(f"k{min(int(rng.paretovariate(1.2)), 50)}", round(1000 + n * 0.0004 + rng.random() * 0.0002, 6))
            for n in range(3000)]
    csv_gz = tmp_path / "events.csv.gz"
    with gzip.open(csv_gz, "wt") as fh:
        fh.write("key,time\n" + "".join(f"{k},{t!r}\n" for k, t in rows))
    parquet = tmp_path / "events.parquet"
    pq.write_table(pa.table({"key": [k for k, _ in rows], "time": [t for _, t in rows]}), parquet, row_group_size=700)
    for spec in (f"csv:{csv_gz},key=key,time=time", f"parquet:{parquet},key=key,time=time"):
        opts = ReplayOptions(dataset=spec, groupings=["pkg:probe=0.05", "fish", "sg"], workers=4, sources=2,
                             out=str(tmp_path / "out"))
        summary = run_replay(spark, opts)
        assert_same_as_simulate(summary, spec)
        assert summary["dataset"]["records"] == 3000


def test_fish_with_worker_capacities_matches_the_simulator(spark, tmp_path, zipf_spec):
    capacities = [100.0, 200.0, 300.0, 400.0]
    opts = ReplayOptions(dataset=zipf_spec, groupings=["fish"], workers=4, sources=2, capacities=capacities,
                         out=str(tmp_path))
    [run] = run_replay(spark, opts)["runs"]
    sim = simulate(open_dataset(zipf_spec), "fish", 4, 2, capacities=capacities, engine="reference")
    assert run["loads"] == sim.loads and run["avg_imbalance_fraction"] == sim.avg_imbalance_fraction
    uniform = simulate(open_dataset(zipf_spec), "fish", 4, 2, engine="reference")
    assert sim.loads != uniform.loads  # the capacities really reached the groupings


def test_worker_changes_mid_stream_make_the_simulators_decisions(spark, tmp_path, zipf_spec):
    """``--resize``: FISH grows from 4 to 6 workers then loses one, Gedik's function shrinks then grows; the
    replay applies each change before the same message as the simulator (partitioned and global mode)."""
    changes = [Resize(2000, 6), Resize(4000, 5)]
    opts = ReplayOptions(dataset=zipf_spec, groupings=["fish", "gedik:period=0.05"], workers=4, sources=3,
                         out=str(tmp_path), resizes=changes)
    summary = run_replay(spark, opts)
    dataset = open_dataset(zipf_spec)
    for run in summary["runs"]:
        sim = simulate(dataset, run["grouping"], 4, 3, resizes=changes, engine="reference")
        assert {k: run[k] for k in SIMULATED_FIELDS} == {k: sim.summary()[k] for k in SIMULATED_FIELDS}
        assert run["workers"] == 5 and len(run["loads"]) == 6 and min(run["loads"][4:]) > 0
    series = pq.read_table(tmp_path / "timeseries.parquet").to_pydict()
    widths = {t: len(row) for g, t, row in zip(series["grouping"], series["t"], series["loads"]) if g == "fish"}
    assert widths[1998] == 4 and widths[2004] == 6 and widths[6000] == 5  # I(t) over the workers present


def test_a_worker_change_the_grouping_cannot_make_is_refused_before_spark(capsys):
    assert cli_main(["replay", "--dataset", "zipf:messages=100", "-g", "kg", "--resize", "50:6"]) == 2
    err = capsys.readouterr().err
    assert "kg cannot change its worker count" in err and "fish, gedik" in err and err.count("\n") == 1


def explicit_latencies(dataset_spec: str, spec: str, workers: int, sources: int, rate: float, delay: float):
    """Per-message latency by the textbook FIFO recursion, departure = max(arrival, previous) + D."""
    last = [0.0] * workers
    out = []
    for seq, _s, _key, w in route(open_dataset(dataset_spec), __import__("keysplit.groupings").groupings
                                  .build_grouping(spec, workers, sources), rate=rate):
        arrival = seq / rate
        last[w] = max(arrival, last[w]) + delay
        out.append(last[w] - arrival)
    return np.sort(np.asarray(out))


def test_queueing_estimate_follows_lindley_and_the_busiest_worker(spark, tmp_path, zipf_spec):
    rate, delay_ms, workers = 4000.0, 1.0, 5
    opts = ReplayOptions(dataset=zipf_spec, groupings=["kg", "sg"], workers=workers, sources=3, rate=rate,
                         cpu_delay_ms=delay_ms, out=str(tmp_path), arrivals="lindley")
    summary = run_replay(spark, opts)
    for run in summary["runs"]:
        lat = explicit_latencies(zipf_spec, run["grouping"], workers, 3, rate, delay_ms / 1000) * 1000
        assert run["latency_mean_ms"] == pytest.approx(lat.mean(), rel=1e-9)
        for q, field in ((50, "latency_p50_ms"), (99, "latency_p99_ms")):
            exact = lat[int(np.ceil(q / 100 * len(lat))) - 1]  # nearest rank
            assert exact * (1 - 1.001e-3) <= run[field] <= exact  # histogram bins are 0.1% wide
        assert run["throughput_estimate"] == pytest.approx(run["messages"] / (max(run["loads"]) * delay_ms / 1000))
    kg, sg = summary["runs"]
    # Key grouping's hot worker is saturated at 4000 msg/s: its queue, and the tail latency, grow.
    assert kg["latency_p99_ms"] > 10 * sg["latency_p99_ms"]
    assert kg["throughput_estimate"] < sg["throughput_estimate"]


def test_cli_writes_summary_series_and_counts(spark, tmp_path, zipf_spec, capsys):
    out = tmp_path / "r"
    code = cli_main(["replay", "--dataset", zipf_spec, "--groupings", "kg,pkg:d=3,load=global", "-W", "4",
                     "-S", "2", "--out", str(out)])
    assert code == 0
    printed = capsys.readouterr()
    assert "mode global: the grouping's decisions depend on every source" in printed.out
    rows = {line.split()[0]: line.split()[1] for line in printed.out.splitlines() if line.startswith(("kg ", "pkg:"))}
    assert rows == {"kg": "partitioned", "pkg:d=3,load=global": "global"}
    assert "replay: read 6,000 messages" in printed.err
    summary = json.loads((out / "summary.json").read_text())
    m = summary["dataset"]["messages"]
    for run in summary["runs"]:
        for name in ("messages_per_second", "throughput_estimate", "latency_p50_ms", "latency_p99_ms",
                     "dataset_sha256", "counts", *SIMULATED_FIELDS):
            assert name in run
        assert os.path.isdir(run["counts"])
    series = pq.read_table(out / "timeseries.parquet").to_pydict()
    every = default_checkpoint(m)
    assert series["t"][: m // every] == [every * (j + 1) for j in range(m // every)]
    assert set(series["grouping"]) == {"kg", "pkg:d=3,load=global"}
    last = [row for g, t, row in zip(series["grouping"], series["t"], series["loads"]) if g == "kg"][-1]
    assert last == summary["runs"][0]["loads"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dataset", "text:/no/such/file.txt"], "dataset file not found: /no/such/file.txt"),
        (["--dataset", "zipf:messages=10", "--groupings", "nosuch"], "unknown grouping 'nosuch'"),
        (["--dataset", "zipf:messages=10", "--groupings", "pkg:d=9", "-W", "4"], "d=9 exceeds"),
    ],
)
def test_bad_input_is_one_line_before_spark_reads(args, message, capsys):
    assert cli_main(["replay", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("keysplit: error: ") and message in err and err.count("\n") == 1


def test_a_file_without_any_key_is_refused(spark, tmp_path, capsys):
    path = tmp_path / "blank.txt"
    path.write_text("\n  --  \n...\n")
    assert cli_main(["replay", "--dataset", f"text:{path}", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "has no records" in err and "Traceback" not in err and err.count("\n") == 1


def test_spark_submit_runs_the_same_job(tmp_path):
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    env.pop("PYSPARK_GATEWAY_PORT", None)
    job = os.path.join(os.path.dirname(os.path.dirname(__file__)), os.pardir, "spark_replay", "job.py")
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    proc = subprocess.run([submit, "--master", "local[1]", job, "--dataset", "zipf:keys=50,messages=2000",
                           "-g", "kg,pkg", "-W", "3", "-S", "2", "--out", str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["replay"]["master"] == "local[1]"
    assert_same_as_simulate(summary, "zipf:keys=50,messages=2000")


def test_corrupt_gzip_and_parquet_found_by_an_executor_are_one_line(spark, tmp_path, corrupt_gzip, corrupt_parquet):
    for spec, message in ((f"text:{corrupt_gzip}", f"cannot read dataset file {corrupt_gzip}: corrupt gzip data ("),
                          (f"parquet:{corrupt_parquet},key=key",
                           # Spark's Parquet reader (snappy-java) names the damage in its own words
                           f"cannot read Parquet file {corrupt_parquet}: FAILED_TO_UNCOMPRESS(")):
        opts = ReplayOptions(dataset=spec, groupings=["kg"], workers=2, sources=1, out=str(tmp_path / "o"))
        with pytest.raises(KeysplitError) as failure:
            run_replay(spark, opts)
        assert message in str(failure.value) and "\n" not in str(failure.value)


def test_a_checkpoint_past_a_files_end_is_refused_after_the_ingest(spark, tmp_path):
    path = write_text(tmp_path / "book.txt", lines=50)
    opts = ReplayOptions(dataset=f"text:{path}", groupings=["kg"], workers=2, sources=1, checkpoint=10**9,
                         out=str(tmp_path / "o"))
    with pytest.raises(KeysplitError, match="--checkpoint 1000000000 exceeds the dataset's"):
        run_replay(spark, opts)


def test_a_bad_value_found_by_an_executor_is_one_line(spark, tmp_path, capsys):
    path = tmp_path / "t.csv"
    path.write_text("key,time\na,1.0\nb,soon\n")
    assert cli_main(["replay", "--dataset", f"csv:{path},key=key,time=time", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err == f"keysplit: error: {path}: time column 'time' holds 'soon', not a number\n"
    assert not (tmp_path / "o").exists()  # a failed replay leaves nothing, not an empty folder


def test_a_failed_replay_keeps_the_previous_outputs_and_a_good_one_replaces_them(spark, tmp_path, capsys):
    out = tmp_path / "o"
    out.mkdir()
    (out / ".keysplit-replay").write_text("a replay's folder\n")  # what a previous replay left
    (out / "summary.json").write_text("previous\n")
    (out / "notes.txt").write_text("mine\n")
    bad = tmp_path / "bad.csv"
    bad.write_text("key,time\na,1.0\nb,soon\n")
    assert cli_main(["replay", "--dataset", f"csv:{bad},key=key,time=time", "-g", "kg", "--out", str(out)]) == 2
    # no half-written set, no temporary folder
    assert sorted(os.listdir(out)) == [".keysplit-replay", "notes.txt", "summary.json"]
    assert (out / "summary.json").read_text() == "previous\n"
    good = tmp_path / "good.csv"
    good.write_text("key,time\na,1.0\nb,2.0\n")
    assert cli_main(["replay", "--dataset", f"csv:{good},key=key,time=time", "-g", "kg", "--out", str(out),
                     "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert sorted(os.listdir(out)) == [".keysplit-replay", "counts.parquet", "notes.txt", "summary.json",
                                       "timeseries.parquet"]
    assert json.loads((out / "summary.json").read_text()) == summary
    assert summary["replay"]["counts"] == str(out / "counts.parquet")


def test_missing_java_is_a_clear_message_not_a_java_stack_trace(tmp_path):
    empty = tmp_path / "jdk"
    empty.mkdir()
    bin_dir = os.path.dirname(sys.executable)
    env = dict(os.environ, JAVA_HOME=str(empty), PATH=bin_dir)
    env.pop("PYSPARK_GATEWAY_PORT", None)
    assert not os.path.exists(os.path.join(bin_dir, "java"))
    proc = subprocess.run([sys.executable, "-m", "keysplit.cli", "replay", "--dataset", "zipf:messages=100",
                           "--out", str(tmp_path / "o")], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("keysplit: error: Spark cannot start: Java 17 or newer is required")
    assert proc.stderr.count("\n") == 1 and "at org." not in proc.stderr and "Traceback" not in proc.stderr


def test_a_master_spark_rejects_is_the_jvms_reason_in_one_line(tmp_path):
    env = dict(os.environ)
    env.pop("PYSPARK_GATEWAY_PORT", None)
    proc = subprocess.run([sys.executable, "-m", "keysplit.cli", "replay", "--dataset", "zipf:messages=100",
                           "--master", "nowhere", "--out", str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith("keysplit: error: Spark could not start: Master must either be yarn or start with")
    assert proc.stderr.count("\n") == 1


def test_dataset_and_outputs_named_by_uri_go_through_spark(spark, tmp_path, zipf_spec):
    """``file:`` URIs stand for any Hadoop path (hdfs://, s3a://): the dataset is checked and read by Spark, the
    outputs written through it; a generator is written locally first and copied there."""
    out = f"file://{tmp_path}/o"
    summary = run_replay(spark, ReplayOptions(dataset=zipf_spec, groupings=["kg", "pkg:load=global"], workers=4,
                                              sources=2, out=out))
    assert summary["dataset"]["spec"] == f"csv:{out}/dataset.csv,key=key"
    assert_same_as_simulate(summary, zipf_spec)
    on_disk = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert on_disk["runs"] == summary["runs"]
    assert pq.read_table(tmp_path / "o" / "counts.parquet").num_rows == summary["dataset"]["keys"]
    assert set(pq.read_table(tmp_path / "o" / "timeseries.parquet").column("grouping").to_pylist()) == \
        {"kg", "pkg:load=global"}
    again = run_replay(spark, ReplayOptions(dataset=f"csv:{out}/dataset.csv,key=key", groupings=["kg"], workers=4,
                                            sources=2, out=str(tmp_path / "p")))
    assert again["runs"][0]["loads"] == summary["runs"][0]["loads"]
    assert again["dataset"]["sha256"] == summary["dataset"]["sha256"] == open_dataset(zipf_spec).sha256()
