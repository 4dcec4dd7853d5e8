"""The numba fast path makes exactly the reference decisions (docs/design/routing.md).

Every test routes the same stream twice, through the reference ``Grouping.choose`` loop of ``simulate`` and
through ``keysplit.simulator.fast``, and demands the same worker for every message and the same ``RunResult`` (every
field but ``messages_per_second``): loads, imbalance series, load std-dev, dist_cost, distinct keys.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import asdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keysplit.datasets import Dataset, Record, open_dataset
from keysplit.datasets.generators import Generator
from keysplit.errors import SpecError
from keysplit.groupings.hosting import prepare_groupings, route
from keysplit.hashing import candidates, choices
from keysplit.simulator import simulate
from keysplit.simulator.fast import fast_route, fast_simulate, fast_spec

SPECS = [
    "kg",
    "sg",
    "pkg",
    "pkg:d=3",
    "pkg:d=4",
    "pkg:load=global",
    "pkg:probe=1",
    "pkg:probe=1,probe_scale=total",
    "pkg:distinct=false",
    "pkg:d=3,distinct=false,probe=1",
    "salt",
    "salt:k=3,seed=7,distinct=false",
]
WORKERS = 7
RATE = 1000.0  # 20,000 messages span 20 s of event time: 20 probes at probe=1


class ListDataset(Dataset):
    """Records held in memory (hypothesis streams, and records without keys)."""

    def __init__(self, records: list[Record]) -> None:
        self._records = records
        self.spec = "list"

    def records(self) -> Iterator[Record]:
        yield from self._records


def reference_workers(dataset: Dataset, spec: str, workers: int, sources: int, rate: float, split: str) -> list[int]:
    """Per-message workers of the reference, with the true loads a probe reads kept as ``simulate`` keeps them."""
    loads = [0] * workers
    groupings = prepare_groupings(spec, workers, sources, dataset, lambda: loads[:])
    out = []
    for _seq, _s, _key, w in route(dataset, groupings, rate=rate, split=split):
        loads[w] += 1
        out.append(w)
    return out


def without_speed(result) -> dict:
    fields = asdict(result)
    del fields["messages_per_second"]
    return fields


def assert_same_decisions(dataset: Dataset, spec: str, workers: int, sources: int, split: str, rate: float = RATE,
                          checkpoint: int | None = None) -> list[int]:
    expected = reference_workers(dataset, spec, workers, sources, rate, split)
    got = fast_route(dataset, spec, workers, sources, rate=rate, split=split)
    assert got is not None
    assert got.tolist() == expected
    ref = simulate(dataset, spec, workers, sources, rate=rate, split=split, checkpoint=checkpoint, engine="reference")
    fast = simulate(dataset, spec, workers, sources, rate=rate, split=split, checkpoint=checkpoint, engine="fast")
    assert without_speed(fast) == without_speed(ref)
    assert fast.messages == len(expected)
    return expected


@pytest.fixture(scope="module")
def text_file(tmp_path_factory) -> str:
    """Lines of several words from a skewed vocabulary (one record = one line = many messages)."""
    rng = np.random.default_rng(7)
    vocabulary = [f"w{i}" for i in range(300)]
    weights = 1.0 / np.arange(1, 301)
    weights /= weights.sum()
    path = tmp_path_factory.mktemp("fast") / "book.txt"
    with open(path, "w", encoding="utf-8") as fh:
        for line in range(2500):
            words = rng.choice(vocabulary, size=int(rng.integers(0, 9)), p=weights)
            fh.write(("The " if line % 5 == 0 else "") + " ".join(words) + "\n")
    return f"text:{path}"


@pytest.fixture(scope="module")
def timed_csv(tmp_path_factory) -> str:
    """One key per row with irregular timestamps: bursts, long gaps (many probe periods), and empty cells
    (those rows fall back to ``seq / rate``)."""
    rng = np.random.default_rng(11)
    path = tmp_path_factory.mktemp("fast") / "events.csv"
    t = 100.0
    with open(path, "w", encoding="utf-8", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(["user", "ts", "note"])
        for i in range(12_000):
            t += float(rng.exponential(0.002)) + (7.3 if i % 2000 == 1999 else 0.0)
            key = f"u{min(int(rng.zipf(1.3)), 5000)}"
            out.writerow([key, "" if i % 997 == 0 else repr(t), "x"])
    return f"csv:{path},key=user,time=ts"


ZIPF = "zipf:z=1.1,keys=2000,messages=20000,seed=5"


@pytest.mark.parametrize("split", ["shuffle", "key"])
@pytest.mark.parametrize("sources", [1, 3, 5])
@pytest.mark.parametrize("spec", SPECS)
def test_same_decisions_on_zipf(spec, sources, split):
    assert_same_decisions(open_dataset(ZIPF), spec, WORKERS, sources, split)


@pytest.mark.parametrize("split", ["shuffle", "key"])
@pytest.mark.parametrize("sources", [1, 3, 5])
@pytest.mark.parametrize("spec", SPECS)
def test_same_decisions_on_text_with_many_keys_per_record(text_file, spec, sources, split):
    assert_same_decisions(open_dataset(text_file), spec, WORKERS, sources, split)


@pytest.mark.parametrize("split", ["shuffle", "key"])
@pytest.mark.parametrize("sources", [1, 3, 5])
@pytest.mark.parametrize("spec", SPECS)
def test_same_decisions_on_timestamped_csv(timed_csv, spec, sources, split):
    assert_same_decisions(open_dataset(timed_csv), spec, WORKERS, sources, split)


@pytest.mark.parametrize(
    "dataset",
    [
        "lognormal:mu=1.789,sigma=5,messages=20000,seed=3",  # indices beyond the flat table (dict path)
        "country-skew:ratio=0.3,messages=20000,seed=2",  # names that are not k<i>
        "drift:z=1.2,keys=3000,messages=20000,seed=4",
    ],
)
@pytest.mark.parametrize("spec", ["kg", "pkg", "pkg:d=3,probe=0.5"])
def test_same_decisions_on_other_generators(dataset, spec):
    assert_same_decisions(open_dataset(dataset), spec, WORKERS, 3, "key")


@pytest.mark.parametrize(
    "dataset",
    ["zipf:z=0.9,keys=500,messages=100000,seed=9", "drift:z=1.2,keys=800,messages=100000,seed=9,phases=5"],
)
def test_same_decisions_across_the_generators_sampling_chunks(dataset):
    """Streams longer than a generator's sampling chunk (65536 draws) are drawn chunk by chunk, as records() does."""
    assert_same_decisions(open_dataset(dataset), "pkg:probe=1,probe_scale=total", WORKERS, 3, "key")


