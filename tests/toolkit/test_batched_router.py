"""A batching KeyRouter (``batch`` > 1) in front of ``Aggregate.partial``: the same routing decisions, exact totals
and simulate's loads, nothing lost or counted twice through a kill, and every batch really carries several rows. The
runs cross worker processes, so every batch goes through the local runner's Kryo check."""

from __future__ import annotations

import json

import pytest

from keysplit.datasets import open_dataset
from keysplit.runs import redis_server
from keysplit.runs.topology_run import read_results
from keysplit.simulator import simulate
from keysplit.storm.keys import RunKeys
from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology, TopologyBuildError, check_topology
from keysplit.toolkit.contract import DEFAULT_ENTRY_ROWS
from tests.toolkit.test_user_topology_runs import FAMILIES, IN_FLIGHT, run

#: Rows a batch holds at most in these runs: small against the feed (1,500 rows) so that many batches fill.
BATCH = 16


#: The batcher comes after the grouping's decision, whatever the grouping: one family of each kind of state (none,
#: local loads, a shared function with time-driven rebuilds) shows it (every family runs unbatched elsewhere).
BATCHED_FAMILIES = [f for f in FAMILIES if f.split(":")[0] in ("kg", "pkg", "gedik")]


@pytest.mark.parametrize("grouping", BATCHED_FAMILIES)
def test_batches_change_no_decision(home, redis_url, views, tmp_path, grouping, topology_file):
    """The router asks its grouping for every row in stream order, batches or not: the per-task loads are
    ``keysplit simulate``'s record for record, and the totals are exact."""
    csv_path, total_bytes, page_views = views
    conn, summary = run(topology_file(tmp_path, grouping, batch=BATCH), csv_path, redis_url)
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    assert summary["acked"] == summary["rows"] == sum(page_views.values())
    assert summary["replayed"] == 0 and summary["task_deaths"] == 0
    reference = simulate(open_dataset(f"csv:{csv_path},key=page,time=time"), grouping, 4, 2, engine="reference")
    assert summary["routers"]["route"]["loads"] == reference.loads
    assert summary["partials"]["partial"]["records"] == reference.loads


def test_batches_carry_many_rows_each(home, redis_url, views, tmp_path, topology_file):
    """The partial stage receives batches, not rows: with every row in flight (max pending above the feed), fewer
    tuples than rows reach it (each partial task counts the tuples it received and the rows in them)."""
    csv_path, total_bytes, _ = views
    conn, summary = run(topology_file(tmp_path, "sg", batch=BATCH), csv_path, redis_url, max_pending=5000)
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    tasks = [json.loads(v) for v in conn.hvals(RunKeys(summary["run_id"]).stage("partial", "tasks"))]
    assert sum(t["records"] for t in tasks) == summary["rows"]
    assert sum(t["tuples"] for t in tasks) * 2 <= summary["rows"]


def test_the_feed_sends_its_rows_to_the_routers_in_batches(home, redis_url, views, tmp_path, topology_file):
    """A router reads the feed's rows many to a tuple (the feed spout's default batch), and routes each as it would
    one to a tuple: the totals are exact and the loads simulate's."""
    csv_path, total_bytes, page_views = views
    conn, summary = run(topology_file(tmp_path, "pkg:d=2"), csv_path, redis_url, max_pending=5000)
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    rows = sum(page_views.values())
    # the router's tuples are the spout's batches and its ticks (one a second a task): far fewer than rows
    assert summary["tuples"]["views"]["emitted"] * 4 <= rows and summary["tuples"]["route"]["executed"] * 4 <= rows
    reference = simulate(open_dataset(f"csv:{csv_path},key=page,time=time"), "pkg:d=2", 4, 2, engine="reference")
    assert summary["routers"]["route"]["loads"] == reference.loads


