"""`keysplit compare` puts runs stored in a real Redis next to a real replay, and refuses mismatched datasets."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from keysplit.cli import main as cli_main
from keysplit.datasets import open_dataset
from keysplit.runs.redis_server import connect, running_server, stop_server
from keysplit.simulator import simulate
from spark_replay.job import ReplayOptions, run_replay

W, S = 4, 2


@pytest.fixture(scope="module")
def redis_conn(tmp_path_factory):
    home = tmp_path_factory.mktemp("redis-home")
    conn = connect(None, home=home)
    yield conn, running_server(home).url
    stop_server(home, save=False, force=True)


@pytest.fixture(scope="module")
def text_spec(tmp_path_factory):
    rng = random.Random(9)
    words = [f"w{i}" for i in range(60)]
    path = tmp_path_factory.mktemp("data") / "lines.txt"
    path.write_text("\n".join(" ".join(rng.choices(words, [1 / (i + 1) for i in range(60)], k=rng.randint(1, 8)))
                              for _ in range(400)) + "\n")
    return f"text:{path}"


@pytest.fixture(scope="module")
def replay_dir(spark, tmp_path_factory, text_spec):
    out = tmp_path_factory.mktemp("replay")
    # the knobs of the runs these tests store (a max pending of 1,000 lines, not the default's 50,000)
    run_replay(spark, ReplayOptions(dataset=text_spec, groupings=["kg", "pkg"], workers=W, sources=S, max_pending=1000,
                                    out=str(out)))
    return out


def store_run(conn, run_id: str, spec: str, grouping: str, counts: dict, sha: str | None = None) -> dict:
    """A finished run as the topology stores it: the --json summary and the final totals hash."""
    dataset = open_dataset(spec)
    sim = simulate(dataset, grouping, W, S)
    summary = {
        "run_id": run_id, "grouping": grouping, "dataset": spec, "dataset_sha256": sha or dataset.sha256(),
        "words_per_second": 1234.5, "lines_per_second": 321.0,
        "latency_ms": {"mean": 3.0, "p50": 2.0, "p95": 6.0, "p99": 9.0}, "loads": sim.loads,
        "dist_cost": sim.dist_cost, "distinct_per_worker": sim.distinct_per_worker,
        "final_imbalance_fraction": sim.final_imbalance_fraction, "load_stddev": sim.load_stddev,
        "replayed": 0, "top_k": [], "cpu_delay_ms": 1.0, "workers": W, "sources": S,
    }
    conn.set(f"keysplit:run:{run_id}:summary", json.dumps(summary))
    conn.delete(f"keysplit:run:{run_id}:counts")
    conn.hset(f"keysplit:run:{run_id}:counts", mapping=counts)
    return summary


def exact_counts(spec: str) -> dict:
    counts: Counter = Counter()
    for _, keys in open_dataset(spec).records():
        counts.update(keys)
    return dict(counts)


def test_compare_puts_runs_next_to_the_replay_and_checks_the_counts(redis_conn, replay_dir, text_spec, tmp_path,
                                                                      capsys):
    conn, url = redis_conn
    exact = exact_counts(text_spec)
    store_run(conn, "c-kg", text_spec, "kg", exact)
    off = dict(exact, w3=exact["w3"] + 1)
    store_run(conn, "c-pkg", text_spec, "pkg:d=2", off)
    out = tmp_path / "cmp"
    assert cli_main(["compare", "--run", "c-kg,c-pkg", "--replay", str(replay_dir), "--out", str(out),
                     "--redis", url]) == 0
    printed = capsys.readouterr().out
    assert "c-kg" in printed and "equal" in printed and "DIFFER (0 missing, 0 extra, 1 different)" in printed
    result = json.loads((out / "comparison.json").read_text())
    kg, pkg = result["rows"]
    assert (kg["grouping"], pkg["grouping"]) == ("kg", "pkg")  # pkg:d=2 is pkg's canonical spec
    assert kg["counts_equal"] and kg["loads_equal"]  # key grouping's loads do not depend on the order
    assert not pkg["counts_equal"] and pkg["counts_diff"]["examples"] == ["w3"]
    replay = json.loads((replay_dir / "summary.json").read_text())
    assert kg["throughput"] == {"run_words_per_second": 1234.5,
                                "replay_estimate": replay["runs"][0]["throughput_estimate"]}
    assert kg["latency_p99_ms"] == {"run": 9.0, "replay": replay["runs"][0]["latency_p99_ms"]}
    for name in ("throughput_latency.png", "loads.png", "imbalance.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_json_is_the_comparison_object(redis_conn, replay_dir, text_spec, tmp_path, capsys):
    conn, url = redis_conn
    store_run(conn, "j-kg", text_spec, "kg", exact_counts(text_spec))
    out = tmp_path / "cmp"
    assert cli_main(["compare", "--run", "j-kg", "--replay", str(replay_dir), "--out", str(out), "--redis", url,
                     "--no-plots", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((out / "comparison.json").read_text())
    assert [r["run_id"] for r in printed["rows"]] == ["j-kg"] and printed["rows"][0]["counts_equal"]


def test_a_run_of_another_dataset_is_refused(redis_conn, replay_dir, text_spec, capsys):
    conn, url = redis_conn
    store_run(conn, "c-other", text_spec, "kg", exact_counts(text_spec), sha="0" * 64)
    assert cli_main(["compare", "--run", "c-other", "--replay", str(replay_dir), "--redis", url]) == 2
    err = capsys.readouterr().err
    assert "are of different datasets" in err and "sha256 000000000000" in err and err.count("\n") == 1


def test_missing_run_and_missing_replay_are_one_line(redis_conn, replay_dir, tmp_path, capsys):
    _, url = redis_conn
    assert cli_main(["compare", "--run", "nope", "--replay", str(replay_dir), "--redis", url]) == 2
    assert "no finished run 'nope'" in capsys.readouterr().err
    assert cli_main(["compare", "--run", "c-kg", "--replay", str(tmp_path / "none"), "--redis", url]) == 2
    assert "no replay in" in capsys.readouterr().err


def test_a_grouping_the_replay_did_not_run_is_named(redis_conn, replay_dir, text_spec, capsys):
    conn, url = redis_conn
    store_run(conn, "c-sg", text_spec, "sg", exact_counts(text_spec))
    assert cli_main(["compare", "--run", "c-sg", "--replay", str(replay_dir), "--redis", url]) == 2
    assert "has no grouping 'sg' (it has: kg, pkg)" in capsys.readouterr().err


NO_REDIS = "redis://127.0.0.1:1"  # never reached: these mistakes are refused before Redis


@pytest.mark.parametrize(("content", "problem"), [
    (b"3", "(it holds a number, not an object)"),
    (b"null", "(it holds null, not an object)"),
    (b'"runs dataset"', "(it holds a string, not an object)"),
    (b"[]", "(it holds an array, not an object)"),
    (b"\xff\xfe{}", "(not UTF-8 text)"),
    (b'{"runs": [', "(not JSON: Expecting value: line 1 column 11"),
    (b'{"runs": []}', '(no "dataset")'),
    (b'{"dataset": {"spec": "x", "sha256": "y"}, "replay": {"counts": "c"}}', '(no "runs")'),
    (b'{"dataset": 1, "replay": {}, "runs": []}', '("dataset" is a number, not an object)'),
    (b'{"dataset": {"spec": "x", "sha256": "y"}, "replay": {"counts": "c"}, "runs": [{"grouping": "kg"}]}',
     '("runs" entry 0 has no "workers")'),
])
def test_a_malformed_replay_summary_is_named_in_one_line(tmp_path, capsys, content, problem):
    (tmp_path / "summary.json").write_bytes(content)
    assert cli_main(["compare", "--run", "r", "--replay", str(tmp_path), "--redis", NO_REDIS]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}/summary.json is not a keysplit replay summary {problem}" in err and err.count("\n") == 1


@pytest.mark.parametrize(("out", "message"), [("t.txt", "File exists"), ("t.txt/sub", "Not a directory")])
def test_an_output_directory_that_cannot_be_created_is_refused_before_redis(replay_dir, tmp_path, capsys, out,
                                                                             message):
    (tmp_path / "t.txt").write_text("a file\n")
    path = tmp_path / out
    assert cli_main(["compare", "--run", "r", "--replay", str(replay_dir), "--out", str(path),
                     "--redis", NO_REDIS]) == 2
    err = capsys.readouterr().err
    assert err == f"keysplit: error: cannot create output directory {path}: {message}\n"


@pytest.mark.parametrize(("runs", "message"), [("", "expected at least one value, got ''"),
                                               ("a,,b", "empty item in 'a,,b'")])
def test_an_empty_run_id_is_refused(tmp_path, capsys, runs, message):
    with pytest.raises(SystemExit) as exited:
        cli_main(["compare", "--run", runs, "--replay", str(tmp_path)])
    assert exited.value.code == 2 and capsys.readouterr().err.splitlines()[-1].endswith(message)


def _tree(folder) -> dict:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in sorted(folder.rglob("*"))}


@pytest.mark.parametrize("out", ["counts.parquet", "counts.parquet/sub", "timeseries.parquet/x/y"])
def test_an_output_inside_the_replays_files_is_refused_and_nothing_written(replay_dir, capsys, out):
    before = _tree(replay_dir)
    assert cli_main(["compare", "--run", "r", "--replay", str(replay_dir), "--out", str(replay_dir / out),
                     "--redis", NO_REDIS]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is inside the replay's" in err and "choose another output directory" in err
    assert _tree(replay_dir) == before


def test_an_output_file_that_is_an_input_under_another_name_is_refused(replay_dir, tmp_path, capsys):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "comparison.json").symlink_to(replay_dir / "summary.json")
    before = (replay_dir / "summary.json").read_bytes()
    assert cli_main(["compare", "--run", "r", "--replay", str(replay_dir), "--out", str(out),
                     "--redis", NO_REDIS]) == 2
    assert "would overwrite the input" in capsys.readouterr().err
    assert (replay_dir / "summary.json").read_bytes() == before
def test_the_replay_models_the_topology_and_compare_shows_knobs_and_ratios(redis_conn, replay_dir, text_spec,
                                                                            tmp_path, capsys):
    conn, url = redis_conn
    replay = json.loads((replay_dir / "summary.json").read_text())
    assert replay["replay"]["arrivals"] == "closed" and replay["replay"]["max_pending"] == 1000
    kg_est = replay["runs"][0]
    assert kg_est["model"] == "topology" and kg_est["throughput_estimate"] > 0
    # a closed loop holds every line at least one flush period (counter tick, then the aggregator's)
    assert 1000.0 <= kg_est["latency_p50_ms"] <= kg_est["latency_p99_ms"]
    summary = store_run(conn, "k-kg", text_spec, "kg", exact_counts(text_spec))
    summary.update(aggregators=2, max_pending=1000, flush_secs=1.0, message_timeout_secs=30, spouts=1, rate=None)
    conn.set("keysplit:run:k-kg:summary", json.dumps(summary))
    out = tmp_path / "cmp"
    assert cli_main(["compare", "--run", "k-kg", "--replay", str(replay_dir), "--out", str(out),
                     "--redis", url]) == 0
    printed = capsys.readouterr().out
    assert ("knobs: --sources 2, --workers 4, --aggregators 2, --spouts 1, --cpu-delay 1.0, --max-pending 1000"
            in printed)
    row = json.loads((out / "comparison.json").read_text())["rows"][0]
    assert row["ratio"]["throughput"] == pytest.approx(kg_est["throughput_estimate"] / 1234.5)
    assert row["ratio"]["latency_p99_ms"] == pytest.approx(kg_est["latency_p99_ms"] / 9.0)
    assert f"({row['ratio']['throughput']:.2f})" in printed
    assert (out / "agreement.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("change", "message"), [
    ({"max_pending": 4000}, "--max-pending 4000 vs 1000"),
    ({"aggregators": 3, "flush_secs": 2.0}, "--aggregators 3 vs 2; --flush 2.0 vs 1.0"),
    ({"rate": 500.0}, "--rate / --arrivals open, 500 words/s vs closed"),
    ({"cpu_delay_ms": 0.0}, "--cpu-delay 0.0 vs 1.0"),
])
def test_a_run_whose_knobs_differ_is_refused(redis_conn, replay_dir, text_spec, capsys, change, message):
    conn, url = redis_conn
    summary = store_run(conn, "k-other", text_spec, "kg", exact_counts(text_spec))
    summary.update(change)
    conn.set("keysplit:run:k-other:summary", json.dumps(summary))
    assert cli_main(["compare", "--run", "k-other", "--replay", str(replay_dir), "--redis", url]) == 2
    err = capsys.readouterr().err
    assert "model different topologies" in err and message in err and err.count("\n") == 1


def test_run_and_replay_spell_the_knobs_the_same():
    from keysplit.cli import build_parser
    from keysplit.commands.knobs import KNOBS

    sub = next(a for a in build_parser(eager=True)._actions if a.__class__.__name__ == "_SubParsersAction")
    for command in ("run", "replay"):
        options = {o for a in sub.choices[command]._actions for o in a.option_strings}
        assert set(KNOBS.values()) <= options, command


def test_latest_names_the_newest_finished_run(redis_conn, text_spec):
    from keysplit.compare import resolve_runs
    from keysplit.storm.keys import RUNS, RunKeys

    conn, _url = redis_conn
    exact = exact_counts(text_spec)
    for run_id in ("l-old", "l-new"):
        store_run(conn, run_id, text_spec, "kg", exact)
    conn.zadd(RUNS, {"l-old": 100.0, "l-new": 200.0, "l-running": 300.0})
    conn.hset(RunKeys("l-running").record, mapping={"state": "interrupted", "started": 300.0})
    assert resolve_runs(conn, ["latest"]) == ["l-new"]  # the interrupted one is newer but has no summary
    assert resolve_runs(conn, ["l-old", "latest"]) == ["l-old", "l-new"]
    conn.zrem(RUNS, "l-old", "l-new", "l-running")


def test_a_runs_record_reads_with_numbers_for_times_and_a_boolean_feed(redis_conn):
    from keysplit.runs.records import read_record
    from keysplit.storm.keys import RUNS, RunKeys

    conn, _url = redis_conn
    conn.hset(RunKeys("typed").record, mapping={"state": "finished", "started": 10.5, "updated": 12.25,
                                                "finished": 12.0, "lines": 3, "feed_complete": 1})
    record = read_record(conn, "typed")
    assert (record["started"], record["updated"], record["finished"], record["lines"]) == (10.5, 12.25, 12.0, 3)
    assert record["feed_complete"] is True
    conn.delete(RunKeys("typed").record)
    conn.zrem(RUNS, "typed")
