"""A user's topology through the whole loop, as the guides walk it from a fresh folder: ``keysplit run FILE`` ->
``keysplit replay FILE`` -> ``keysplit compare``, every key's result and every task's load equal; and ``keysplit
calibrate`` on two topology runs, its profile used by the replay.

Real subprocesses (the local runner), real Redis, the suite's one real SparkSession (``conftest.spark``). No
assertion on timing: how close the calibrated model comes is measured by ``benchmarks/topology_agreement.py``.
"""

from __future__ import annotations

import csv
import json
from collections import Counter

import pytest

from keysplit.cli import main
from keysplit.datasets import open_dataset
from keysplit.simulator import simulate

#: The guide's topology (docs/guides/your-topology.md), verbatim but for its grouping and the merge's top.
PAGEBYTES = '''from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology


class PageBytes(Topology):
    views = FeedSpout.spec(fields=["time", "page", "bytes"])
    route = KeyRouter.spec(inputs=[views], key="page", grouping="{grouping}", time="time", par=2)
    partial = Aggregate.partial(inputs=route, accumulator={accumulator}, period=1.0, par=4)
    total = Aggregate.merge(inputs=partial, top={top}, par=2)
'''

#: A user's own accumulator, in the project's src/ (where the workers, and the replay's executors, import it).
OWN_ACCUMULATOR = '''from keysplit.toolkit import Accumulator


class Biggest(Accumulator):
    """The largest bytes of a page, and how many views it had."""

    ranks = False

    def __init__(self, field):
        super().__init__(field=field)
        self.fields = (field,)

    def zero(self):
        return [0, 0]

    def add(self, state, record):
        return [max(state[0], int(record[self.params["field"]])), state[1] + 1]

    def merge(self, a, b):
        return [max(a[0], b[0]), a[1] + b[1]]

    def result(self, state):
        return {"biggest": state[0], "views": state[1]}
'''


def cli_json(capsys, args: list[str]) -> dict:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def write_project(folder, grouping: str, accumulator: str = 'Sum("bytes")', own: bool = False) -> str:
    (folder / "topologies").mkdir(parents=True)
    (folder / "src").mkdir()
    head = "from pagestats import Biggest\n" if own else ""
    (folder / "topologies" / "pagebytes.py").write_text(
        head + PAGEBYTES.format(grouping=grouping, accumulator=accumulator, top=0 if own else 5))
    if own:
        (folder / "src" / "pagestats.py").write_text(OWN_ACCUMULATOR)
    return str(folder / "topologies" / "pagebytes.py")


