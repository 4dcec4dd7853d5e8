"""The replay on a real Spark standalone cluster whose workers have keysplit's dependencies but not keysplit.

A master and two one-core workers are started on loopback from the pyspark package (``spark-class``), and
the executors run a Python that can import numpy, numba, mmh3 and pyarrow but not keysplit: everything they
import must come from the code zip the driver ships. Every registered grouping is replayed there and the
outputs are compared with the suite's ``local[2]`` session.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig

import pytest
from cli_process import wait_for

from keysplit.groupings import REGISTRY
from spark_replay.job import ReplayOptions, run_replay

DATASET = "zipf:z=1.3,keys=200,messages=3000,seed=4"
COMPARED = ("grouping", "mode", "loads", "avg_imbalance_fraction", "final_imbalance_fraction", "dist_cost",
            "distinct_per_worker", "latency_mean_ms", "latency_p99_ms", "throughput_estimate", "fast_path")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_python(folder) -> str:
    """A venv whose site-packages reaches the project's (the dependencies) without the editable keysplit."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(folder)], check=True, timeout=60)
    python = str(folder / "bin" / "python")
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    # A plain path line: .pth files inside that folder (the editable finder) are not processed from there.
    with open(os.path.join(site, "project.pth"), "w", encoding="utf-8") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    return python


def listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def cluster(tmp_path):
    """``spark://127.0.0.1:PORT`` with two one-core workers; every process is stopped afterwards."""
    spark_class = os.path.join(os.path.dirname(sys.executable), "spark-class")
    import pyspark

    env = dict(os.environ, SPARK_HOME=os.path.dirname(pyspark.__file__), SPARK_LOG_DIR=str(tmp_path / "logs"),
               SPARK_WORKER_DIR=str(tmp_path / "work"), SPARK_LOCAL_IP="127.0.0.1")
    env.pop("PYSPARK_GATEWAY_PORT", None)
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = []
    log = open(tmp_path / "cluster.log", "wb")  # noqa: SIM115 - closed in the finally below

    def start(*args: str) -> None:
        procs.append(subprocess.Popen([spark_class, *args], env=env, stdout=log, stderr=log, start_new_session=True))

    try:
        start("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
              "--webui-port", str(free_port()))
        wait_for(lambda: listening(port), 60, "the master")
        for _ in range(2):
            start("org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                  "--webui-port", str(free_port()), "--work-dir", str(tmp_path / "work"), url)
        yield url
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        for p in procs:  # executors the workers started, in the groups started here
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        log.close()


def test_every_grouping_on_a_standalone_cluster_without_keysplit_on_the_workers(spark, cluster, tmp_path):
    python = worker_python(tmp_path / "wpy")
    probe = subprocess.run([python, "-c", "import keysplit"], capture_output=True, text=True, cwd=tmp_path,
                           env={"PATH": os.environ["PATH"]})
    assert probe.returncode != 0 and "No module named 'keysplit'" in probe.stderr
    deps = subprocess.run([python, "-c", "import numpy, numba, mmh3, pyarrow"], cwd=tmp_path,
                          env={"PATH": os.environ["PATH"]}, capture_output=True, text=True)
    assert deps.returncode == 0, deps.stderr

    groupings = [*REGISTRY, "pkg:load=global"]
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    env = dict(os.environ, PYSPARK_PYTHON=python, TMPDIR=str(private_tmp))
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.pop("PYTHONPATH", None)
    out = tmp_path / "cluster"
    proc = subprocess.run(
        [sys.executable, "-m", "keysplit.cli", "replay", "--master", cluster, "--dataset", DATASET,
         "-g", ",".join(groupings), "-W", "4", "-S", "2", "--out", str(out), "--json",
         "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
         "--conf", "spark.executor.memory=512m"],
        env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    remote = json.loads(proc.stdout)
    assert remote["replay"]["master"] == cluster

    local = run_replay(spark, ReplayOptions(dataset=DATASET, groupings=groupings, workers=4, sources=2,
                                            out=str(tmp_path / "local")))
    assert [r["grouping"] for r in remote["runs"]] == [r["grouping"] for r in local["runs"]]
    for got, want in zip(remote["runs"], local["runs"]):
        assert {k: got[k] for k in COMPARED} == {k: want[k] for k in COMPARED}, got["grouping"]
    assert remote["dataset"]["sha256"] == local["dataset"]["sha256"]
    # The session cleaned up after itself: neither the code zip nor the driver's JVM log is left.
    assert not [n for n in os.listdir(private_tmp) if n.startswith(("keysplit-code-", "keysplit-spark-"))]


def other_minor_python() -> str:
    """An installed Python 3 of another minor version than this one (pyenv's or on PATH)."""
    import glob
    import shutil

    found = glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*"))
    found += [p for p in (shutil.which(f"python3.{n}") for n in range(8, 16)) if p]
    for path in sorted(found):
        if path.endswith("-config") or not os.access(path, os.X_OK):
            continue
        probe = subprocess.run([path, "-c", "import sys; print(sys.version_info[1])"], capture_output=True, text=True)
        if probe.returncode == 0 and probe.stdout.strip() != str(sys.version_info[1]):
            return path
    raise AssertionError("this test needs a Python 3 of another minor version installed")


def replay_with_worker_python(python: str, tmp_path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYSPARK_PYTHON=python)
    env.pop("PYSPARK_GATEWAY_PORT", None)
    return subprocess.run([sys.executable, "-m", "keysplit.cli", "replay", "--master", "local[1]", "--dataset",
                           "zipf:messages=100", "--out", str(tmp_path / "o")], env=env, capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)


def test_worker_environment_problems_are_one_line_naming_the_fix(tmp_path):
    proc = replay_with_worker_python(worker_python(tmp_path / "wpy"), tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("keysplit: error: the Spark executors' Python (")
    assert "cannot import keysplit, spark_replay: install keysplit in that Python, or unset PYSPARK_PYTHON" \
        in proc.stderr and proc.stderr.count("\n") == 1

    other = other_minor_python()
    proc = replay_with_worker_python(other, tmp_path)
    assert proc.returncode == 2
    driver = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert proc.stderr.startswith("keysplit: error: the Spark executors run Python 3.")
    assert f"but this driver runs Python {driver}; PySpark needs the same minor version on both: set " \
        f"PYSPARK_PYTHON to a Python {driver}" in proc.stderr and proc.stderr.count("\n") == 1
