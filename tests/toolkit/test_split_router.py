"""A router that takes the keys of a row (``KeyRouter.spec(split=...)``): a text file's lines through keysplit's feed,
each line split into its words and each word routed, in order, in the one hop, as the word count's router does. The
counts are the words' own (counted here with ``str.split``), the loads are ``keysplit simulate``'s on the same file,
and a killed router loses nothing and counts nothing twice: each word keeps its place in its line as its identity."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from keysplit.datasets import open_dataset
from keysplit.runs import redis_server
from keysplit.runs.topology_file import load_topology
from keysplit.runs.topology_run import TopologyRunOptions, read_results, run_topology
from keysplit.simulator import simulate
from keysplit.toolkit import KeyRouter, TopologyBuildError

LINES = 1500

TOPOLOGY = '''
from keysplit.toolkit import Aggregate, Count, FeedSpout, KeyRouter, Topology


class WordCount(Topology):
    lines = FeedSpout.spec(fields=["keys"])
    words = KeyRouter.spec(inputs=[lines], key="keys", split="\\t", grouping="pkg:d=2", par=2)
    counts = Aggregate.partial(inputs=words, accumulator=Count(), period=1.0, par=4)
    total = Aggregate.merge(inputs=counts, top=5, par=2)
'''


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    """Lines of 1 to 60 Zipf-like words (some longer than a commit mark's 48 places), and each word's count."""
    rng = random.Random(5)
    vocabulary = [f"w{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(300)]
    weights = [1.0 / (i + 1) for i in range(len(vocabulary))]
    lines = [" ".join(rng.choices(vocabulary, weights, k=rng.choice([1, 5, 10, 12, 60]))) for _ in range(LINES)]
    path = tmp_path_factory.mktemp("text") / "lines.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, Counter(word for line in lines for word in line.split())


def run(tmp_path, path, redis_url, **options):
    topology = tmp_path / "line_words.py"  # not wordcount.py: streamparse imports a topology by its file name
    topology.write_text(TOPOLOGY, encoding="utf-8")
    opts = TopologyRunOptions(dataset=open_dataset(f"text:{path}"), worker_processes=2, timeout=300, **options)
    conn = redis_server.connect(redis_url)
    return conn, run_topology(load_topology(str(topology)), opts, conn, redis_url)


def test_a_line_split_into_its_words_counts_each_word_once_with_simulates_loads(home, redis_url, tmp_path, text):
    path, counts = text
    conn, summary = run(tmp_path, path, redis_url)
    assert read_results(conn, summary["run_id"], "total") == dict(counts)
    assert summary["totals"] == "exact" and summary["merges"]["total"]["committed"] == sum(counts.values())
    assert summary["acked"] == summary["rows"] == LINES
    reference = simulate(open_dataset(f"text:{path}"), "pkg:d=2", 4, 2, engine="reference")
    assert summary["routers"]["words"]["loads"] == reference.loads


@pytest.mark.parametrize("victim", ["words:1@0.4", "counts:2@0.5"])
def test_a_killed_task_loses_no_word_and_counts_none_twice(home, redis_url, tmp_path, text, victim):
    path, counts = text
    # a few lines in flight at a time, so that the kill comes while most are still to be sent
    conn, summary = run(tmp_path, path, redis_url, message_timeout=4, max_pending=40, kills=(victim,))
    assert len(summary["kills"]) == 1 and summary["task_restarts"] >= 1 and summary["replayed"] > 0
    assert read_results(conn, summary["run_id"], "total") == dict(counts)
    assert summary["totals"] == "exact"


def test_split_must_be_text():
    from keysplit.toolkit import FeedSpout

    feed = FeedSpout.spec(fields=["keys"])
    with pytest.raises(TopologyBuildError, match="split must be the text between two keys"):
        KeyRouter.spec(inputs=[feed], key="keys", split="", grouping="kg")
