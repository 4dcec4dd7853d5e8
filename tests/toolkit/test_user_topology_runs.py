"""A toolkit topology on the local runner, as a user runs theirs: exact totals for every grouping family, loads equal
to ``keysplit simulate`` record for record, and nothing lost when a task is killed (issue: keysplit in your own
topology). Every run crosses worker processes, so tuples go through the local runner's Kryo check."""

from __future__ import annotations

import json

import pytest

from keysplit.cli import main
from keysplit.datasets import open_dataset
from keysplit.runs import redis_server
from keysplit.runs.topology_file import load_topology
from keysplit.runs.topology_run import TopologyRunOptions, read_results, run_topology
from keysplit.simulator import simulate

#: One spec per family the toolkit must carry (kg, sg, pkg, dchoices, wchoices, dkg, fish, salt, gedik).
FAMILIES = ["kg", "sg", "pkg:d=2", "dchoices", "wchoices", "dkg", "fish", "salt", "gedik:period=1"]


def run(path, csv_path, redis_url, **options):
    loaded = load_topology(str(path))
    opts = TopologyRunOptions(dataset=open_dataset(f"csv:{csv_path},key=page"), worker_processes=2, timeout=300,
                              **options)
    conn = redis_server.connect(redis_url)
    return conn, run_topology(loaded, opts, conn, redis_url)


#: Rows a spout keeps in flight in the at-least-once kill tests: at most this many complete per flush period.
IN_FLIGHT = 200