def test_a_feed_entry_holds_many_rows_each_counted_once(home, redis_url, views, tmp_path, topology_file):
    """Under exactly-once a feed entry holds up to DEFAULT_ENTRY_ROWS rows of one router, as a line holds words: the
    spout's costs are paid per entry, each row keeps its own record (its entry and place), and the merge applies each
    row once (its commit counts records, not entries); a router still reads its rows in the dataset's order, so the
    loads are simulate's."""
    csv_path, total_bytes, page_views = views
    conn, summary = run(topology_file(tmp_path, "pkg:d=2"), csv_path, redis_url)
    rows = sum(page_views.values())
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    assert summary["acked"] == rows
    assert summary["entries_acked"] * (DEFAULT_ENTRY_ROWS - 1) <= rows <= summary["entries_acked"] * DEFAULT_ENTRY_ROWS
    assert summary["merges"]["total"]["committed"] == rows
    reference = simulate(open_dataset(f"csv:{csv_path},key=page,time=time"), "pkg:d=2", 4, 2, engine="reference")
    assert summary["routers"]["route"]["loads"] == reference.loads


def test_under_at_least_once_an_entry_is_one_row(home, redis_url, views, tmp_path, topology_file):
    """A replay repeats every row of its entry, which at-least-once would count again: there an entry is one row."""
    csv_path, total_bytes, page_views = views
    conn, summary = run(topology_file(tmp_path, "pkg:d=2"), csv_path, redis_url, delivery="at-least-once")
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    assert summary["entries_acked"] == summary["acked"] == sum(page_views.values())


@pytest.mark.parametrize("victim", ["partial:1@0.3", "route:1@0.4", "worker:1@0.5"])
def test_a_killed_task_with_batches_loses_nothing_and_counts_nothing_twice(home, redis_url, views, tmp_path, victim,
                                                                           topology_file):
    """Exactly-once with batches: the rows in a killed router's open batches and in a killed partial's batches time
    out and replay, and the merge's compare-and-set drops what it committed before."""
    csv_path, total_bytes, _ = views
    path = topology_file(tmp_path, "pkg:d=2", config={"topology.message.timeout.secs": 4}, batch=BATCH)
    conn, summary = run(path, csv_path, redis_url, message_timeout=4, kills=(victim,))
    assert len(summary["kills"]) == 1
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    assert summary["task_restarts"] >= 1


def test_at_least_once_with_batches_counts_every_row_at_least_once(home, redis_url, views, tmp_path, topology_file):
    """A killed router loses the rows of its open batches; they time out and replay, and may be added twice."""
    csv_path, _, page_views = views
    path = topology_file(tmp_path, "pkg:d=2", accumulator="Count()", batch=BATCH)
    conn, summary = run(path, csv_path, redis_url, message_timeout=4, delivery="at-least-once",
                        kills=("route:0@0.4",), max_pending=IN_FLIGHT)  # rows still in flight when the kill fires
    counted = read_results(conn, summary["run_id"], "total")
    extra = {page: counted.get(page, 0) - n for page, n in page_views.items()}
    assert len(counted) == len(page_views) and min(extra.values()) >= 0, extra
    assert len(summary["kills"]) == 1 and summary["kills"][0]["acked"] < summary["rows"], summary["kills"]
    assert summary["replayed"] > 0


def test_a_users_bolt_behind_a_batching_router_gets_one_tuple_a_row():
    """Batches travel only where keysplit's components are at both ends: a user's bolt subscribed with into() takes
    the default stream (a tuple a row, the upstream's fields); one that subscribes to the rows stream is refused."""
    from streamparse import Bolt, Grouping

    class Mine(Bolt):
        outputs = ["page"]

    class Views(Topology):
        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", batch=50)
        mine = Mine.spec(inputs=route.into(), par=2)

    check_topology(Views)
    assert [s.streamId for s in Views.mine.inputs] == ["default"]
    assert Views.route.outputs["default"].output_fields == ["time", "page", "bytes", "keysplit_record",
                                                             "keysplit_replay", "keysplit_route"]

    class Unpacking(Topology):
        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", batch=50)
        mine = Mine.spec(inputs={route["rows"]: Grouping.fields("keysplit_route")}, par=2)

    with pytest.raises(TopologyBuildError) as err:
        check_topology(Unpacking)
    assert str(err.value) == ("KeyRouter route: its 'rows' stream packs rows into tuples that only Aggregate.partial "
                              "unpacks, and 'mine' is not one; subscribe it with inputs=route.into() (one tuple a "
                              "row)")


