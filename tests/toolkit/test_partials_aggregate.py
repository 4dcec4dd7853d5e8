"""Partials that aggregate under exactly-once (docs/design/exactly-once.md "Partials that aggregate"): with
PKG on skewed rows the merge calls the user's ``merge`` once per key a partial task flushed, not once per row, so the
hot key PKG split over two partial tasks is not added again row by row where it is merged. The calls are counted by
the user's own accumulator, in every task process, from the project's src/."""

from __future__ import annotations

import csv
import json
import random
from collections import Counter
from pathlib import Path

from keysplit.datasets import open_dataset
from keysplit.runs import redis_server
from keysplit.runs.topology_file import load_topology
from keysplit.runs.topology_run import TopologyRunOptions, read_results, run_topology
from keysplit.storm.keys import RunKeys

ACCUMULATOR = '''
import os

from keysplit.toolkit import Accumulator


class LoggedSum(Accumulator):
    """Sum of a field that writes a line per add and per merge to a file of its process."""

    def __init__(self, field, log):
        super().__init__(field=field, log=log)
        self.field, self.log, self.fields, self.out = field, log, (field,), None

    def _called(self, what):
        if self.out is None:
            self.out = open(os.path.join(self.log, f"{os.getpid()}.calls"), "a", buffering=1)
        self.out.write(what + "\\n")

    def zero(self):
        return 0

    def add(self, state, record):
        self._called("add")
        return state + int(record[self.field])

    def merge(self, a, b):
        self._called("merge")
        return a + b
'''

TOPOLOGY = '''
from calls.accumulators import LoggedSum

from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Topology


class Skewed(Topology):
    views = FeedSpout.spec(fields=["page", "bytes"])
    route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg:d=2", par=2)
    partial = Aggregate.partial(inputs=route, accumulator=LoggedSum("bytes", {log!r}), period=0.5, par=4)
    total = Aggregate.merge(inputs=partial, par=2)
'''


def write_project(tmp_path: Path, rows: int = 3000, keys: int = 40) -> tuple[Path, Path, Path, Counter]:
    """A project whose accumulator logs its calls, and a CSV of pages under Zipf z = 2 (the hottest is about 60% of
    the rows), summed here with the csv module."""
    project, log = tmp_path / "project", tmp_path / "calls"
    (project / "src" / "calls").mkdir(parents=True)
    (project / "topologies").mkdir()
    log.mkdir()
    (project / "src" / "calls" / "__init__.py").write_text("")
    (project / "src" / "calls" / "accumulators.py").write_text(ACCUMULATOR)
    topology = project / "topologies" / "skewed.py"
    topology.write_text(TOPOLOGY.format(log=str(log)))
    rng = random.Random(5)
    pages = [f"/p/{i}" for i in range(keys)]
    weights = [1.0 / (i + 1) ** 2 for i in range(keys)]
    data = tmp_path / "views.csv"
    with open(data, "w", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["page", "bytes"])
        for _ in range(rows):
            out.writerow([rng.choices(pages, weights)[0], rng.randint(1, 99)])
    total: Counter = Counter()
    with open(data, newline="") as fh:
        for row in csv.DictReader(fh):
            total[row["page"]] += int(row["bytes"])
    return topology, data, log, total


def test_pkg_on_skewed_rows_costs_the_merge_one_merge_per_key_a_flush_not_one_per_row(home, redis_url, tmp_path):
    topology, data, log, total = write_project(tmp_path)
    conn = redis_server.connect(redis_url)
    summary = run_topology(load_topology(str(topology)),
                           TopologyRunOptions(dataset=open_dataset(f"csv:{data},key=page"), worker_processes=2,
                                              timeout=300), conn, redis_url)
    assert read_results(conn, summary["run_id"], "total") == dict(total)
    assert summary["replayed"] == 0, "a replayed row travels alone: this run must have none to show the fold"
    calls = Counter(line.strip() for f in log.glob("*.calls") for line in f.read_text().splitlines())
    keys = RunKeys(summary["run_id"])
    flushed = sum(json.loads(t)["entries"] for t in conn.hvals(keys.stage("partial", "tasks")))
    merged = [json.loads(t) for t in conn.hvals(keys.stage("total", "tasks"))]
    rows = sum(summary["partials"]["partial"]["records"])
    # every row is added once, where PKG sent it; each partial task flushes a key once a flush, as one state
    assert calls["add"] == rows == 3000
    # the merge calls the user's merge once per key a partial task flushed: once per entry, never per row
    assert calls["merge"] == flushed == sum(m["entries"] for m in merged) == sum(m["merges"] for m in merged)
    assert sum(m["records"] for m in merged) == rows
    assert calls["merge"] * 5 < rows, calls


def test_redis_killed_and_restarted_mid_run_leaves_the_pre_merged_totals_exact(home, redis_url, tmp_path):
    """Redis restarted from its append-only file holds a prefix of the commits, states and marks together: the
    partial tuples whose commit it lost replay (each row alone) and nothing is counted twice."""
    topology, data, _, total = write_project(tmp_path, rows=1500)
    conn = redis_server.connect(redis_url)
    summary = run_topology(load_topology(str(topology)),
                           TopologyRunOptions(dataset=open_dataset(f"csv:{data},key=page"), worker_processes=2,
                                              timeout=300, message_timeout=4, kills=("redis@0.5",)),
                           conn, redis_url)
    assert [k["target"] for k in summary["kills"]] == ["redis"]
    assert read_results(redis_server.connect(redis_url), summary["run_id"], "total") == dict(total)
