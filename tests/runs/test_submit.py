"""`keysplit submit`: the cluster's run cannot disagree with its record.

The command `keysplit submit` prints is parsed by streamparse's own `sparse submit` parser, its configuration
resolved by streamparse's own `resolve_options` (what `sparse submit` sends Nimbus), the topology class built by
importing `topologies/wordcount.py` with the command's environment (what sparse does), and the whole topology run
by the local runner with two worker processes: `--collect` then finds nothing that differs from the record, and
the loads equal the simulator's.

Nimbus itself cannot run here, so a Thrift server speaking Nimbus's service (streamparse's own IDL, the
framed binary protocol Storm uses) answers `getClusterInfo` with a chosen version, to check the direct-route
refusal against what streamparse's client really reads.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import threading
import zipfile
from pathlib import Path

import pytest

from keysplit.cli import main
from keysplit.datasets import open_dataset
from keysplit.local import LocalCluster
from keysplit.local.submission import read_env, submit_conf
from keysplit.runs import redis_server
from keysplit.runs.collect import read_counts
from keysplit.simulator import simulate
from keysplit.storm.feed import feed_done
from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import split_password, with_password

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def redis(tmp_path_factory):
    home = tmp_path_factory.mktemp("keysplit-home")
    url = redis_server.start_server(home).url
    plain, password = split_password(url)
    secret = home / "redis.pass"
    secret.write_text(password + "\n")
    yield plain, str(secret)
    redis_server.stop_server(home)


def load(redis, tmp_path, capsys, *extra: str) -> str:
    url, secret = redis
    text = tmp_path / "lines.txt"
    text.write_text("".join(f"w{i % 7} w{i % 11} w{i % 3} the\n" for i in range(120)))
    assert main(["run", "wordcount", "--load-only", "--grouping", "pkg", "--dataset", f"text:{text}", "-S", "2",
                 "-W", "3", "-A", "2", "--cpu-delay", "0.2", "--worker-processes", "2", "--redis", url,
                 "--redis-password-file", secret, *extra]) == 0
    return capsys.readouterr().out.strip()


def submitted(redis, run_id: str, capsys, *extra: str) -> dict:
    url, secret = redis
    assert main(["submit", run_id, "-e", "local", "--redis", url, "--redis-password-file", secret, "--dry-run",
                 "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def sparse_parse(argv: list[str]) -> argparse.Namespace:
    """``argv`` as `sparse submit` reads it: streamparse's own sub-parser."""
    from streamparse.cli import submit

    parser = argparse.ArgumentParser()
    submit.subparser_hook(parser.add_subparsers())
    return parser.parse_args(argv[1:])


def topology_from(env: dict[str, str]):
    """What sparse does: import the topology file with the command's environment."""
    script = ROOT / "topologies" / "wordcount.py"
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        namespace: dict = {}
        exec(compile(script.read_text(), str(script), "exec"), namespace)
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    return namespace["WordCount"]


