"""The word-count / top-k topology run for real: subprocesses over Storm's multi-lang protocol, a real Redis.

Claims (docs/guides/local.md): final totals equal an exact count of the dataset for every grouping, with several
sources, workers and aggregators; a counter killed with SIGKILL mid-run loses no word and the report says
how many lines were replayed; user mistakes fail with one line before anything starts; the streamparse
project builds the same topology for `sparse submit`.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from keysplit.cli import main
from keysplit.datasets import open_dataset
from keysplit.runs import redis_server
from keysplit.runs.collect import read_counts
from keysplit.runs.prepare import RunOptions, prepare_run
from keysplit.runs.wordcount import run_wordcount
from keysplit.simulator import simulate
from keysplit.storm.keys import RUNS, RunKeys
from keysplit.storm.settings import split_password
from keysplit.storm.window import DEFAULT_MAX_PENDING

ROOT = Path(__file__).resolve().parents[2]
VOCABULARY = [f"w{i}" for i in range(1, 151)]


def write_text(path: Path, lines: int, seed: int) -> Counter:
    """A skewed text file (Zipf-like word frequencies, 1-9 words a line) and its exact word counts."""
    rng = random.Random(seed)
    weights = [1.0 / r for r in range(1, len(VOCABULARY) + 1)]
    exact: Counter = Counter()
    with open(path, "w", encoding="utf-8") as fh:
        for _ in range(lines):
            words = rng.choices(VOCABULARY, weights, k=rng.randint(1, 9))
            exact.update(words)
            fh.write(" ".join(words).upper() + ", said the line.\n" if rng.random() < 0.1 else " ".join(words) + "\n")
            if rng.random() < 0.1:
                exact.update(["said", "the", "line"])
    return exact


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    path = tmp_path_factory.mktemp("keysplit-home")
    os.environ["KEYSPLIT_HOME"] = str(path)
    yield path
    redis_server.stop_server(path)
    os.environ.pop("KEYSPLIT_HOME", None)


@pytest.fixture(scope="module")
def redis_url(home):
    return redis_server.start_server(home).url


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "lines.txt"
    return path, write_text(path, 150, seed=7)


def exact_counts(path: Path) -> Counter:
    """Counted independently of keysplit's reader: lower-case, split on anything not a letter or digit."""
    counts: Counter = Counter()
    for line in path.read_text(encoding="utf-8").splitlines():
        counts.update("".join(c if c.isalnum() else " " for c in line.lower()).split())
    return counts


GROUPINGS = [
    ("kg", 3, 4, 2),
    ("sg", 2, 3, 2),
    ("dchoices", 3, 5, 3),
    ("wchoices", 2, 4, 2),
    ("dkg", 3, 4, 2),
    ("fish", 2, 4, 2),
    ("gedik", 3, 4, 2),
    ("offgreedy", 2, 3, 2),
    ("pkg", 3, 4, 2),
    ("potc", 2, 4, 2),
    ("ongreedy", 2, 3, 2),
    ("salt", 2, 4, 2),
]


@pytest.mark.parametrize(("grouping", "sources", "workers", "aggregators"), GROUPINGS)
def test_final_totals_equal_the_exact_counts(home, redis_url, text, grouping, sources, workers, aggregators):
    path, _ = text
    prepared = prepare_run(RunOptions(grouping, f"text:{path}", sources=sources, workers=workers,
                                  aggregators=aggregators, worker_processes=2))  # tuples cross worker processes
    conn = redis_server.connect(redis_url)
    summary = run_wordcount(prepared, conn, redis_url)
    exact = exact_counts(path)
    assert read_counts(conn, RunKeys(summary["run_id"])) == dict(exact)
    assert summary["messages"] == sum(exact.values()) == sum(summary["loads"])
    assert len(summary["loads"]) == workers and summary["replayed"] == 0
    assert summary["top_k"] == [[w, c] for w, c in sorted(exact.items(), key=lambda i: (-i[1], i[0]))[:10]]
    # one spout deals each line to the router the simulator deals its record to: the same decisions, word for word
    reference = simulate(open_dataset(f"text:{path}"), grouping, workers, sources, engine="reference")
    assert summary["loads"] == reference.loads


