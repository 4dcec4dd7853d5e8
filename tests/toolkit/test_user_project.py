"""A user's own streamparse project, run with `keysplit run path/to/topology.py`: their spout (in their src/, as
`sparse` lays out a project) feeds a KeyRouter; keys of any JSON scalar type route, and a tuple without a usable key
is failed and logged, never a dead worker."""

from __future__ import annotations

import json
from collections import Counter

from keysplit.cli import main
from keysplit.runs import redis_server
from keysplit.runs.topology_run import read_results
from keysplit.storm.settings import split_password

SPOUT = '''
import os

from streamparse import Spout

conf_replay = False


class ClickSpout(Spout):
    """Emits its share of clicks ``(user, amount)`` once each; logs the ids it gets back as acked or failed."""

    outputs = ["user", "amount"]

    def initialize(self, conf, context):
        global conf_replay
        conf_replay = bool(conf.get("clicks.replay"))
        tasks = sorted(int(t) for t, c in context["task->component"].items() if c == self.component_name)
        self.todo = list(range(tasks.index(self.task_id), int(conf["clicks.n"]), len(tasks)))
        self.log = open(os.path.join(conf["clicks.out"], f"spout-{self.task_id}.log"), "a", buffering=1)

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop(0)
            self.emit([user(i), i % 5 + 1], tup_id=i)

    def ack(self, tup_id):
        self.log.write(f"ack {tup_id}\\n")

    def fail(self, tup_id):  # a tuple the router cannot route would fail again: replayed only if it has a user
        self.log.write(f"fail {tup_id}\\n")
        if conf_replay and user(tup_id) is not None:
            self.todo.append(tup_id)


def user(i):
    """Integer user ids, a text one, and no user at all now and then."""
    if i % 40 == 7:
        return None
    return "guest" if i % 9 == 0 else (i * i) % 17
'''

TOPOLOGY = '''
from clicks.spouts import ClickSpout

from keysplit.toolkit import Aggregate, KeyRouter, Sum, Topology


class Clicks(Topology):
    config = {{"clicks.n": 400, "clicks.out": {out!r}, "keysplit.delivery": "at-least-once"}}
    clicks = ClickSpout.spec(par=2)
    route = KeyRouter.spec(inputs=[clicks], key="user", grouping="dchoices", par=2)
    partial = Aggregate.partial(inputs=route, accumulator=Sum("amount"), par=3)
    total = Aggregate.merge(inputs=partial, top=3, par=2)
'''


def user(i):
    if i % 40 == 7:
        return None
    return "guest" if i % 9 == 0 else (i * i) % 17


def write_project(tmp_path):
    project, out = tmp_path / "clicks-project", tmp_path / "out"
    (project / "src" / "clicks").mkdir(parents=True)
    (project / "topologies").mkdir()
    out.mkdir()
    (project / "src" / "clicks" / "__init__.py").write_text("")
    (project / "src" / "clicks" / "spouts.py").write_text(SPOUT)
    (project / "topologies" / "clickstats.py").write_text(TOPOLOGY.format(out=str(out)))
    return project, out


