"""A user's own reliable spout whose worker is killed under ``--until-idle``: the run must not end as "idle" while
the spout is down or starting again, and a run whose crash forgot tuple trees says so and does not exit 0.

The fault is the runner's own (``--kill clicks@N``: SIGKILL of the spout's task once its spouts had N trees
acked; its worker goes down with it). The spout's first process emits its clicks over and over, so it is never
idle and always has trees in flight when the kill fires, however busy the machine; its second process (after the
crash) sleeps in ``initialize`` for longer than ``--until-idle`` and then emits every click once. A run that ended
while it slept (what keysplit did) would have no ack in the second process's log."""

from __future__ import annotations

import json
from collections import Counter

from keysplit.cli import main
from keysplit.runs import redis_server
from keysplit.runs.topology_run import read_results

N = 300

SPOUT = '''
import os
import time

from streamparse import Spout


class ClickSpout(Spout):
    outputs = ["user", "amount"]

    def initialize(self, conf, context):
        out = conf["clicks.out"]
        self.again = os.path.exists(os.path.join(out, "started"))  # a process after the crash
        open(os.path.join(out, "started"), "a").close()
        if self.again:
            time.sleep(float(conf["clicks.relaunch_secs"]))  # a slow start: longer than --until-idle
        self.n = int(conf["clicks.n"])
        self.todo = list(range(self.n))
        self.log = open(os.path.join(out, "second.log" if self.again else "first.log"), "a", buffering=1)

    def next_tuple(self):
        if not self.todo and not self.again:
            self.todo = list(range(self.n))  # the first process never runs out: it is killed while busy
        if self.todo:
            i = self.todo.pop(0)
            self.emit([i % 17, i % 5 + 1], tup_id=i)

    def ack(self, tup_id):
        self.log.write(f"ack {tup_id}\\n")
'''

TOPOLOGY = '''
from clicks.spouts import ClickSpout

from keysplit.toolkit import Aggregate, KeyRouter, Sum, Topology


class Clicks(Topology):
    config = {{"clicks.n": {n}, "clicks.out": {out!r}, "clicks.relaunch_secs": {relaunch}}}
    clicks = ClickSpout.spec(par=1)
    route = KeyRouter.spec(inputs=[clicks], key="user", grouping="pkg", par=2)
    partial = Aggregate.partial(inputs=route, accumulator=Sum("amount"), par=2)
    total = Aggregate.merge(inputs=partial, par=1)
'''


def test_a_spout_killed_under_until_idle_is_waited_for_and_its_forgotten_trees_fail_the_run(tmp_path, capsys,
                                                                                          monkeypatch):
    project, out = tmp_path / "clicks-project", tmp_path / "out"
    (project / "src" / "clicks").mkdir(parents=True)
    (project / "topologies").mkdir()
    out.mkdir()
    (project / "src" / "clicks" / "__init__.py").write_text("")
    (project / "src" / "clicks" / "spouts.py").write_text(SPOUT)
    (project / "topologies" / "clicking.py").write_text(TOPOLOGY.format(n=N, out=str(out), relaunch=3.0))
    monkeypatch.setenv("KEYSPLIT_HOME", str(tmp_path / "home"))
    try:
        status = main(["run", str(project / "topologies" / "clicking.py"), "--until-idle", "1", "--worker-processes",
                       "2", "--delivery", "at-least-once", "--kill", "clicks@100", "--json"])
        captured = capsys.readouterr()
        summary = json.loads(captured.out)
        results = read_results(redis_server.connect(), summary["run_id"], "total")
    finally:
        redis_server.stop_server(tmp_path / "home")
    # the run waited for the relaunched spout: every click of its second process was emitted and acked
    second = {int(line.split()[1]) for line in (out / "second.log").read_text().splitlines()}
    assert second == set(range(N))
    assert summary["kills"] and summary["kills"][0]["target"] == "clicks:0"
    # the first process died with trees in flight: the run says so, and does not exit 0
    forgotten = summary["forgotten_trees"]["clicks"]
    assert forgotten >= 1
    assert status == 1
    assert f"stopped with {forgotten} tuple tree" in captured.err and "forgotten by a crash" in captured.err
    expected: Counter = Counter()
    for i in range(N):
        expected[i % 17] += i % 5 + 1
    assert set(results) == set(expected) and all(results[k] >= expected[k] for k in expected)  # at least once


def test_a_kill_by_share_is_refused_for_a_topology_without_a_feed(tmp_path, capsys):
    project = tmp_path / "p"
    (project / "src" / "clicks").mkdir(parents=True)
    (project / "topologies").mkdir()
    (project / "src" / "clicks" / "__init__.py").write_text("")
    (project / "src" / "clicks" / "spouts.py").write_text(SPOUT)
    (project / "topologies" / "clicking.py").write_text(TOPOLOGY.format(n=N, out=str(tmp_path), relaunch=0))
    assert main(["run", str(project / "topologies" / "clicking.py"), "--until-idle", "1", "--kill",
                 "clicks@0.5"]) == 2
    err = capsys.readouterr().err
    assert "reads no feed" in err and "give @N" in err and err.count("\n") == 1