def test_pkg_through_the_cli_stores_everything_in_redis_and_writes_counts(home, redis_url, text, tmp_path, capsys):
    path, _ = text
    out = tmp_path / "counts.tsv"
    code = main(["run", "wordcount", "--grouping", "pkg", "--dataset", f"text:{path}", "-S", "3", "-W", "4",
                 "-A", "3", "--top", "5", "--redis", redis_url, "--json", "--counts-out", str(out)])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    exact = exact_counts(path)
    for field in ("run_id", "grouping", "dataset", "dataset_sha256", "messages", "lines", "workers", "sources",
                  "aggregators", "cpu_delay_ms", "flush_secs", "words_per_second", "lines_per_second",
                  "latency_ms", "loads", "dist_cost", "distinct_per_worker", "final_imbalance_fraction",
                  "load_stddev", "replayed", "top_k", "duration_s"):
        assert field in summary, field
    assert set(summary["latency_ms"]) >= {"mean", "p50", "p95", "p99"}
    assert summary["words_per_second"] > 0 and summary["latency_ms"]["p99"] >= summary["latency_ms"]["p50"] > 0
    assert summary["totals"] == ("exact" if summary["replayed"] == 0 else "at-least")
    # the aggregators timed their ticks: a commit per partial count, microseconds, for the replay's model
    assert 0 < summary["aggregator_us"] < 1e5
    assert 0 < summary["first_hop_ms"] < 1e4  # the first word reached a counter after the first emit
    # PKG splits keys over two workers: memory between KG's 1.0 and 2.0
    assert 1.0 < summary["dist_cost"] <= 2.0
    assert dict((w, int(c)) for w, c in (line.split("\t") for line in out.read_text().splitlines())) == dict(exact)
    conn = redis_server.connect(redis_url)
    keys = RunKeys(summary["run_id"])
    assert json.loads(conn.get(keys.summary)) == summary
    assert conn.zscore(RUNS, summary["run_id"]) is not None
    assert summary["top_k"] == [[w, c] for w, c in sorted(exact.items(), key=lambda i: (-i[1], i[0]))[:5]]


