"""The replay's exact counts by fingerprint (:mod:`spark_replay.key_counts`), their collision check, and the
replay's path when two keys share a fingerprint (everything routed again by name)."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pyarrow.parquet as pq

from keysplit.datasets import open_dataset
from spark_replay import key_counts
from spark_replay.chunks import Chunk
from spark_replay.job import ReplayOptions, run_replay
from spark_replay.key_hashes import key_hashes64
from tests.replay.test_replay import assert_same_as_simulate, write_text

TIMINGS = ("seconds", "messages_per_second", "ingest_seconds", "total_seconds", "counts", "timeseries")


def _chunk(rng: random.Random, vocab: list[str], n: int) -> Chunk:
    used = rng.sample(vocab, rng.randint(1, len(vocab)))
    ids = np.array([rng.randrange(len(used)) for _ in range(n)], dtype=np.int32)
    return Chunk((0, 0), used, ids, np.ones(n, dtype=np.int32), None, None)


def test_counts_by_fingerprint_equal_a_counter_and_the_top_k_its_order():
    rng = random.Random(4)
    vocab = [f"w{i}" for i in range(300)] + ["", "é", "a b"]
    splits = [[_chunk(rng, vocab, rng.randint(0, 2000)) for _ in range(rng.randint(0, 4))] for _ in range(6)]
    want = Counter()
    for chunks in splits:
        for c in chunks:
            want.update(c.vocab[k] for k in c.key_ids.tolist())
    for buckets in (1, 3, 8):
        pieces = [p for chunks in splits for p in key_counts.partition_counts(chunks, buckets)]
        got = {}
        for b in range(buckets):
            h, c, n, clash = key_counts.reduce_counts(p for p in pieces if p[0] == b)[0]
            assert not clash
            assert np.all(np.diff(h.astype(np.float64)) >= 0) and len(set(h.tolist())) == len(h)
            assert (h == key_hashes64(n.tolist())).all() and (h % np.uint64(buckets) == b).all()
            got.update(zip(n.tolist(), c.tolist()))
            want_top = sorted(((k, v) for k, v in want.items() if k in set(n.tolist())), key=lambda kv: (-kv[1], kv[0]))
            assert key_counts.top((h, c, n, clash), 5) == want_top[:5]
        assert got == dict(want)


def test_two_keys_with_one_fingerprint_are_a_clash_and_their_first_key_is_kept():
    hashes = np.array([7, 3, 7, 3], dtype=np.uint64)
    h, c, n, clash = key_counts.merge_counts(hashes, np.array([1, 2, 3, 4]), np.array(["a", "b", "a", "b"], object))
    assert not clash and h.tolist() == [3, 7] and c.tolist() == [6, 4] and n.tolist() == ["b", "a"]
    _, c, n, clash = key_counts.merge_counts(hashes, np.array([1, 2, 3, 4]), np.array(["a", "b", "z", "b"], object))
    assert clash and c.tolist() == [6, 4] and n.tolist() == ["b", "a"]


def _without_timings(d):
    if isinstance(d, dict):
        return {k: _without_timings(v) for k, v in d.items() if k not in TIMINGS}
    if isinstance(d, list):
        return [_without_timings(x) for x in d]
    return d


def test_a_fingerprint_clash_routes_everything_again_by_name(spark, tmp_path, monkeypatch, capsys):
    # A 64-bit clash cannot be made on purpose: the driver is told of one, and the executors then count and
    # route by name for real. Everything must come out as with trusted fingerprints, and as the simulator's.
    path = write_text(tmp_path / "book.txt", lines=900, seed=9)
    spec = f"text:{path}"
    groupings = ["kg", "pkg", "pkg:load=global", "dkg"]

    def opts(out):
        return ReplayOptions(dataset=spec, groupings=groupings, workers=5, sources=3, out=str(tmp_path / out),
                             partitions=4, top_k=6)

    trusted = run_replay(spark, opts("trusted"), progress=print)
    assert "routing again" not in capsys.readouterr().out
    real = key_counts.summary

    def clashing(counts, k):
        return dict(real(counts, k), hashed=False)

    monkeypatch.setattr(key_counts, "summary", clashing)
    by_name = run_replay(spark, opts("by_name"), progress=print)
    assert "routing again by key name" in capsys.readouterr().out
    assert _without_timings(by_name) == _without_timings(trusted)
    assert_same_as_simulate(by_name, spec)
    independent = Counter()
    for _, keys in open_dataset(spec).records():
        independent.update(keys)
    for summary in (trusted, by_name):
        table = pq.read_table(summary["replay"]["counts"])
        assert dict(zip(table.column("key").to_pylist(), table.column("count").to_pylist())) == dict(independent)
        want_top = sorted(independent.items(), key=lambda kv: (-kv[1], kv[0]))[:6]
        assert summary["runs"][0]["top_k"] == [list(kv) for kv in want_top]
