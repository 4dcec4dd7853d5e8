"""The streamed topology model gives its golden summaries, fed in chunks of any size.

The golden values (``tests/golden/topology_stream.json``) are the streamed kernel's own, made by
``tests/golden/topology_stream.py`` at commit 5589e96, where the kernel had been proven equal, line by line and to
the bit, to the whole-array event loop it replaced (this test kept that loop as its reference until then). Fed in
chunks of any size (one line, fewer lines than max pending, many), the kernel must give the same emit and
completion time of every line, the same counter busy times and timeouts, hence the same summary; without the
lines' times (the Spark task) the percentiles come from its histogram and are within one bin (1/16384) above. The
Spark task's own path (pieces per source merged by sequence number, released in chunk order whatever order they come
in) and a real replay are checked against the model too.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import numpy as np
import pytest
from golden.topology_stream import CASES, digest, words_stream
from golden.topology_stream import GOLDEN as GOLDEN_FILE

from keysplit.topology_model import route_dataset, run_model
from spark_replay.ingest import SubStream
from spark_replay.model_task import ModelKeyIds as KeyTable
from spark_replay.model_task import estimate_task, model_slices

GOLDEN = json.loads(GOLDEN_FILE.read_text())


def assert_like(got: dict, expected: dict) -> None:
    """The summary of a run without the lines' times: the percentiles at most one histogram bin above, the mean
    summed in another order, everything else the same."""
    assert got["latency_mean_ms"] == pytest.approx(expected["latency_mean_ms"], rel=1e-12)
    for name in ("latency_p50_ms", "latency_p95_ms", "latency_p99_ms"):
        assert expected[name] <= got[name] <= expected[name] * (1 + 2.0**-14), name
    rest = {k: v for k, v in expected.items() if not k.startswith(("latency_p", "latency_mean"))}
    assert {k: got[k] for k in rest} == rest


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("chunk", [1, 7, 500, 10**9])
def test_streamed_model_gives_its_golden_summaries_in_chunks_of_any_size(case, chunk):
    params, lines, skew = CASES[case]
    starts, workers, keys = words_stream(lines, params.workers, skew=skew)
    expected = GOLDEN[case]
    kept = run_model(params, starts, workers, keys, chunk_lines=chunk)
    assert digest(kept.emit, kept.done, kept.counter_busy) == expected["times"]  # every line, to the bit
    assert kept.timeouts == expected["timeouts"]
    assert kept.summary() == expected["summary"]
    if case == "overload":
        assert kept.timeouts > 0
    # the Spark task keeps no line's times: the same numbers but the percentiles, one histogram bin above at most
    # (and the mean, summed in another order); the key ids are any numbering that keeps equal keys equal
    relabel = np.random.default_rng(9).permutation(int(keys.max()) + 1)
    streamed = run_model(params, starts, workers, relabel[keys], keys % params.aggregators, chunk_lines=chunk,
                        keep_lines=False).summary()
    assert_like(streamed, expected["summary"])


@pytest.mark.parametrize("batch", [1, 8])
def test_the_spark_task_merges_sources_in_sequence_order_whatever_order_pieces_come_in(batch):
    params, lines, _ = CASES["closed"]
    sources = 3
    params = replace(params, sources=sources, batch=batch, batch_ms=5.0)
    starts, workers, keys = words_stream(lines, params.workers, seed=5)
    vocab = [f"k{i}" for i in range(int(keys.max()) + 1)]
    table = KeyTable(params.aggregators)
    table.lookup(vocab)
    aggs = table._agg  # the runner's fields hash of every key
    # records dealt round-robin to 3 sources (the routers, whose batches the model keeps apart), cut into chunks of
    # about 1000 messages, one piece per (chunk, source); the empty records are dealt too, as the spout deals them
    n_lines = len(starts) - 1
    record_source = (np.arange(n_lines) + 1) % sources  # not the non-empty lines' round-robin: the task must carry it
    expected = run_model(params, starts, workers, keys, aggs[keys], record_source).summary()
    bounds = [0]
    while bounds[-1] < n_lines:
        bounds.append(int(np.searchsorted(starts, starts[bounds[-1]] + 1000)))
        bounds[-1] = min(max(bounds[-1], bounds[-2] + 1), n_lines)
    pieces = []
    for n, (a, b) in enumerate(itertools.pairwise(bounds)):
        for s in range(sources):
            recs = [i for i in range(a, b) if record_source[i] == s]
            idx = np.concatenate([np.arange(starts[i], starts[i + 1]) for i in recs] or [np.zeros(0, int)])
            used, local = np.unique(keys[idx], return_inverse=True)
            order = np.random.default_rng(n).permutation(len(used))  # any order of the piece's vocabulary
            sub = SubStream(s, idx.astype(np.int64), order[local.reshape(-1)].astype(np.int32),
                            [vocab[k] for k in used[np.argsort(order)].tolist()], None, None,
                            rec_len=np.diff(starts)[recs].astype(np.int32))
            pieces += [((n, s, q), part) for q, part in enumerate(model_slices(sub, workers[idx]))]
    rng = np.random.default_rng(2)
    shuffled = [pieces[i] for i in rng.permutation(len(pieces))]
    got = estimate_task(iter(shuffled), len(bounds) - 1, list(range(sources)), params)
    assert_like(got, expected)


@pytest.mark.parametrize("groupings", [["kg", "pkg:load=global"]])
def test_replay_estimate_equals_the_model_over_the_simulators_routing(spark, tmp_path, groupings):
    from keysplit.topology_model import model_params
    from spark_replay.job import ReplayOptions, run_replay

    path = tmp_path / "t.txt"
    rng = np.random.default_rng(4)
    words = [f"w{i}" for i in range(80)]
    with open(path, "w") as fh:
        for n in range(3000):
            fh.write(" ".join(rng.choice(words, int(rng.integers(0, 7)))) + ("\n" if n % 50 else "\n\n"))
    opts = ReplayOptions(dataset=f"text:{path}", groupings=groupings, workers=4, sources=3, partitions=3,
                         out=str(tmp_path / "out"), cpu_delay_ms=1.0, max_pending=50)
    summary = run_replay(spark, opts)
    for run in summary["runs"]:
        spec = next(g for g in groupings if run["grouping"].startswith(g.split(":")[0]) and
                    ("global" in run["grouping"]) == ("global" in g))
        arrays = route_dataset(f"text:{path}", spec, 4, 3, opts.aggregators)
        assert_like(run, run_model(model_params(opts), *arrays).summary())
