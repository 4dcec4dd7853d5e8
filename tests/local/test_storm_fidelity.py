"""The local runner behaves like Storm where a component could tell: Java's hash for fields groupings (so
the router's ``fields`` route mode lands where Storm lands it), the jar's ``resources/`` as working directory
and import path, the ``pystorm.log.*`` settings of config.json, and the jar ``sparse submit -j`` uploads."""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from streamparse import Topology

from keysplit.cli import main
from keysplit.javahash import choose_task_index, java_hash, list_hash, string_hash
from keysplit.local import LocalCluster, TopologyError
from keysplit.local.grouper import FieldsGrouper
from keysplit.local.submission import build_resources, read_env, submit_conf, write_jar
from keysplit.storm.router import Router
from keysplit.storm.settings import RunSettings, split_password, with_password
from keysplit.storm.streams import route_value

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))

from local_components.comps import NumberSpout, RecordBolt  # noqa: E402


@pytest.mark.parametrize(("text", "expected"), [
    ("hello", 99162322),  # "hello".hashCode() in Java
    ("", 0),
    ("Aa", 2112), ("BB", 2112),  # the classic collision
    ("polygenelubricants", -2147483648),  # overflows to Integer.MIN_VALUE
    ("\U0001F600", 0xD83D * 31 + 0xDE00),  # U+1F600 is the surrogate pair D83D DE00 in UTF-16
    ("a\U0001F600", (97 * 31 + 0xD83D) * 31 + 0xDE00),
    ("é", 0xE9),
])
def test_string_hash_is_javas_over_utf16_code_units(text, expected):
    assert string_hash(text) == expected


def test_number_boolean_list_hashes_are_javas():
    assert java_hash(7) == 7 and java_hash(-1) == -1  # Integer
    assert java_hash(-1, long_ints=True) == 0 and java_hash(1 << 32) == 1  # Long: (int)(v ^ v >>> 32)
    assert all(java_hash(v) == java_hash(v, long_ints=True) == v for v in (0, 1, 30, 2**31 - 1))
    assert java_hash(True) == 1231 and java_hash(False) == 1237 and java_hash(None) == 0
    assert java_hash(1.0) == 1072693248 and java_hash(0.0) == 0  # Double.hashCode
    assert list_hash([]) == 1 and list_hash([1]) == 32 and list_hash(["hello"]) == 31 + 99162322
    assert list_hash(["a", 1]) == (31 * (31 + 97) + 1)
    assert choose_task_index(["polygenelubricants"], 5) == (31 - 2**31) % 5  # floorMod of a negative hash


def test_fields_grouper_is_storms_choice_over_sorted_tasks():
    grouper = FieldsGrouper([12, 10, 11], [1])
    for word in ("hello", "", "\U0001F600", "w17"):
        assert grouper.choose([0, word]) == [[10, 11, 12][(31 + string_hash(word)) % 3]]


@pytest.mark.parametrize("tasks", [1, 2, 3, 5, 10, 31, 32, 64])
def test_route_value_reaches_the_chosen_task_on_integer_and_long_parsers(tasks):
    targets = list(range(7, 7 + tasks))
    grouper = FieldsGrouper(targets, [1])
    for index in range(tasks):
        route = route_value(index, tasks)
        assert 0 <= route < tasks
        assert grouper.choose(["word", route]) == [targets[index]]
        for long_ints in (False, True):  # json-smart (Storm >= 2.6) / json-simple (Storm < 2.6)
            assert choose_task_index([route], tasks, long_ints) == index


def test_router_in_fields_mode_pairs_words_with_route_values_that_reach_its_choice():
    direct = Router("kg", 3, 0, 1, [4, 7, 9, 12])
    fields = Router("kg", 3, 0, 1, [4, 7, 9, 12], mode="fields")
    grouper = FieldsGrouper([4, 7, 9, 12], [1])
    from keysplit.datasets import encode_record

    record = encode_record((None, list("abcdefgh")))
    for (word, task), (word2, route) in zip(direct.route(record, 0.0), fields.route(record, 0.0)):
        assert word == word2 and grouper.choose([word, route]) == [task]


def test_settings_refuse_a_password_in_the_conf_and_read_it_from_a_file_or_env(tmp_path):
    with pytest.raises(Exception, match="must not carry a password"):
        RunSettings(redis_url="redis://:s3cret@host:6379/0")
    url, password = split_password("redis://:p%40ss@host:6379/0")
    assert url == "redis://host:6379/0" and password == "p@ss"
    secret = tmp_path / "redis.pass"
    secret.write_text("p@ss\n")
    by_file = RunSettings(redis_url=url, redis_password_file=str(secret))
    assert by_file.redis_connect_url() == with_password(url, "p@ss") == "redis://:p%40ss@host:6379/0"
    by_env = RunSettings(redis_url=url, redis_password_env="MY_PASS")
    assert split_password(by_env.redis_connect_url({"MY_PASS": "x"}))[1] == "x"
    with pytest.raises(Exception, match="MY_PASS, which is not set"):
        by_env.redis_connect_url({})