@pytest.mark.parametrize("spec", ["pkg", "pkg:d=4", "pkg:probe=1"])
def test_same_decisions_with_many_workers(spec):
    """W > 64: the distinct (worker, key) bitset spans several words."""
    assert_same_decisions(open_dataset(ZIPF), spec, 150, 4, "shuffle", checkpoint=7)


def test_a_probe_interval_finer_than_the_timestamps_resolution_probes_every_instant(tmp_path):
    """Nanosecond epoch timestamps with probe=1: 1.7e18 + 1 == 1.7e18 in floating point, so the probe grid
    cannot be walked step by step (it used to hang). Both paths then probe at every later instant, alike."""
    path = tmp_path / "ns.csv"
    rows = [f"k{i % 7},{1_700_000_000_000_000_000 + 37 * i}" for i in range(3000)]
    path.write_text("key,time\n" + "\n".join(rows) + "\n")
    assert_same_decisions(open_dataset(f"csv:{path},key=key,time=time"), "pkg:probe=1", 4, 3, "shuffle")


def test_probing_changes_decisions_so_the_probe_tests_are_not_vacuous():
    ds = open_dataset(ZIPF)
    local = fast_route(ds, "pkg", WORKERS, 5, rate=RATE)
    share = fast_route(ds, "pkg:probe=1", WORKERS, 5, rate=RATE)
    total = fast_route(ds, "pkg:probe=1,probe_scale=total", WORKERS, 5, rate=RATE)
    assert (local != share).any() and (share != total).any()


def test_records_without_keys_still_count_in_the_round_robin_over_records():
    records: list[Record] = [(None, ["a", "b"]), (None, []), (None, ["a"]), (None, []), (None, ["c", "a", "a"])] * 40
    for spec in ("sg", "pkg", "pkg:probe=0.001"):
        assert_same_decisions(ListDataset(records), spec, 3, 2, "shuffle", rate=1000.0)


def test_an_empty_stream_gives_the_reference_empty_result():
    ds = ListDataset([(None, [])])
    ref = simulate(ds, "pkg", 4, 2, checkpoint=1, engine="reference")
    assert without_speed(simulate(ds, "pkg", 4, 2, checkpoint=1, engine="fast")) == without_speed(ref)


def test_kg_sends_every_key_to_its_hash_and_pkg_to_one_of_its_candidates():
    ds = open_dataset(ZIPF)
    keys = [k for _, ks in ds.records() for k in ks]
    kg = fast_route(ds, "kg", WORKERS, 3)
    pkg = fast_route(ds, "pkg:d=3", WORKERS, 3)
    assert all(w == choices(k, 1, WORKERS)[0] for k, w in zip(keys, kg.tolist()))
    assert all(w in candidates(k, 3, WORKERS, True) for k, w in zip(keys, pkg.tolist()))
    paper = fast_route(ds, "pkg:d=3,distinct=false", WORKERS, 3)
    assert all(w in choices(k, 3, WORKERS) for k, w in zip(keys, paper.tolist()))


