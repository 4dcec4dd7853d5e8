"""Fixtures of the toolkit's integration tests: a managed Redis per module, a skewed CSV of page views with its
exact per-page totals computed independently of keysplit, and a topology file written like a user's."""

from __future__ import annotations

import csv
import os
import random
from collections import Counter
from pathlib import Path

import pytest

from keysplit.runs import redis_server


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    path = tmp_path_factory.mktemp("keysplit-home")
    old = os.environ.get("KEYSPLIT_HOME")
    os.environ["KEYSPLIT_HOME"] = str(path)
    yield path
    redis_server.stop_server(path)
    if old is None:
        os.environ.pop("KEYSPLIT_HOME", None)
    else:
        os.environ["KEYSPLIT_HOME"] = old


@pytest.fixture(scope="module")
def redis_url(home):
    return redis_server.start_server(home).url


def write_views(path: Path, rows: int, seed: int, pages: int = 60) -> tuple[Counter, Counter]:
    """A CSV ``time,page,bytes`` whose pages follow a Zipf-like law; returns each page's exact bytes and views,
    summed here with the csv module, not with keysplit's reader."""
    rng = random.Random(seed)
    names = [f"/p/{i}" for i in range(pages)]
    weights = [1.0 / (i + 1) ** 1.2 for i in range(pages)]
    with open(path, "w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["time", "page", "bytes"])
        for i in range(rows):
            out.writerow([f"{i / 200:.3f}", rng.choices(names, weights)[0], rng.randint(1, 9000)])
    total_bytes: Counter = Counter()
    views: Counter = Counter()
    with open(path, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            total_bytes[row["page"]] += int(row["bytes"])
            views[row["page"]] += 1
    return total_bytes, views


@pytest.fixture(scope="module")
def views(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "views.csv"
    return (path, *write_views(path, 1500, seed=11))


TOPOLOGY = '''
from keysplit.toolkit import Aggregate, {accumulator_class}, FeedSpout, KeyRouter, Topology


class PageStats(Topology):
    config = {config!r}
    views = FeedSpout.spec(fields=["time", "page", "bytes"])
    route = KeyRouter.spec(inputs=[views], key="page", grouping={grouping!r}, time={time!r}, par={sources}{batch})
    partial = Aggregate.partial(inputs=route, accumulator={accumulator}, period=0.5, par={workers})
    total = Aggregate.merge(inputs=partial, top=5, par={merges})
'''


@pytest.fixture
def topology_file():
    """:func:`write_topology`, for a test to write a user's topology file."""
    return write_topology


def write_topology(folder: Path, grouping: str, *, sources: int = 2, workers: int = 4, merges: int = 2,
                  time: str | None = "time", accumulator: str = 'Sum("bytes")', config: dict | None = None,
                  batch: int | None = None) -> Path:
    """A user's topology file (outside any project: keysplit's own components only); its router sends ``batch`` rows
    a tuple at most (None: the default, batches under exactly-once, as its feed does)."""
    path = folder / "pagestats.py"
    path.write_text(TOPOLOGY.format(grouping=grouping, sources=sources, workers=workers, merges=merges, time=time,
                                    accumulator=accumulator, accumulator_class=accumulator.split("(")[0],
                                    config=config or {}, batch="" if batch is None else f", batch={batch}"))
    return path