def test_at_least_once_a_killed_counter_loses_no_word_and_replays_are_reported(home, redis_url, tmp_path, caplog):
    """The old path, behind --delivery at-least-once: every word at least once (exactly once: test_exactly_once)."""
    path = tmp_path / "long.txt"
    write_text(path, 400, seed=11)
    prepared = prepare_run(RunOptions("pkg", f"text:{path}", sources=2, workers=3, aggregators=2, cpu_delay_ms=1.0,
                                  max_pending=60, message_timeout=3, kills=("counter@0.3",), timeout=180,
                                  delivery="at-least-once", batch=1))
    conn = redis_server.connect(redis_url)
    with caplog.at_level("WARNING", logger="keysplit.local"):
        summary = run_wordcount(prepared, conn, redis_url)
    assert [k["target"] for k in summary["kills"]] == ["counter:0"] and summary["restarts"] >= 1
    assert summary["replayed"] > 0 and summary["totals"] == "at-least" and summary["delivery"] == "at-least-once"
    assert "dedup_peak_bytes" not in summary and summary["duplicates_dropped"] == 0
    # the counter held the tuples of lines in flight (until its tick): the warning counts them, not 0. One word a
    # tuple (batch=1) keeps a tuple arriving every millisecond: at least once, lines are acked only at counter ticks,
    # so the kill can fire right after counter 0's own tick, and with batches of 20 ms it may then hold none at all.
    death = re.search(r"task counter\[0\].* died with code -9; (\d+) tuples queued or in flight lost, from (\d+) "
                      r"tuple trees", caplog.text)
    assert death and int(death.group(1)) > 0 and int(death.group(2)) > 0, caplog.text
    counts = read_counts(conn, RunKeys(summary["run_id"]))
    exact = exact_counts(path)
    assert set(counts) == set(exact)
    assert all(counts[w] >= exact[w] for w in exact) and sum(counts.values()) == summary["counted"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--grouping", "nosuch", "--dataset", "zipf:messages=10"], "unknown grouping 'nosuch'"),
        (["--grouping", "pkg", "--dataset", "text:/no/such/file.txt"], "dataset file not found"),
        (["--grouping", "pkg", "--dataset", "zipf:messages=10", "-W", "6", "--counter-tasks", "4"],
         "W=6 workers is more than the 4 counter tasks"),
        (["--grouping", "pkg:d=5", "--dataset", "zipf:messages=10", "-W", "4"], "exceeds the number of workers"),
        (["--grouping", "pkg:load=global", "--dataset", "zipf:messages=10"], "load=global is the simulator's oracle"),
        (["--grouping", "pkg", "--dataset", "zipf:messages=10", "--env", "nosuch"],
         "config.json has no env 'nosuch'"),
        (["--grouping", "pkg", "--dataset", "zipf:messages=10", "--redis", "redis://127.0.0.1:1/0"],
         "cannot reach Redis at redis://127.0.0.1:1/0"),
    ],
)
def test_mistakes_fail_with_one_line_before_anything_starts(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the project's config.json names the envs --env may choose
    # an unreachable Redis everywhere except the Redis case: the other checks come first
    redis_arg = [] if "--redis" in args else ["--redis", "redis://127.0.0.1:1/0"]
    assert main(["run", "wordcount", *args, *redis_arg]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("keysplit: error: ") and message in err and "\n" not in err


def test_the_streamparse_project_builds_the_parameterised_topology():
    """What `sparse submit` does before talking to Nimbus: import the topology file, resolve options
    (config.json env < topology config < -o), serialise to Thrift."""
    script = """
import io, json
from streamparse.util import get_topology_from_file, get_config, get_env_config
from streamparse.cli.common import resolve_options
from streamparse.thrift import StormTopology
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.transport import TMemoryBuffer
cls = get_topology_from_file("topologies/wordcount.py")
get_config()
_, env = get_env_config("prod")
opts = resolve_options({"keysplit.grouping": "dkg"}, env, cls, "wordcount", local_only=True)
buf = io.BytesIO(); cls.write(buf)
topo = StormTopology(); topo.read(TBinaryProtocol(TMemoryBuffer(buf.getvalue())))
print(json.dumps({"grouping": opts["keysplit.grouping"], "workers": opts["keysplit.workers"],
    "pending": opts["topology.max.spout.pending"], "venv": opts["topology.python.path"],
    "par": {n: b.common.parallelism_hint for n, b in topo.bolts.items()},
    "direct": {n: st.direct for n, st in topo.bolts["router"].common.streams.items()},
    "counter_inputs": sorted((g.componentId, g.streamId, str(gr.fields))
                             for g, gr in topo.bolts["counter"].common.inputs.items()),
    "aggregator_inputs": sorted((g.componentId, g.streamId, str(gr.fields))
                                for g, gr in topo.bolts["aggregator"].common.inputs.items()),
    "route": opts["keysplit.route"],
    "script": topo.bolts["counter"].bolt_object.shell.script}))
"""
    env = {**os.environ, "KEYSPLIT_SOURCES": "4", "KEYSPLIT_WORKERS": "6", "KEYSPLIT_AGGREGATORS": "3"}
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                            check=True)
    facts = json.loads(result.stdout.strip().splitlines()[-1])
    assert facts["grouping"] == "dkg" and facts["workers"] == 6 and facts["pending"] == DEFAULT_MAX_PENDING
    assert facts["par"] == {"router": 4, "counter": 6, "aggregator": 3, "topk": 1}
    assert facts["direct"] == {"words": False, "words_direct": True, "batches": False, "batches_direct": True}
    assert facts["route"] == "fields"
    route = "['keysplit_route']"
    assert facts["counter_inputs"] == [["router", "batches", route], ["router", "batches_direct", "None"],
                                       ["router", "words", route], ["router", "words_direct", "None"]]
    assert facts["aggregator_inputs"] == [["counter", "default", "['word']"], ["counter", "flushes", route]]
    assert facts["script"] == "keysplit.storm.bolts.CounterBolt"
    assert facts["venv"] == "/data/virtualenvs/wordcount/bin/python"


def test_load_submit_collect_the_cluster_workflow(home, redis_url, text, capsys, tmp_path):
    """`keysplit run --load-only`, then the topology file `sparse submit` deploys (here run by the local
    runner with the conf `-o` would give), then `keysplit run --collect`: exact totals again."""
    from keysplit.local import LocalCluster
    from keysplit.storm.feed import feed_done

    path, _ = text
    url, password = split_password(redis_url)
    secret = tmp_path / "redis.pass"
    secret.write_text(password + "\n")
    # no password on a command line: the file holds it
    assert main(["run", "wordcount", "--load-only", "--grouping", "pkg", "--dataset", f"text:{path}",
                 "-S", "2", "-W", "3", "-A", "2", "--redis", url, "--redis-password-file", str(secret)]) == 0
    run_id = capsys.readouterr().out.strip()
    assert re.fullmatch(r"[A-Za-z0-9._-]+", run_id), "--load-only prints the run id alone"
    script = ROOT / "topologies" / "wordcount.py"
    env = {"KEYSPLIT_SOURCES": "2", "KEYSPLIT_WORKERS": "3", "KEYSPLIT_AGGREGATORS": "2"}
    namespace: dict = {}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        exec(compile(script.read_text(), str(script), "exec"), namespace)
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    topology = namespace["WordCount"]
    # the password travels in a file on the workers, never in the conf (-o); the topology runs with a CPU delay
    # and two worker processes that --load-only never heard of, as `sparse submit -o ... --workers 2` gives them
    conf = {**topology.config, "keysplit.run_id": run_id, "keysplit.redis_url": url,
            "keysplit.redis_password_file": str(secret), "keysplit.cpu_delay_ms": 0.4, "topology.workers": 2}
    conn = redis_server.connect(redis_url)
    with LocalCluster(topology, conf, cwd=str(ROOT)) as cluster:
        cluster.start()
        assert cluster.run_until(lambda: feed_done(conn, RunKeys(run_id)), 120)
    assert main(["run", "wordcount", "--collect", run_id, "--redis", url, "--redis-password-file", str(secret),
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["run_id"] == run_id and summary["workers"] == 3
    # the record says what ran, not what --load-only was told
    assert summary["cpu_delay_ms"] == 0.4 and summary["worker_processes"] == 2
    assert summary["record_differed"] == {"cpu_delay_ms": [1.0, 0.4], "worker_processes": [1, 2]}
    assert summary["configuration"] == "as the components received it"
    assert summary["worker_restarts"] is None and summary["task_deaths"] is None, "not in Redis: unknown"
    assert summary["restarts"] == 0, "every component recorded exactly one start"
    assert read_counts(conn, RunKeys(run_id)) == dict(exact_counts(path))
    assert summary["top_k"][0][1] == max(exact_counts(path).values())


def test_gedik_routers_follow_one_leader_and_the_summary_reports_its_rebuilds(home, redis_url, tmp_path, capsys):
    """Gedik across 3 router processes: router 0 rebuilds every second and publishes the function, the others
    install it; the run's summary carries the leader's grouping stats (rebuilds, migration) and exact totals.
    max-pending 100 of 600 lines: the later lines are routed after the first waves are acked (each about half a
    flush period), > 1 s after the start."""
    from keysplit.commands.run import print_summary

    path = tmp_path / "gedik.txt"
    write_text(path, 600, seed=5)
    assert main(["run", "wordcount", "--grouping", "gedik:period=1", "--dataset", f"text:{path}", "-S", "3",
                 "-W", "4", "-A", "2", "--max-pending", "100", "--redis", redis_url, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    stats = summary["grouping_stats"]
    assert stats["rebuilds"] >= 1 and stats["explicit"] > 0 and stats["migrated_keys"] >= 0
    conn = redis_server.connect(redis_url)
    keys = RunKeys(summary["run_id"])
    assert int(conn.get(keys.grouping_version)) == stats["rebuilds"]  # one published version per rebuild
    assert read_counts(conn, keys) == dict(exact_counts(path))
    assert summary["replayed"] == 0
    print_summary(summary)
    assert f"grouping stats: rebuilds {stats['rebuilds']}, " in capsys.readouterr().out


# S=1: one router sees every word in dataset order, as the simulator's single source does; the time-driven
# parts of dkg, fish and gedik are pushed past the run (warmup, interval, period of 1000 s) so wall clock and
# event time cannot differ in what they trigger.
ROUTE_GROUPINGS = ["kg", "pkg", "dkg:warmup=1000,check_interval=1000", "fish:interval=1000",
                   "gedik:period=1000"]


@pytest.mark.parametrize("grouping", ROUTE_GROUPINGS)
def test_fields_route_gives_exact_totals_and_the_simulators_per_counter_loads(home, redis_url, text, grouping,
                                                                               capsys):
    """`keysplit run --route fields`: Storm's fields grouping (Java hash, as the local runner computes it)
    delivers every word to the counter task the grouping chose, so each counter's load is the simulator's."""
    path, _ = text
    assert main(["simulate", "--dataset", f"text:{path}", "-S", "1", "-W", "4", "-g", grouping, "--json",
                 "--engine", "reference"]) == 0
    expected = json.loads(capsys.readouterr().out)["runs"][0]["loads"]
    assert main(["run", "wordcount", "--grouping", grouping, "--dataset", f"text:{path}", "-S", "1", "-W", "4",
                 "--counter-tasks", "5", "-A", "2", "--route", "fields", "--redis", redis_url, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["route"] == "fields"
    assert summary["loads"] == [*expected, 0], "counter task 5 exists but the grouping never chose it"
    conn = redis_server.connect(redis_url)
    assert read_counts(conn, RunKeys(summary["run_id"])) == dict(exact_counts(path))


def test_every_tick_is_acked_and_no_input_is_left_pending(home, redis_url, tmp_path, capsys):
    """Counters and aggregators get a tick a second (--flush 0.2 rounds up to Storm's whole seconds) for a run
    of several seconds; Storm's ShellBolt would keep any unacked one forever. None is left at the end."""
    path = tmp_path / "ticks.txt"
    write_text(path, 400, seed=3)  # about 2,000 words at 4 ms over 2 counters: 4 s or more
    assert main(["run", "wordcount", "--grouping", "pkg", "--dataset", f"text:{path}", "-S", "2", "-W", "2",
                 "-A", "2", "--flush", "0.2", "--cpu-delay", "4", "--max-pending", "20", "--redis", redis_url,
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["duration_s"] > 3, "long enough for several ticks per bolt task"
    assert summary["unacked_inputs"] == 0
    assert summary["worker_restarts"] == 0 and summary["task_deaths"] == 0


def test_direct_route_matches_the_simulator_and_components_receive_no_redis_password(home, redis_url, text,
                                                                                     capsys):
    """--route direct still works here (Storm < 2.6 only). The handshake conf of every task (what Storm prints in
    worker.log and shows in its UI) and every log of the run are free of the Redis password; the components
    got it from their environment."""
    path, _ = text
    password = split_password(redis_url)[1]
    assert password
    assert main(["simulate", "--dataset", f"text:{path}", "-S", "1", "-W", "3", "-g", "pkg", "--json"]) == 0
    expected = json.loads(capsys.readouterr().out)["runs"][0]["loads"]
    assert main(["run", "wordcount", "--grouping", "pkg", "--dataset", f"text:{path}", "-S", "1", "-W", "3",
                 "-A", "1", "--route", "direct", "--redis", redis_url, "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["route"] == "direct" and summary["loads"] == expected
    logs = home / "logs" / summary["run_id"]
    handshakes = sorted(logs.glob("*.handshake.json"))
    assert len(handshakes) == 1 + 1 + 3 + 1 + 1  # feed, router, counters, aggregator, topk
    for handshake in handshakes:
        conf = json.loads(handshake.read_text())["conf"]
        assert conf["keysplit.redis_url"] == split_password(redis_url)[0]  # the URL without its password
        assert conf["keysplit.redis_password_env"] == "KEYSPLIT_REDIS_PASSWORD"
        assert conf["keysplit.route"] == "direct"
        assert conf["pystorm.log.level"] == "info"  # config.json's local env, as sparse submit sends it
    for log in logs.iterdir():
        assert password not in log.read_text(errors="replace"), log.name


def test_a_counter_busy_with_batches_stays_alive_past_the_subprocess_timeout(home, redis_url, tmp_path):
    """A counter working through a backlog of batches answers a heartbeat only when it reaches it in its pipe; it
    sends `sync` while it sleeps, which Storm's ShellBolt counts as a heartbeat, so it is not killed for being busy.
    Here 3,000 words at 2 ms reach one counter at once (6 s of work) against a 3 s subprocess timeout."""
    from keysplit.local import LocalCluster
    from keysplit.runs.wordcount import start_run
    from keysplit.storm.feed import feed_done
    from keysplit.storm.settings import RunSettings
    from keysplit.storm.topology import wordcount_topology

    path = tmp_path / "busy.txt"
    path.write_text("".join(" ".join(f"w{(7 * i + j) % 40}" for j in range(10)) + "\n" for i in range(300)))
    secret = tmp_path / "redis.pass"
    secret.write_text(split_password(redis_url)[1] + "\n")
    prepared = prepare_run(RunOptions("kg", f"text:{path}", sources=1, workers=1, aggregators=1, cpu_delay_ms=2.0,
                                  max_pending=300, batch=100))
    conn = redis_server.connect(redis_url)
    settings, keys, _ = start_run(conn, prepared, redis_url)
    settings = RunSettings.from_conf({"keysplit.redis_password_file": str(secret),
                                      "keysplit.redis_password_env": ""}, base=settings)
    conf = {"topology.subprocess.timeout.secs": 3, "topology.max.spout.pending": 300}
    with LocalCluster(wordcount_topology(settings), conf, cwd=str(ROOT)) as cluster:
        cluster.start()
        assert cluster.run_until(lambda: feed_done(conn, keys), 120)
        assert cluster.summary()["worker_restarts"] == 0 and cluster.summary()["task_deaths"] == 0
    assert read_counts(conn, keys) == dict(exact_counts(path))