def test_distinct_and_salt_change_decisions_so_their_tests_are_not_vacuous():
    ds = open_dataset(ZIPF)
    assert (fast_route(ds, "pkg", WORKERS, 3) != fast_route(ds, "pkg:distinct=false", WORKERS, 3)).any()
    assert (fast_route(ds, "salt", WORKERS, 3) != fast_route(ds, "salt:seed=1", WORKERS, 3)).any()
    assert (fast_route(ds, "salt", WORKERS, 3) != fast_route(ds, "pkg", WORKERS, 3)).any()


def test_other_groupings_have_no_fast_path_and_auto_falls_back_to_the_reference():
    ds = open_dataset("zipf:z=1.0,keys=500,messages=3000,seed=1")
    assert fast_spec("potc", 5, 2) is None
    assert fast_simulate(ds, "ongreedy", 5, 2) is None
    with pytest.raises(SpecError, match="no fast path"):
        simulate(ds, "potc", 5, 2, engine="fast")
    auto = simulate(ds, "potc", 5, 2)
    assert without_speed(auto) == without_speed(simulate(ds, "potc", 5, 2, engine="reference"))


def test_bad_specs_and_engines_fail_with_the_reference_errors():
    ds = open_dataset(ZIPF)
    with pytest.raises(SpecError, match="exceeds the number of workers"):
        fast_simulate(ds, "pkg:d=8", WORKERS, 1)
    with pytest.raises(SpecError, match="load=local only"):
        fast_simulate(ds, "pkg:load=global,probe=5", WORKERS, 1)
    with pytest.raises(SpecError, match="unknown engine"):
        simulate(ds, "kg", WORKERS, engine="turbo")
    with pytest.raises(SpecError, match="unknown split"):
        fast_route(ds, "kg", WORKERS, split="random")


# Property tests: random key streams, random timestamps (or none), random W and S.
key = st.sampled_from([f"k{i}" for i in range(12)]) | st.text(min_size=1, max_size=6)
record = st.tuples(st.none() | st.floats(0, 50, allow_nan=False), st.lists(key, min_size=0, max_size=4))


@settings(max_examples=60, deadline=None)
@given(
    records=st.lists(record, min_size=1, max_size=120),
    workers=st.integers(2, 9),  # pkg needs d=2 <= W
    sources=st.integers(1, 4),
    split=st.sampled_from(["shuffle", "key"]),
    spec=st.sampled_from(["kg", "pkg", "pkg:d={d}", "pkg:load=global", "pkg:probe={p}",
                          "pkg:d={d},probe={p},probe_scale=total", "pkg:d={d},distinct=false",
                          "salt:k={d},seed={d}", "salt:k={d},distinct=false"]),
    d=st.integers(1, 9),
    probe=st.sampled_from([0.01, 0.5, 3.0]),
)
def test_fast_path_equals_reference_on_random_streams(records, workers, sources, split, spec, d, probe):
    spec = spec.format(d=min(d, workers), p=probe)
    assert_same_decisions(ListDataset(records), spec, workers, sources, split, rate=40.0, checkpoint=3)


def test_runs_count_the_datasets_keys_and_top_key_while_routing(text_file):
    """`keysplit simulate` takes keys and p1 from its first run instead of a separate statistics pass."""
    for spec in (ZIPF, text_file):
        ds = open_dataset(spec)
        st = ds.stats()
        for engine, grouping in (("fast", "pkg"), ("reference", "potc")):
            r = simulate(ds, grouping, WORKERS, 3, engine=engine)
            assert (r.messages, r.keys, r.top_key_messages / r.messages) == (st["messages"], st["keys"], st["p1"])


class FarIndices(Generator):
    """A generator whose key indices are negative, huge (past the flat table) or ordinary, and whose names
    collide (index i and i + 1000 are one key): the fast path's dict route for indices and its naming of
    keys in batches per chunk."""

    name = "far"

    def key_indices(self, rng: np.random.Generator, n: int, start: int) -> np.ndarray:
        base = np.minimum(rng.zipf(1.4, n), 3000) - 1
        shift = rng.choice(np.array([0, -(1 << 40), 1 << 40, 1000]), n)
        return base + shift

    def key_name(self, index: int) -> str:
        return f"k{index % 1000 if index >= 0 else -index % 7}"


@pytest.mark.parametrize("split", ["shuffle", "key"])
def test_same_decisions_with_far_and_colliding_generator_indices(split):
    ds = FarIndices(messages=150_000, seed=3)  # three chunks of the generator: keys named chunk by chunk
    for spec in ("pkg", "kg", "salt:k=3"):
        assert_same_decisions(ds, spec, WORKERS, 3, split)
