"""Shared fixtures: one real local SparkSession for every test that needs Spark, and damaged dataset files."""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path

import pytest

# The helpers the tests import by name (cli_process, local_components, ...) stay here, beside this file, for
# the tests of every subfolder (pytest's default import mode puts this folder on sys.path; this says so), and
# a test imports another folder's test module as tests.<folder>.test_x, from the repository's root (on the
# path already under `python -m pytest`; appended for a bare `pytest`).
sys.path.insert(0, str(Path(__file__).resolve().parent))
if str(Path(__file__).resolve().parents[1]) not in sys.path:
    sys.path.append(str(Path(__file__).resolve().parents[1]))


def pytest_configure(config):
    config.addinivalue_line("markers", "every_redis: depends on the redis-server's version; `make test` runs it again "
                            "with the other Redis (KEYSPLIT_REDIS_SERVER)")


#: With KEYSPLIT_TEST_TIMES=FILE, each test's wall time and CPU time (this process and the children it waited for:
#: the runs' task processes) go to FILE as JSON, for benchmarks/suite_time.py to tell, between a quiet and a busy
#: machine, the tests that wait (wall grows, CPU does not) from those that work.
_TIMES_FILE = os.environ.get("KEYSPLIT_TEST_TIMES")
_times: dict[str, dict[str, float]] = {}


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


if _TIMES_FILE:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        wall, cpu = time.perf_counter(), _cpu_seconds()
        yield
        _times[item.nodeid] = {"wall_s": time.perf_counter() - wall, "cpu_s": _cpu_seconds() - cpu}

    def pytest_sessionfinish(session, exitstatus):
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        Path(_TIMES_FILE).write_text(json.dumps({"load_at_end": load, "cores": os.cpu_count(), "tests": _times},
                                                indent=1), encoding="utf-8")


@pytest.fixture(scope="session")
def spark():
    """A real ``local[2]`` SparkSession (the replay's own settings), started once and stopped at the end."""
    from spark_replay.session import get_session

    session, created = get_session("local[2]", driver_memory="1g")
    yield session
    if created:
        session.stop()


@pytest.fixture
def corrupt_gzip(tmp_path):
    """A gzip file with a valid header whose deflate data is overwritten near the start (zlib refuses it)."""
    import gzip

    path = tmp_path / "words.txt.gz"
    data = bytearray(gzip.compress(b"hello world line\n" * 2000))
    data[20:40] = b"\xff" * 20
    path.write_bytes(bytes(data))
    return path


@pytest.fixture
def corrupt_parquet(tmp_path):
    """A snappy Parquet file (column ``key``) with a valid footer and overwritten pages in the middle."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "keys.parquet"
    pq.write_table(pa.table({"key": [f"key{i * 7919 % 100003}" for i in range(50000)]}), path,
                   compression="snappy")
    data = bytearray(path.read_bytes())
    data[len(data) // 2:len(data) // 2 + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))
    return path