def test_a_users_project_runs_until_idle_with_their_spout_and_bad_keys_fail_cleanly(tmp_path, capsys, monkeypatch):
    project, out = write_project(tmp_path)
    monkeypatch.setenv("KEYSPLIT_HOME", str(tmp_path / "home"))
    try:
        assert main(["run", str(project / "topologies" / "clickstats.py"), "--until-idle", "3", "--worker-processes",
                     "2", "--results-out", str(tmp_path / "results.csv"), "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        results = read_results(redis_server.connect(), summary["run_id"], "total")
    finally:
        redis_server.stop_server(tmp_path / "home")
    expected: Counter = Counter()
    for i in range(400):
        if user(i) is not None:
            expected[user(i)] += i % 5 + 1
    assert results == dict(expected)  # 17 integer users and "guest": keys keep their JSON type
    lines = [line.split() for path in out.glob("spout-*.log") for line in path.read_text().splitlines()]
    failed = sorted(int(i) for verb, i in lines if verb == "fail")
    assert failed == [i for i in range(400) if user(i) is None]
    assert sorted(int(i) for verb, i in lines if verb == "ack") == [i for i in range(400) if user(i) is not None]
    assert summary["routers"]["route"]["failed"] == len(failed)
    assert summary["task_deaths"] == 0 and summary["worker_restarts"] == 0
    # what the user's spout measured, as Storm's UI shows a spout's: its trees acked, replays, complete latency
    assert summary["delivery"] == "at-least-once"  # no FeedSpout: Storm's acking, not keysplit's exactly-once
    assert summary["acked"] == len(expected and [i for i in range(400) if user(i) is not None])
    assert summary["replayed"] == len(failed) and summary["latency_ms"]["count"] == summary["acked"]
    assert summary["rows_per_second"] > 0
    # every key's result, as a CSV the user's own tools read
    assert summary["results_out"] == str(tmp_path / "results.csv")
    rows = (tmp_path / "results.csv").read_text().splitlines()
    assert rows[0] == "key,result"
    assert sorted(tuple(row.split(",")) for row in rows[1:]) == sorted((str(k), str(v)) for k, v in expected.items())


def test_a_users_reliable_spout_gets_at_least_once_results_through_a_killed_partial_task(tmp_path, monkeypatch):
    """The delivery a user's own reliable spout gets, with a fault: a partial task killed with state it had not
    flushed; its inputs time out, the spout replays them, and every click is in the results at least once."""
    from keysplit.local import LocalCluster
    from keysplit.local.submission import build_resources, submit_conf
    from keysplit.runs.topology_file import load_topology

    project, out = write_project(tmp_path)
    monkeypatch.setenv("KEYSPLIT_HOME", str(tmp_path / "home"))
    try:
        server = redis_server.start_server(tmp_path / "home")
        loaded = load_topology(str(project / "topologies" / "clickstats.py"))
        url, password = split_password(server.url)
        secret = tmp_path / "redis.pass"
        secret.write_text(password)
        conf = submit_conf(loaded.cls, "clicks", {
            "keysplit.run_id": "clicks-fault", "keysplit.redis_url": url, "keysplit.redis_password_file": str(secret),
            "clicks.replay": True, "topology.message.timeout.secs": 3, "topology.workers": 2,
            "topology.max.spout.pending": 50})
        with LocalCluster(loaded.cls, conf, cwd=str(project), resources=str(build_resources(
                tmp_path / "resources", project / "src"))) as cluster:
            cluster.start()
            assert cluster.run_until(lambda: cluster.stats()["clicks"]["acked"] >= 100, 120)
            cluster.kill_task("partial", 0)
            done = {i for i in range(400) if user(i) is not None}
            assert cluster.run_until(lambda: acked(out) >= done, 300)
            cluster.quiesce(timeout=5.0)
        results = read_results(redis_server.connect(server.url), "clicks-fault", "total")
    finally:
        redis_server.stop_server(tmp_path / "home")
    assert cluster.summary()["task_deaths"] >= 1
    expected: Counter = Counter()
    for i in done:
        expected[user(i)] += i % 5 + 1
    assert set(results) == set(expected) and all(results[k] >= expected[k] for k in expected)


def acked(out) -> set[int]:
    return {int(line.split()[1]) for path in out.glob("spout-*.log") for line in path.read_text().splitlines()
            if line.startswith("ack ")}


def test_a_jar_built_from_a_users_project_carries_their_code_and_keysplits(tmp_path, capsys):
    """`keysplit jar --src src/`: the user's components and keysplit's worker files, so that the workers' Python
    needs only keysplit's base dependencies; checked in an interpreter that sees no keysplit install (-S)."""
    import os
    import subprocess
    import sys
    import sysconfig
    import zipfile

    (tmp_path / "src" / "clicks").mkdir(parents=True)
    (tmp_path / "src" / "clicks" / "__init__.py").write_text("")
    (tmp_path / "src" / "clicks" / "spouts.py").write_text(SPOUT)
    jar = tmp_path / "clicks.jar"
    assert main(["jar", "--src", str(tmp_path / "src"), "--out", str(jar)]) == 0
    with zipfile.ZipFile(jar) as z:
        z.extractall(tmp_path / "x")
    tree = tmp_path / "x" / "resources"
    code = ("import sys, keysplit; assert keysplit.__file__.startswith(sys.argv[1]); "
            "import clicks.spouts, keysplit.toolkit.router, keysplit.toolkit.aggregate, keysplit.toolkit.spout")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), sysconfig.get_paths()["purelib"]])}
    done = subprocess.run([sys.executable, "-S", "-c", code, str(tree)], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-2000:]


BROKEN_RESULT = '''
from keysplit.toolkit import Sum


class Broken(Sum):
    """Sums as Sum does, but cannot give its result (a user's bug in result())."""

    def result(self, state):
        raise ValueError("no result today")
'''

BROKEN_TOPOLOGY = '''
from broken import Broken

from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Topology


class Pages(Topology):
    views = FeedSpout.spec(fields=["page", "bytes"])
    route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", par=2)
    partial = Aggregate.partial(inputs=route, accumulator=Broken("bytes"), par=2)
    total = Aggregate.merge(inputs=partial, par=1)
'''


def test_a_result_the_users_code_cannot_give_is_one_line_after_the_summary(tmp_path, capsys, monkeypatch):
    project = tmp_path / "broken-project"
    (project / "src").mkdir(parents=True)
    (project / "topologies").mkdir()
    (project / "src" / "broken.py").write_text(BROKEN_RESULT)
    (project / "topologies" / "pages.py").write_text(BROKEN_TOPOLOGY)
    views = tmp_path / "views.csv"
    views.write_text("page,bytes\n" + "".join(f"/p{i % 7},{i}\n" for i in range(200)))
    monkeypatch.setenv("KEYSPLIT_HOME", str(tmp_path / "home"))
    try:
        code = main(["run", str(project / "topologies" / "pages.py"), "--dataset", f"csv:{views},key=page",
                     "--results-out", str(tmp_path / "results.csv")])
    finally:
        redis_server.stop_server(tmp_path / "home")
    out, err = capsys.readouterr()
    assert code == 2 and "throughput:" in out  # the run finished: its summary first
    assert err.count("\n") == 1 and "Broken(field='bytes')'s result raised ValueError: no result today" in err
    assert "results are safe in Redis" in err and not (tmp_path / "results.csv").exists()
