"""A batching KeyRouter (``batch`` > 1) in front of ``Aggregate.partial``: the same routing decisions, exact totals
and simulate's loads, nothing lost or counted twice through a kill, and every batch really carries several rows. The
runs cross worker processes, so every batch goes through the local runner's Kryo check."""

from __future__ import annotations

import json

import pytest

from keysplit.datasets import open_dataset
from keysplit.runs.topology_run import read_results
from keysplit.simulator import simulate
from keysplit.storm.keys import RunKeys
from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology, TopologyBuildError, check_topology
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


def test_a_batching_router_in_front_of_a_users_bolt_is_refused_in_one_line():
    from streamparse import Bolt

    class Mine(Bolt):
        outputs = ["page"]

    class Views(Topology):
        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", batch=50)
        mine = Mine.spec(inputs=route.into(), par=2)

    with pytest.raises(TopologyBuildError) as err:
        check_topology(Views)
    assert str(err.value) == ("KeyRouter route: batch=50 packs rows into tuples that only Aggregate.partial unpacks, "
                              "and 'mine' is not one (use batch=1)")


@pytest.mark.parametrize(("options", "message"), [
    ({"batch": 0}, "batch must be an integer in [1, 100000]"),
    ({"batch": 2.5}, "batch must be an integer in [1, 100000]"),
    ({"batch": 10, "batch_ms": 0}, "batch_ms must be a number of milliseconds in (0, 60000]"),
])
def test_bad_batch_settings_are_refused(options, message):
    with pytest.raises(TopologyBuildError, match=message.replace("[", r"\[").replace("(", r"\(")):
        KeyRouter.spec(inputs=[FeedSpout.spec(fields=["page"])], key="page", grouping="pkg", **options)


def test_the_partial_subscribes_to_rows_and_batches():
    class Views(Topology):
        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", batch=50, par=2)
        partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=3)
        total = Aggregate.merge(inputs=partial)

    assert sorted(s.streamId for s in Views.partial.inputs) == ["default", "rows"]
    assert Views.route.outputs["rows"].output_fields == ["rows", "keysplit_route"]