def test_jar_holds_the_resources_tree_the_local_runner_runs_in(tmp_path, capsys):
    out = tmp_path / "wordcount.jar"
    assert main(["jar", "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] > 10
    with zipfile.ZipFile(out) as jar:
        names = set(jar.namelist())
    assert "META-INF/MANIFEST.MF" in names
    assert {"resources/keysplit/__init__.py", "resources/keysplit/storm/bolts.py", "resources/keysplit/storm/spout.py",
            "resources/keysplit/storm/router.py"} <= names
    assert not any("__pycache__" in n or n.endswith(".pyc") or not n.startswith(("resources/", "META-INF/"))
                   for n in names), "no build leftovers, no Storm classes"
    tree = build_resources(tmp_path / "res")
    assert {"resources/" + p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()} == \
        names - {"META-INF/MANIFEST.MF"}
    assert names - {"META-INF/MANIFEST.MF"} == set(write_jar(tmp_path / "again.jar")[1:])


def test_streamparse_conf_carries_the_envs_log_settings_and_no_env_needs_a_missing_folder():
    class T(Topology):
        numbers = NumberSpout.spec(par=1)

    for env in ("local", "prod"):
        # streamparse's use_ssh_for_nimbus defaults to true: an env that leaves it out tunnels through ssh
        assert read_env(ROOT / "config.json", env)["use_ssh_for_nimbus"] is False, env
        conf = submit_conf(T, "t", {"x": 1}, env_config=read_env(ROOT / "config.json", env))
        assert conf["pystorm.log.level"] == "info" and conf["x"] == 1 and conf["topology.workers"] == 1
        # a pystorm.log.path would have to exist on every worker host, relative to resources/ if relative
        assert "pystorm.log.path" not in conf, f"env {env} names a log folder nobody creates"
    conf = submit_conf(T, "t", {}, env_config={"use_virtualenv": False, "log": {"path": "/var/x", "max_bytes": 5}})
    assert conf["pystorm.log.path"] == "/var/x" and conf["pystorm.log.max_bytes"] == 5


def _numbers_topology():
    class T(Topology):
        numbers = NumberSpout.spec(par=1)
        record = RecordBolt.spec(inputs=[numbers], par=1)
    return T


def test_relative_log_path_fails_as_on_a_supervisor_and_an_absolute_one_works(tmp_path):
    T = _numbers_topology()
    conf = {"test.out": str(tmp_path), "test.n": 5, "keysplit.local.max.restarts": 1,
            "keysplit.local.restart.delay.secs": 0.1,
            **submit_conf(T, "t", {}, env_config={"use_virtualenv": False, "log": {"path": "logs"}})}
    # pystorm opens its log file right after answering the handshake: the task dies, and so does every restart
    with pytest.raises(TopologyError, match=r"keeps dying.*FileNotFoundError.*logs/pystorm_t_"), \
            LocalCluster(T, conf, cwd=str(ROOT), env={"PYTHONPATH": str(TESTS)}) as cluster:
        cluster.run_until(lambda: False, timeout=30)
    logs = tmp_path / "pylogs"
    logs.mkdir()
    conf["pystorm.log.path"] = str(logs)
    with LocalCluster(T, conf, cwd=str(ROOT), env={"PYTHONPATH": str(TESTS)}) as cluster:
        cluster.start()
        assert cluster.resources != str(ROOT) and Path(cluster.resources, "keysplit", "cli.py").is_file()
    assert sorted(p.name.split("_")[2] for p in logs.glob("pystorm_*.log")) == ["numbers", "record"]


def test_a_module_missing_from_the_jar_fails_at_startup(tmp_path):
    """The resources folder comes before the development install on the import path, as the only keysplit a
    worker has: a component importing a module the jar lacks cannot start."""
    from keysplit.storm.topology import wordcount_topology

    tree = build_resources(tmp_path / "resources")
    (tree / "keysplit" / "storm" / "counting.py").unlink()
    topology = wordcount_topology(RunSettings(sources=1, workers=1, aggregators=1))
    with pytest.raises(TopologyError, match=r"keysplit\.storm\.counting"), \
            LocalCluster(topology, {}, cwd=str(ROOT), resources=str(tree)) as cluster:
        cluster.start()


def test_the_jar_imports_in_a_python_without_keysplit(tmp_path):
    """What a worker does with the jar: extract resources/ and import the components from there."""
    jar = tmp_path / "w.jar"
    write_jar(jar)
    with zipfile.ZipFile(jar) as z:
        z.extractall(tmp_path / "x")
    code = "import sys; sys.path.insert(0, 'resources'); import keysplit.storm.bolts as b; print(b.__file__)"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "x", capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip().startswith(str(tmp_path / "x" / "resources"))
