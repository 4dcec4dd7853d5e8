"""What ships in the topology jar is the topology: its explicit contents (``local/submission.py`` JAR_CONTENTS)
are enough to start every component and build every registered grouping with no keysplit installed, and hold
no CLI, no local runner, no simulator and no compiled extension.

"No keysplit installed" is made for real: the Python runs with ``-S`` (no site processing, so the development
install's path hook is never read) and sees the third-party packages through ``PYTHONPATH`` alone, as a Storm
worker's virtualenv made from ``virtualenvs/wordcount.txt`` does.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import sysconfig
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from keysplit.groupings import REGISTRY
from keysplit.local.submission import write_jar
from keysplit.runs import redis_server
from keysplit.runs.collect import read_counts
from keysplit.runs.prepare import RunOptions, prepare_run
from keysplit.runs.wordcount import run_wordcount
from keysplit.storm.keys import RunKeys

SITE = sysconfig.get_paths()["purelib"]


@pytest.fixture(scope="module")
def jar_tree(tmp_path_factory) -> Path:
    """The jar, built as ``keysplit jar`` builds it and extracted as a supervisor extracts it."""
    tmp = tmp_path_factory.mktemp("jar")
    write_jar(tmp / "wordcount.jar")
    with zipfile.ZipFile(tmp / "wordcount.jar") as jar:
        jar.extractall(tmp / "x")
    return tmp / "x" / "resources"


def bare_python(tmp: Path) -> str:
    """An interpreter that sees site-packages but not the development install of keysplit."""
    wrapper = tmp / "bare-python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    return str(wrapper)


def test_the_jar_holds_only_the_topology(jar_tree):
    names = {p.relative_to(jar_tree / "keysplit").as_posix() for p in (jar_tree / "keysplit").rglob("*")
             if p.is_file()}
    assert {"storm/bolts.py", "storm/spout.py", "storm/router.py", "groupings/gedik.py", "stream.py"} <= names
    for absent in ("cli.py", "local/cluster.py", "simulator/fast.py", "runs/wordcount.py", "commands/run.py",
                   "runs/redis_server.py"):
        assert absent not in names, absent
    assert not any(n.endswith((".so", ".pyd", ".pyc")) for n in names), "no compiled extension travels"


def test_every_component_and_every_registered_grouping_imports_from_the_jar_alone(jar_tree, tmp_path):
    code = """
import importlib, json, sys
import keysplit
assert keysplit.__file__.startswith(sys.argv[1]), keysplit.__file__
from keysplit.groupings import REGISTRY
from keysplit.groupings.hosting import prepare_groupings
from keysplit.storm.settings import RunSettings
from keysplit.storm.topology import wordcount_topology
wordcount_topology(RunSettings(sources=2, workers=3, aggregators=1))
for module in ("keysplit.storm.spout", "keysplit.storm.bolts", "keysplit.storm.router", "keysplit.storm.feed"):
    importlib.import_module(module)
keys = ["a", "b", "a", "c", "a", "d"] * 50
decisions = {}
for name in REGISTRY:
    groupings = prepare_groupings(name, 3, 2, frequencies={"a": 150, "b": 50, "c": 50, "d": 50})
    decisions[name] = [groupings[i % 2].choose(k, i / 100.0) for i, k in enumerate(keys)]
print(json.dumps({"decisions": decisions, "numba": "numba" in sys.modules}))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(jar_tree), SITE])}
    done = subprocess.run([bare_python(tmp_path), "-c", code, str(jar_tree)], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert set(out["decisions"]) == set(REGISTRY)
    assert all(0 <= w < 3 for ws in out["decisions"].values() for w in ws)
    assert not out["numba"], "the router and the groupings run without numba"


def test_without_the_jar_keysplit_is_not_importable(tmp_path):
    """The check above is real: the bare interpreter finds no keysplit of its own."""
    env = {**os.environ, "PYTHONPATH": SITE}
    done = subprocess.run([bare_python(tmp_path), "-c", "import keysplit"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode != 0 and "No module named 'keysplit'" in done.stderr


def test_the_whole_topology_runs_from_the_jar_tree_alone(tmp_path, monkeypatch):
    """Every component (spout, router, counter, aggregator, top-k) starts in the bare interpreter, from the
    resources tree the runner builds from JAR_CONTENTS, and the totals are exact."""
    home = tmp_path / "home"
    monkeypatch.setenv("KEYSPLIT_HOME", str(home))
    monkeypatch.setenv("PYTHONPATH", SITE)
    words = [f"w{i % 17}" for i in range(600)]
    text = tmp_path / "lines.txt"
    text.write_text("\n".join(" ".join(words[i:i + 6]) for i in range(0, len(words), 6)) + "\n")
    url = redis_server.start_server(home).url
    try:
        conn = redis_server.connect(url)
        prepared = prepare_run(RunOptions("gedik", f"text:{text}", sources=2, workers=3, aggregators=1))
        summary = run_wordcount(prepared, conn, url, python=bare_python(tmp_path))
        assert read_counts(conn, RunKeys(summary["run_id"])) == dict(Counter(words))
    finally:
        redis_server.stop_server(home)


def test_jar_replaces_only_a_jar_keysplit_built(tmp_path, capsys):
    from keysplit.cli import main

    theirs = tmp_path / "uber.jar"
    theirs.write_bytes(b"PK not ours")
    assert main(["jar", "--out", str(theirs)]) == 2
    assert "exists and keysplit did not build it" in capsys.readouterr().err
    assert theirs.read_bytes() == b"PK not ours"
    ours = tmp_path / "ours.jar"
    assert main(["jar", "--out", str(ours)]) == 0 and main(["jar", "--out", str(ours)]) == 0  # its own: rebuilt
    assert main(["jar", "--out", str(theirs), "--force"]) == 0