def independent_totals(path) -> tuple[dict, dict]:
    """Each page's bytes summed, and its biggest bytes and views, with the csv module (not keysplit's reader)."""
    total, biggest, views = Counter(), Counter(), Counter()
    with open(path, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            total[row["page"]] += int(row["bytes"])
            biggest[row["page"]] = max(biggest[row["page"]], int(row["bytes"]))
            views[row["page"]] += 1
    return ({json.dumps(p): json.dumps(n) for p, n in total.items()},
            {json.dumps(p): json.dumps({"biggest": biggest[p], "views": views[p]}) for p in views})


@pytest.fixture(scope="module")
def walk(home, redis_url, spark, tmp_path_factory):
    """The guide's steps in a fresh folder: the sample, the project, one run, one replay; then a second project
    with kg and a user's own accumulator, run too (for calibrate)."""
    import os

    folder = tmp_path_factory.mktemp("fresh")
    before = os.getcwd()
    os.chdir(folder)
    try:
        assert main(["datasets", "generate", "pageviews:keys=400,messages=3000,seed=1", "--out", "views.csv"]) == 0
        pages = write_project(folder / "mysite", "pkg")
        own = write_project(folder / "mysite-kg", "kg", "Biggest(\"bytes\")", own=True)
        yield folder, pages, own
    finally:
        os.chdir(before)


def test_run_replay_compare_results_and_loads_equal(walk, capsys):
    folder, pages, _ = walk
    dataset = "csv:views.csv,key=page"
    run = cli_json(capsys, ["run", pages, "--dataset", dataset, "--worker-processes", "2", "--run-id", "pages-pkg"])
    assert run["keyed_stage"]["dataset"] == "csv:views.csv,key=page,time=time"
    replay = cli_json(capsys, ["replay", pages, "--dataset", dataset, "--out", "replay-pages"])
    assert replay["dataset"]["spec"] == "csv:views.csv,key=page,time=time"
    assert replay["topology"]["keys"] == run["merges"]["total"]["keys"]
    comparison = cli_json(capsys, ["compare", "--run", "pages-pkg", "--replay", "replay-pages"])
    row = comparison["rows"][0]
    assert row["compared"] == "results" and row["counts_equal"], row["counts_diff"]
    assert row["loads_equal"] and row["loads"]["run"] == row["loads"]["replay"]
    # ... and both are the simulator's, and an independent sum of the file
    sim = simulate(open_dataset("csv:views.csv,key=page,time=time"), "pkg", 4, 2, engine="reference")
    assert row["loads"]["run"] == sim.loads
    import pyarrow.parquet as pq

    table = pq.read_table(replay["topology"]["results"])
    assert dict(zip(table.column("key").to_pylist(), table.column("result").to_pylist())) == \
        independent_totals(folder / "views.csv")[0]
    assert row["throughput"]["run_words_per_second"] > 0 and row["throughput"]["replay_estimate"] > 0
    assert (folder / "replay-pages" / "compare" / "agreement.png").exists()


def test_a_word_count_replay_beside_a_topology_run_is_refused(walk, capsys):
    _folder, _pages, _ = walk
    assert main(["replay", "--dataset", "csv:views.csv,key=page,time=time", "-g", "pkg", "-W", "4", "-S", "2",
                 "--out", "replay-wc"]) == 0
    capsys.readouterr()
    assert main(["compare", "--run", "pages-pkg", "--replay", "replay-wc"]) == 2
    err = capsys.readouterr().err
    assert "holds a replay of the word count's groupings" in err and "keysplit replay FILE" in err


def test_options_the_file_states_are_refused(walk, capsys):
    _, pages, _ = walk
    assert main(["replay", pages, "--dataset", "csv:views.csv,key=page", "-g", "kg"]) == 2
    assert "a topology file states its grouping" in capsys.readouterr().err
    assert main(["replay", pages, "--dataset", "csv:views.csv,key=bytes"]) == 2
    assert "give key=page" in capsys.readouterr().err


def test_calibrate_on_two_topology_runs_and_replay_with_the_profile(walk, capsys):
    """kg with a user's own accumulator (imported from the project's src/ by the workers, the replay's executors and
    compare) beside the pkg run: calibrate fits both, and the replay uses the profile."""
    folder, _pages, own = walk
    dataset = "csv:views.csv,key=page"
    cli_json(capsys, ["run", own, "--dataset", dataset, "--worker-processes", "2", "--run-id", "pages-kg"])
    profile = cli_json(capsys, ["calibrate", "--run", "pages-pkg,pages-kg", "--name", "pages"])
    assert [r["shape"] for r in profile["runs"]] == ["toolkit", "toolkit"]
    assert len(profile["fit"]) == 2
    replay = cli_json(capsys, ["replay", own, "--dataset", dataset, "--calibration", "pages", "--out", "replay-kg"])
    assert replay["replay"]["overheads"]["profile"] == "pages"
    comparison = cli_json(capsys, ["compare", "--run", "pages-kg", "--replay", "replay-kg"])
    row = comparison["rows"][0]
    assert comparison["calibration"] == "pages"
    assert row["counts_equal"] and row["loads_equal"], row["counts_diff"]
    import pyarrow.parquet as pq

    table = pq.read_table(replay["topology"]["results"])
    assert dict(zip(table.column("key").to_pylist(), table.column("result").to_pylist())) == \
        independent_totals(folder / "views.csv")[1]


def test_calibrate_refuses_a_word_count_run_beside_a_topology_run(walk, capsys):
    # one shape at a time: the model's mechanics differ
    from keysplit.topology_model.profile import check_fittable

    with pytest.raises(Exception, match="one topology shape"):
        check_fittable([{"shape": "toolkit", "run_id": "a"}, {"run_id": "b", "grouping": "kg"}])
