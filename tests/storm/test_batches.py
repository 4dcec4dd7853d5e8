"""Batches (docs/design/batches.md): a router's words bound for one counter travel together, anchored to the input
tuples they carry words of, and a counter's partial counts leave per aggregator, anchored to the batches that
carried them; no word is lost, doubled or reordered on the way, and no tuple is acked before the last emit anchored
to it.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from keysplit.storm.counting import BatchedCounts
from keysplit.storm.router import Batcher
from keysplit.storm.streams import decode_words, occurrence


def test_batches_carry_every_word_once_in_stream_order_and_free_a_tuple_after_its_last_batch():
    """The router's batches (storm/router.py Batcher): each word reaches its target once, in the order routed; a
    batch never exceeds its size; it is anchored to every input tuple (of one to three lines) it carries a word of,
    and a tuple is acked only once every batch carrying one of its words was emitted (never before one of them: that
    emit would be anchored to an acked tuple), and exactly once."""
    rng = random.Random(3)
    clock = [0.0]
    sent, acked = [], []

    def emit(target, batch):
        assert 1 <= len(batch.items) <= 5
        assert not set(batch.inputs) & set(acked), "a batch anchored to a tuple already acked"
        sent.append((target, list(batch.items), list(batch.occurrences), list(batch.inputs)))

    batcher = Batcher(5, 0.05, emit, acked.append, clock=lambda: clock[0])
    routed_per_target: dict[int, list] = {}
    tuple_of: dict[int, str] = {}  # line -> the input tuple that carried it
    line = 0
    for k in range(200):
        lines = []
        for _ in range(rng.randint(1, 3)):
            words = [(f"w{rng.randint(0, 30)}", rng.randint(0, 3)) for _ in range(rng.randint(0, 9))]
            for position, (word, target) in enumerate(words):
                routed_per_target.setdefault(target, []).append((word, line, position))
            lines.append((line, words))
            tuple_of[line] = f"t{k}"
            line += 1
        batcher.add_tuple(f"t{k}", lines)
        clock[0] += rng.choice([0.0, 0.001, 0.03])
        batcher.flush_due()
        due = batcher.next_due()
        assert due is None or due > clock[0]
    batcher.flush_all()
    assert batcher.next_due() is None and not batcher.refs
    got: dict[int, list] = {}
    for target, words, occ, anchors in sent:
        pairs = [tuple(map(int, pair.split(","))) for pair in occ]  # each word's "line,position"
        got.setdefault(target, []).extend((word, n, position) for word, (n, position) in zip(words, pairs))
        assert anchors == list(dict.fromkeys(tuple_of[n] for n, _ in pairs)), "anchored to the tuples it carries"
    assert got == routed_per_target  # every word once, at its target, in routed order
    assert sorted(acked) == sorted(f"t{k}" for k in range(200)), "every tuple acked exactly once"
    assert batcher.batches == len(sent) and batcher.items == sum(len(v) for v in got.values())


def test_a_batch_leaves_once_full_or_when_its_first_word_is_batch_ms_old():
    clock = [10.0]
    sent, acked = [], []
    b = Batcher(3, 0.02, lambda t, batch: sent.append((t, list(batch.items))), acked.append, clock=lambda: clock[0])
    b.add_tuple("a", [(0, [("x", 1)])])
    clock[0] = 10.015
    b.add_tuple("b", [(1, [("y", 1), ("z", 2)])])
    assert sent == [] and b.next_due() == pytest.approx(10.02)  # the oldest batch (target 1) sets the deadline
    b.flush_due(10.019)
    assert sent == []
    b.flush_due(10.02)
    assert sent == [(1, ["x", "y"])] and acked == ["a"]  # line b still has a word waiting for target 2
    assert b.next_due() == pytest.approx(10.035)
    b.add_tuple("c", [(2, [("u", 2)]), (3, [("v", 2)])])  # two lines; target 2 fills: it leaves
    assert sent[-1] == (2, ["z", "u", "v"]) and acked == ["a", "b", "c"] and b.next_due() is None
    b.add_tuple("d", [(4, [])])  # a line without words is acked at once
    assert acked[-1] == "d"


def test_a_counter_flush_sends_each_aggregator_its_words_anchored_to_the_batches_that_carried_them():
    """A counter's partial counts with batches (counting.BatchedCounts): per aggregator one tuple holding every word
    the fields grouping sends there, each counted once per occurrence with its occurrences as the batches carried
    them, anchored to each batch with one of those words once; every batch acked once."""
    rng = random.Random(5)
    aggregator_of = {f"w{i}": i % 3 for i in range(40)}
    counts = BatchedCounts(aggregator_of.__getitem__)
    batches = {f"t{b}": [f"w{int(rng.paretovariate(1.0)) % 40}" for _ in range(rng.randint(1, 12))] for b in range(60)}
    for b, (tup, words) in enumerate(batches.items()):
        counts.add_batch(tup, words, [occurrence(b, position) for position in range(len(words))])
        if b == 29:  # a flush halfway
            first = counts.drain()
            assert counts.drain_inputs() == [f"t{i}" for i in range(30)]
    flushed = [first, counts.drain()]
    assert counts.drain_inputs() == [f"t{i}" for i in range(30, 60)]
    seen = Counter()
    for part, flush in enumerate(flushed):
        for a, (words, numbers, occurrences, anchors) in flush.items():
            for word, n, occ in zip(decode_words(words), numbers.split(","), occurrences.split(";")):
                assert aggregator_of[word] == a and int(n) == len(occ.split(",")) // 2
                seen.update((word, pair) for pair in zip(occ.split(",")[::2], occ.split(",")[1::2]))
            carried = [t for t in list(batches)[30 * part:30 * part + 30]
                       if any(aggregator_of[w] == a for w in batches[t])]
            assert anchors == carried  # every batch with a word of this aggregator, once, in order
    expected = Counter((w, (str(b), str(p))) for b, words in enumerate(batches.values()) for p, w in enumerate(words))
    assert seen == expected  # every occurrence once, under its word
    assert counts.processed == sum(map(len, batches.values()))
    assert counts.distinct == len({w for words in batches.values() for w in words})