def test_what_submit_sends_runs_exactly_the_record(redis, tmp_path, capsys):
    run_id = load(redis, tmp_path, capsys)
    out = submitted(redis, run_id, capsys, "--storm-version", "2.8.8")
    assert out["argv"][:2] == ["sparse", "submit"] and out["storm_version"] == "2.8.8"
    assert redis[0].split("@")[-1] in out["command"] and split_password(redis[0])[1] is None
    args = sparse_parse(out["argv"])
    assert (args.environment, args.name, args.options["topology.workers"]) == ("local", "wordcount", 2)
    topology = topology_from(out["env"])
    conf = submit_conf(topology, args.name, args.options, env_config=read_env(ROOT / "config.json", "local"))
    assert conf["keysplit.cpu_delay_ms"] == 0.2 and conf["keysplit.redis_password_file"] == redis[1]
    assert conf["topology.workers"] == 2  # `sparse submit --workers 2`: two worker processes, tuples cross them
    url = with_password(redis[0], Path(redis[1]).read_text().strip())
    conn = redis_server.connect(url)
    with LocalCluster(topology, conf, cwd=str(ROOT)) as cluster:
        cluster.start()
        assert cluster.run_until(lambda: feed_done(conn, RunKeys(run_id)), 120)
    assert main(["run", "wordcount", "--collect", run_id, "--redis", redis[0], "--redis-password-file", redis[1],
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert "record_differed" not in summary and summary["configuration"] == "as the components received it"
    assert summary["cpu_delay_ms"] == 0.2 and summary["worker_processes"] == 2 and summary["sources"] == 2
    dataset = open_dataset(summary["dataset"])
    assert summary["loads"] == simulate(dataset, "pkg", 3, 2, engine="reference").loads
    assert sum(read_counts(conn, RunKeys(run_id)).values()) == summary["messages"] == 480


class FakeNimbus:
    """Nimbus's Thrift service on loopback, answering getClusterInfo with one NimbusSummary of ``version``."""

    def __init__(self, version: str) -> None:
        from streamparse.thrift import storm_thrift
        from thriftpy2.protocol import TBinaryProtocolFactory
        from thriftpy2.rpc import make_server
        from thriftpy2.transport import TFramedTransportFactory

        t = storm_thrift

        class Handler:
            def getClusterInfo(self):
                return t.ClusterSummary(supervisors=[], topologies=[], nimbuses=[
                    t.NimbusSummary(host="127.0.0.1", port=0, uptime_secs=1, isLeader=True, version=version)])

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = make_server(t.Nimbus, Handler(), "127.0.0.1", self.port,
                                  proto_factory=TBinaryProtocolFactory(), trans_factory=TFramedTransportFactory())
        threading.Thread(target=self.server.serve, daemon=True).start()

    def close(self) -> None:
        self.server.close()


@pytest.mark.parametrize(("version", "refused"), [("2.8.8", True), ("2.6.0", True), ("2.5.0", False),
                                                   ("2.4.0", False)])
def test_direct_route_is_refused_where_storm_cannot_run_it(redis, tmp_path, capsys, monkeypatch, version, refused):
    run_id = load(redis, tmp_path, capsys, "--route", "direct")
    nimbus = FakeNimbus(version)
    monkeypatch.setenv("STREAMPARSE_NIMBUS", f"127.0.0.1:{nimbus.port}")
    try:
        url, secret = redis
        code = main(["submit", run_id, "-e", "local", "--redis", url, "--redis-password-file", secret,
                     "--dry-run", "--json"])
    finally:
        nimbus.close()
    captured = capsys.readouterr()
    if refused:
        assert code == 2 and f"cannot run on Storm {version}" in captured.err and "--route fields" in captured.err
    else:
        assert code == 0 and json.loads(captured.out)["storm_version"] == version
        assert "-o" in json.loads(captured.out)["argv"] and "keysplit.route=direct" in captured.out


def test_an_unreachable_nimbus_is_one_line(redis, tmp_path, capsys, monkeypatch):
    run_id = load(redis, tmp_path, capsys)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("STREAMPARSE_NIMBUS", f"127.0.0.1:{port}")
    url, secret = redis
    assert main(["submit", run_id, "-e", "local", "--redis", url, "--redis-password-file", secret,
                 "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"cannot ask Nimbus at 127.0.0.1:{port}" in err and "Traceback" not in err and "--storm-version" in err


def test_collect_of_a_crash_looping_run_names_the_restarting_tasks(redis, tmp_path, capsys):
    """On a cluster the only trace of a crash loop in Redis is the components' own start records."""
    from keysplit.storm.components import ROUTER, record_start

    run_id = load(redis, tmp_path, capsys)
    url, secret = redis
    conn = redis_server.connect(with_password(url, Path(secret).read_text().strip()))
    for _ in range(14):
        record_start(conn, RunKeys(run_id), ROUTER, 1)
    record_start(conn, RunKeys(run_id), "counter", 0)
    assert main(["run", "wordcount", "--collect", run_id, "--redis", url, "--redis-password-file", secret]) == 2
    err = capsys.readouterr().err
    assert "has not finished: 0 of 120 lines acked" in err and "router:1 started 14 times" in err
    assert "counter:0" not in err, "a task that started once is not restarting"


PAGE_BYTES = '''from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology


class PageBytes(Topology):
    views = FeedSpout.spec(fields=["time", "page", "bytes"])
    route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg", time="time", par=2)
    partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=3)
    total = Aggregate.merge(inputs=partial, top=5, par=2)
'''


def test_a_topology_files_run_is_submitted_from_its_project_and_runs_its_record(redis, tmp_path, capsys, monkeypatch):
    from keysplit.runs.topology_file import load_topology
    from keysplit.runs.topology_run import read_results

    url, secret = redis
    project = tmp_path / "mysite"
    (project / "topologies").mkdir(parents=True)
    (project / "src").mkdir()
    script = project / "topologies" / "pagebytes.py"
    script.write_text(PAGE_BYTES)
    views = tmp_path / "views.csv"
    views.write_text("time,page,bytes\n" + "".join(f"{i / 100},/p{(i * i) % 13},{i % 97}\n" for i in range(300)))
    common = ["--redis", url, "--redis-password-file", secret]
    assert main(["run", str(script), "--load-only", "--dataset", f"csv:{views},key=page", "--worker-processes", "2",
                 *common]) == 0
    run_id = capsys.readouterr().out.strip()
    # no config.json: one line saying where sparse looks for Nimbus
    assert main(["submit", run_id, "-e", "local", *common, "--dry-run"]) == 2
    assert "mysite/config.json does not exist" in capsys.readouterr().err
    (project / "config.json").write_text((ROOT / "config.json").read_text())
    out = submitted(redis, run_id, capsys, "--storm-version", "2.8.8")
    assert out["cwd"] == str(project) and out["command"].startswith(f"cd {project} && ")
    args = sparse_parse(out["argv"])
    assert (args.environment, args.name, args.options["topology.workers"]) == ("local", "pagebytes", 2)
    assert args.options["keysplit.run_id"] == run_id and args.options["keysplit.redis_url"] == url
    loaded = load_topology(str(script))  # what sparse imports for -n pagebytes
    conf = submit_conf(loaded.cls, args.name, args.options, env_config=read_env(project / "config.json", "local"))
    assert conf["keysplit.redis_password_file"] == secret and conf["topology.workers"] == 2
    conn = redis_server.connect(with_password(url, Path(secret).read_text().strip()))
    with LocalCluster(loaded.cls, conf, cwd=str(project)) as cluster:
        cluster.start()
        assert cluster.run_until(lambda: feed_done(conn, RunKeys(run_id)), 120)
    expected: dict = {}
    for i in range(300):
        expected[f"/p{(i * i) % 13}"] = expected.get(f"/p{(i * i) % 13}", 0) + i % 97
    assert read_results(conn, run_id, "total") == expected
    # the jar it uploads carries keysplit beside the project's (empty) src/: the supervisors' Python has only
    # keysplit's dependencies (found on Storm 2.8.8: the jar held its manifest alone). No sparse on PATH here, so
    # the submission stops right after writing the jar.
    monkeypatch.setenv("PATH", str(tmp_path / "no-sparse"))
    assert main(["submit", run_id, "-e", "local", *common, "--storm-version", "2.8.8"]) == 2
    assert "sparse is not on PATH" in capsys.readouterr().err
    with zipfile.ZipFile(project / "_build" / "pagebytes.jar") as jar:
        names = set(jar.namelist())
    assert {"resources/keysplit/toolkit/router.py", "resources/keysplit/groupings/gedik.py"} <= names
