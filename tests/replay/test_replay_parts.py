"""The replay's building blocks, without Spark: Lindley's recursion, the latency histogram, key-set merging, chunk
order and the dataset fingerprint. (How Spark cuts a file into splits is tested end to end in
``tests/replay/test_replay.py``.)"""

from __future__ import annotations

import random

import numpy as np
import pytest

from keysplit.fingerprint import Fingerprint, chunk_lanes, dataset_sha256, key_hashes
from keysplit.latency import LatencyHistogram
from spark_replay.aggregates import distinct_counts, hashed_masks, key_masks, union_masks
from spark_replay.key_hashes import key_hash64
from spark_replay.ordered import in_order
from spark_replay.queueing import lindley


def test_lindley_equals_the_departure_recursion():
    rng = np.random.default_rng(4)
    arrivals = np.sort(rng.exponential(0.001, 5000).cumsum() * rng.choice([0.5, 1.0, 2.0]))
    service = 0.0011
    departure, expected = 0.0, []
    for a in arrivals.tolist():
        departure = max(a, departure) + service  # FIFO, one server, deterministic service
        expected.append(departure - a)
    np.testing.assert_allclose(lindley(arrivals, service), expected, rtol=1e-12, atol=1e-12)


def test_histogram_percentiles_are_within_a_bin_below_the_nearest_rank():
    rng = np.random.default_rng(2)
    service = 0.002
    values = service + rng.exponential(0.01, 20000)
    hist = LatencyHistogram(service)
    for part in np.array_split(values, 7):
        other = LatencyHistogram(service)
        other.add(part)
        hist.merge(other)
    ordered = np.sort(values)
    for q in (1, 50, 95, 99, 100):
        exact = ordered[int(np.ceil(q / 100 * len(values))) - 1]
        assert exact / 1.001 <= hist.percentile(q) <= exact
    assert abs(hist.mean - values.mean()) < 1e-12  # the mean is exact (sums, not bins)
    only_service = LatencyHistogram(service)
    only_service.add(np.full(10, service))
    assert only_service.percentile(50) == service  # no wait at all: exactly D


def test_fingerprint_masks_and_string_masks_count_the_same_distinct_keys():
    rng = random.Random(8)
    workers = 70  # more than one 64-bit word of mask
    vocab_all = [f"k{i}" for i in range(500)]
    parts = []
    for _ in range(4):
        vocab = rng.sample(vocab_all, 200)
        ids = np.array([rng.randrange(200) for _ in range(3000)], dtype=np.int32)
        ws = np.array([rng.randrange(workers) for _ in range(3000)], dtype=np.int64)
        parts.append((vocab, ids, ws))
    truth = [set() for _ in range(workers)]
    for vocab, ids, ws in parts:
        for k, w in zip(ids.tolist(), ws.tolist()):
            truth[w].add(vocab[k])
    want = [len(s) for s in truth]
    merged: dict[str, int] = {}
    buckets: dict[int, list] = {}
    for vocab, ids, ws in parts:
        for key, mask in key_masks(ids, ws, vocab, workers):
            merged[key] = merged.get(key, 0) | mask
        fps = np.array([key_hash64(k) for k in vocab], dtype=np.uint64)
        for b, piece in hashed_masks(ids, ws, fps, workers, 3):
            buckets.setdefault(b, []).append(piece)
    per_worker, keys = distinct_counts(merged.values(), workers)
    assert per_worker.tolist() == want and keys == len(set().union(*truth))
    total = np.zeros(workers, dtype=np.int64)
    n = 0
    for pieces in buckets.values():
        d, k = union_masks(pieces, workers)
        total += d
        n += k
    assert total.tolist() == want and n == keys


def test_pieces_come_out_in_the_announced_order_even_when_spilled():
    order = list(range(40))
    shuffled = order[:]
    random.Random(3).shuffle(shuffled)
    items = [(k, np.full(1000, k)) for k in shuffled]
    for budget in (0, 10_000, 1 << 30):  # all spilled, some spilled, none spilled
        out = list(in_order(items, order, budget=budget))
        assert [int(a[0]) for a in out] == order
    with pytest.raises(RuntimeError, match="never arrived"):
        list(in_order(items[:-1], order))


def test_fingerprint_adds_up_over_any_cut_and_sees_every_change():
    records = [(None if i % 3 else float(i), [f"k{(i * 7) % 11}", f"k{i % 5}"][: 1 + i % 2]) for i in range(500)]
    whole = dataset_sha256(records)
    vocab = sorted({k for _, ks in records for k in ks})
    index = {k: i for i, k in enumerate(vocab)}
    fp, seq, rec = Fingerprint(), 0, 0
    for a, b in ((0, 17), (17, 300), (300, 500)):  # three chunks, added in reverse order
        part = records[a:b]
        ids = np.array([index[k] for _, ks in part for k in ks])
        lens = np.array([len(ks) for _, ks in part])
        ts = np.array([t or 0.0 for t, _ in part])
        has = np.array([t is not None for t, _ in part])
        fp.add(len(part), len(ids), chunk_lanes(key_hashes(vocab), ids, lens, seq, rec, ts, has))
        seq += len(ids)
        rec += len(part)
    assert fp.hexdigest() == whole
    swapped = records[:]
    swapped[3], swapped[4] = swapped[4], swapped[3]
    retimed = records[:]
    retimed[0] = (1.0, records[0][1])
    merged = [*records[:2], (None, records[2][1] + records[3][1]), *records[4:]]
    assert len({whole, dataset_sha256(swapped), dataset_sha256(retimed), dataset_sha256(merged)}) == 4


def test_routing_params_cross_into_spark_as_a_typed_value():
    """What a routing task receives: a frozen dataclass that pickles whole (Spark ships it in the task's closure)
    and builds the same groupings as the arguments it holds."""
    import dataclasses
    import pickle

    from keysplit.stream import Resize
    from spark_replay.routing import PARTITIONED, RoutingParams, build_groupings

    params = RoutingParams(spec="fish", workers=4, sources=2, rate=100.0, mode=PARTITIONED, split="key",
                           capacities=(1.0, 2.0, 1.0, 2.0), resizes=(Resize(10, 6),))
    back = pickle.loads(pickle.dumps(dataclasses.replace(params, frequencies={"a": 3})))
    assert back == dataclasses.replace(params, frequencies={"a": 3}) and back.every_worker == 6
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.workers = 5  # type: ignore[misc]
    assert [g.describe() for g in build_groupings(back)] == [g.describe() for g in build_groupings(params)]