@pytest.mark.parametrize("grouping", FAMILIES)
def test_every_family_gives_exact_totals_and_the_simulators_loads(home, redis_url, views, tmp_path, grouping,
                                                                   topology_file):
    """The router decides on the rows' own time column, so every grouping, time-driven ones included, makes the
    simulator's decisions for each of its two sources: the per-task loads are simulate's, record for record."""
    csv_path, total_bytes, page_views = views
    conn, summary = run(topology_file(tmp_path, grouping), csv_path, redis_url)
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    assert summary["acked"] == summary["rows"] == sum(page_views.values())
    assert summary["replayed"] == 0 and summary["task_deaths"] == 0
    reference = simulate(open_dataset(f"csv:{csv_path},key=page,time=time"), grouping, 4, 2, engine="reference")
    assert summary["routers"]["route"]["loads"] == reference.loads
    assert summary["routers"]["route"]["unsynced"] == 0  # gedik's follower decided every row with the leader's state
    best = sorted(total_bytes.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert summary["merges"]["total"]["top"] == [list(kv) for kv in best]


def test_pkg_splits_hot_keys_where_kg_keeps_them_whole(home, redis_url, views, tmp_path, topology_file):
    """The price of balance the papers state: PKG holds a hot key on two tasks, KG on one."""
    csv_path, _, _ = views
    held = {}
    for grouping in ("kg", "pkg:d=2"):
        folder = tmp_path / grouping.replace(":", "-").replace("=", "")
        folder.mkdir()
        _, summary = run(topology_file(folder, grouping), csv_path, redis_url)
        held[grouping] = sum(summary["partials"]["partial"]["keys"])
        if grouping == "kg":
            distinct = summary["merges"]["total"]["keys"]
    assert held["kg"] == distinct < held["pkg:d=2"] <= 2 * distinct


@pytest.mark.parametrize("victim", ["partial:1@0.3", "total:0@0.5", "route:1@0.4", "worker:1@0.5"])
def test_a_killed_task_loses_nothing_and_counts_nothing_twice(home, redis_url, views, tmp_path, victim,
                                                               topology_file):
    """Exactly-once with keysplit's feed: the killed task's worker restarts, the rows whose trees it broke time out
    and replay, and the merge's compare-and-set drops every contribution it committed before."""
    csv_path, total_bytes, _ = views
    path = topology_file(tmp_path, "pkg:d=2", config={"topology.message.timeout.secs": 4})
    conn, summary = run(path, csv_path, redis_url, message_timeout=4, kills=(victim,))
    assert len(summary["kills"]) == 1
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    assert summary["task_restarts"] >= 1
    # the summary checks it too: every row applied once, and the loads counted once add up to the rows
    assert summary["totals"] == "exact" and summary["merges"]["total"]["committed"] == summary["rows"]
    route = summary["routers"]["route"]
    assert sum(route["loads_once"]) == summary["rows"] <= sum(route["loads"])


def test_at_least_once_counts_every_row_at_least_once_through_a_kill(home, redis_url, views, tmp_path,
                                                                     topology_file):
    """The weaker guarantee, stated and shown: with keysplit.delivery=at-least-once a replayed row may be added
    again, never lost."""
    csv_path, _, page_views = views
    path = topology_file(tmp_path, "pkg:d=2", accumulator="Count()")
    # few rows in flight: the run lasts many flush periods, so the kill, fired once the spout's metrics (written
    # every second) say 40%, still finds rows in flight on a busy machine (a kill after the last ack replays nothing)
    conn, summary = run(path, csv_path, redis_url, message_timeout=4, delivery="at-least-once",
                        kills=("partial:0@0.4",), max_pending=IN_FLIGHT)
    counted = read_results(conn, summary["run_id"], "total")
    assert set(counted) == set(page_views)
    assert all(counted[page] >= n for page, n in page_views.items())
    assert summary["kills"][0]["acked"] < summary["rows"], "the kill fired after the last row was acked"
    assert summary["replayed"] > 0


def test_the_cli_runs_a_topology_file_and_reports_json(home, redis_url, views, tmp_path, capsys, topology_file):
    csv_path, total_bytes, _ = views
    path = topology_file(tmp_path, "dchoices")
    assert main(["run", str(path), "--dataset", f"csv:{csv_path},key=page", "--redis", redis_url,
                 "--worker-processes", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["topology"] == "pagestats.py:PageStats"
    assert sum(summary["routers"]["route"]["loads"]) == summary["rows"]
    conn = redis_server.connect(redis_url)
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    run_id = summary["run_id"]
    assert main(["runs", "show", run_id, "--redis", redis_url]) == 0
    assert "route: grouping dchoices" in capsys.readouterr().out
    assert main(["run", "wordcount", "--collect", run_id, "--redis", redis_url]) == 2
    assert "a topology file, not the word count" in capsys.readouterr().err
    # calibrate fits topology runs, from two of them on
    assert main(["calibrate", "--run", run_id, "--name", "x", "--redis", redis_url]) == 2
    assert "calibrate needs two finished runs or more of a topology file" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["--grouping", "pkg"], "--grouping: only for `keysplit run wordcount`"),
    ([], "reads keysplit's feed (views): give --dataset"),
    (["--dataset", "zipf:messages=10"], "has no column 'page', which views emits (columns: time, keys)"),
    (["--dataset", "csv:{csv},key=bytes"], "routes by 'page': give key=page"),
    (["--dataset", "csv:{csv},key=page", "--kill", "nothing@0.5"], "expected COMPONENT[:INDEX]@FRACTION"),
    (["--dataset", "csv:{csv},key=page", "--kill", "partial:4@0.5"], "partial has 4 task(s)"),
])
def test_mistakes_are_one_line_and_exit_2(views, tmp_path, capsys, args, message, topology_file):
    csv_path, _, _ = views
    path = topology_file(tmp_path, "pkg")
    assert main(["run", str(path), *[a.format(csv=csv_path) for a in args]]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err, err


def test_load_submit_collect_the_cluster_workflow(home, redis_url, views, tmp_path, capsys, topology_file):
    """`keysplit run FILE --load-only`, then the topology as `sparse submit -o keysplit.run_id=...` deploys it (run
    here by the local runner with the conf sparse would send, the password in a file on the workers), then
    `--collect`: the summary from Redis alone, and exact results."""
    from keysplit.local import LocalCluster
    from keysplit.local.submission import build_resources, submit_conf
    from keysplit.storm.feed import feed_done
    from keysplit.storm.keys import RunKeys
    from keysplit.storm.settings import split_password

    csv_path, total_bytes, page_views = views
    path = topology_file(tmp_path, "wchoices")
    url, password = split_password(redis_url)
    secret = tmp_path / "redis.pass"
    secret.write_text(password + "\n")
    redis = ["--redis", url, "--redis-password-file", str(secret)]
    assert main(["run", str(path), "--load-only", "--dataset", f"csv:{csv_path},key=page", *redis]) == 0
    run_id = capsys.readouterr().out.strip()
    loaded = load_topology(str(path))
    conf = submit_conf(loaded.cls, "pagestats", {"keysplit.run_id": run_id, "keysplit.redis_url": url,
                                                 "keysplit.redis_password_file": str(secret), "topology.workers": 2})
    conn = redis_server.connect(redis_url)
    jar_tree = build_resources(tmp_path / "resources")  # what `keysplit jar` puts in the jar
    with LocalCluster(loaded.cls, conf, cwd=str(tmp_path), resources=str(jar_tree)) as cluster:
        cluster.start()
        assert cluster.run_until(lambda: feed_done(conn, RunKeys(run_id)), 120)
        cluster.run_until(lambda: sum(int(v) for v in conn.hvals(RunKeys(run_id).stage("route", "loads")))
                          >= sum(page_views.values()), 10)  # the routers' last report, at their tick
    assert main(["run", str(path), "--collect", run_id, *redis, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["run_id"] == run_id and summary["worker_restarts"] is None and "incomplete" not in summary
    assert sum(summary["routers"]["route"]["loads"]) == summary["rows"]
    assert read_results(conn, run_id, "total") == dict(total_bytes)
    # what a local run's summary has, from Redis alone: totals checked, task restarts (their own start records)
    assert summary["totals"] == "exact" and summary["routers"]["route"]["loads_once"] == summary["routers"]["route"][
        "loads"]
    assert summary["task_restarts"] == 0 and summary["restarting"] == {}



def test_collect_before_the_cluster_starts_says_how_many_rows_are_acked(home, redis_url, views, tmp_path, capsys,
                                                                        topology_file):
    """`--collect` right after `keysplit submit`, while Storm's workers are still starting (they took 40 s on the
    Storm 2.8.8 of docs/benchmarks/storm-cluster.md): the count so far and that nothing has started, not an empty
    table of `0 task(s) of None`."""
    csv_path, _, page_views = views
    path = topology_file(tmp_path, "pkg")
    assert main(["run", str(path), "--load-only", "--dataset", f"csv:{csv_path},key=page", "--redis", redis_url]) == 0
    run_id = capsys.readouterr().out.strip()
    assert main(["run", str(path), "--collect", run_id, "--redis", redis_url]) == 0
    out = capsys.readouterr().out
    rows = sum(page_views.values())
    assert f"note: 0 of {rows:,} rows acked: no component has started yet" in out, out
    assert "route: grouping pkg on 'page', 2 source(s): nothing routed yet" in out and "None" not in out, out

def test_the_example_topology_counts_the_generated_page_views_exactly(home, redis_url, tmp_path, capsys):
    """topologies/pageviews.py as its docstring runs it, on `keysplit datasets generate pageviews:...`: exact bytes
    per page against a sum made here with the csv module, and the simulator's loads."""
    import csv
    from collections import Counter
    from pathlib import Path

    views = tmp_path / "views.csv"
    assert main(["datasets", "generate", "pageviews:keys=300,messages=2000,seed=2", "--out", str(views)]) == 0
    capsys.readouterr()
    example = Path(__file__).resolve().parents[2] / "topologies" / "pageviews.py"
    assert main(["run", str(example), "--dataset", f"csv:{views},key=page", "--redis", redis_url,
                 "--worker-processes", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    total: Counter = Counter()
    with open(views, newline="") as fh:
        for row in csv.DictReader(fh):
            total[row["page"]] += int(row["bytes"])
    assert read_results(redis_server.connect(redis_url), summary["run_id"], "total") == dict(total)
    reference = simulate(open_dataset(f"csv:{views},key=page,time=time"), "pkg:d=2", 4, 2, engine="reference")
    assert summary["routers"]["route"]["loads"] == reference.loads