def test_a_router_takes_the_feeds_rows_in_batches_and_a_users_bolt_one_a_row():
    """The feed sends a router its rows in batches (``batch`` rows a tuple at most; batch=1: one tuple a row); a
    user's bolt on the feed gets one tuple a row; a feed cannot do both at once, nor batch for a user's bolt."""
    from streamparse import Bolt, Grouping

    class Mine(Bolt):
        outputs = ["page"]

    def topology(batch: int):
        class Views(Topology):
            views = FeedSpout.spec(fields=["time", "page", "bytes"], batch=batch)
            route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", par=2)
            partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=3)
            total = Aggregate.merge(inputs=partial)
        return Views

    batched, single = topology(256), topology(1)
    check_topology(batched)
    check_topology(single)
    assert [s.streamId for s in batched.route.inputs] == ["rows"]
    assert [s.streamId for s in single.route.inputs] == ["default"]
    assert batched.views.outputs["rows"].output_fields == ["rows", "keysplit_route"]

    class Both(Topology):
        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", par=2)
        partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=3)
        total = Aggregate.merge(inputs=partial)
        mine = Mine.spec(inputs=[views])

    with pytest.raises(TopologyBuildError, match=r"^FeedSpout views: 'route' takes its rows in batches and 'mine' "
                                                 r"one tuple a row, .* give the spout batch=1"):
        check_topology(Both)

    class Stranger(Topology):
        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        mine = Mine.spec(inputs={views["rows"]: Grouping.SHUFFLE})

    with pytest.raises(TopologyBuildError, match=r"^FeedSpout views: its 'rows' stream carries rows in batches, "
                                                 r"which only a KeyRouter unpacks, and 'mine' is not one"):
        check_topology(Stranger)


@pytest.mark.parametrize(("options", "message"), [
    ({"batch": 0}, "batch must be an integer in [1, 100000]"),
    ({"batch": 2.5}, "batch must be an integer in [1, 100000]"),
    ({"batch": 10, "batch_ms": 0}, "batch_ms must be a number of milliseconds in (0, 60000]"),
])
def test_bad_batch_settings_are_refused(options, message):
    with pytest.raises(TopologyBuildError, match=message.replace("[", r"\[").replace("(", r"\(")):
        KeyRouter.spec(inputs=[FeedSpout.spec(fields=["page"])], key="page", grouping="pkg", **options)


@pytest.mark.parametrize("batch", [0, 2.5, True, 100_001])
def test_a_bad_feed_batch_is_refused(batch):
    with pytest.raises(TopologyBuildError, match=r"^FeedSpout: batch must be an integer in \[1, 100000\]"):
        FeedSpout.spec(fields=["page"], batch=batch)


def test_the_partial_subscribes_to_rows_and_batches():
    class Views(Topology):
        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", batch=50, par=2)
        partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=3)
        total = Aggregate.merge(inputs=partial)

    assert sorted(s.streamId for s in Views.partial.inputs) == ["default", "rows"]
    assert Views.route.outputs["rows"].output_fields == ["rows", "keysplit_route"]


def test_rate_paces_the_feed_of_a_topology_file(home, redis_url, views, tmp_path, topology_file, capsys):
    """``keysplit run FILE --rate R``: the feed's tasks emit R rows a second together, row i due at i / R, so no run
    is faster than R rows a second (first emit to last ack), and the totals stay exact; without keysplit's feed
    there is nothing for --rate to pace."""
    from keysplit.cli import main

    csv_path, total_bytes, page_views = views
    rows, rate = sum(page_views.values()), 600
    path = topology_file(tmp_path, "pkg:d=2")
    assert main(["run", str(path), "--dataset", f"csv:{csv_path},key=page", "--redis", redis_url, "--rate",
                 str(rate), "--worker-processes", "2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == rows and summary["totals"] == "exact"
    assert summary["rows_per_second"] <= rate * rows / (rows - 1)
    conn = redis_server.connect(redis_url)
    assert read_results(conn, summary["run_id"], "total") == dict(total_bytes)
    assert main(["run", str(path), "--rate", "600", "--duration", "5"]) == 2
    assert "--rate paces keysplit's feed" in capsys.readouterr().err
