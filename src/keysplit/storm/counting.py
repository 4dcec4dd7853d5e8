"""The counting logic of the word-count / top-k topology (PKG paper §6: partial counts aggregated every T).

- :class:`PartialCounts` is a counter ("worker") fed one word a tuple: counts since the last flush, the input
  tuples each count covers (so the flushed count can be anchored to them and they are acked only after it), and
  the memory and load metrics of the worker (:class:`CounterState`, which every counter keeps).
  :class:`BatchedCounts` is the same fed a router's batches, kept as its flush sends them: per aggregator.
- :class:`Totals` is an aggregator: merged totals of the words routed to it by fields grouping, the
  increments not yet written to Redis, and its local top-k.
- :func:`merge_top` is the global top-k: the k largest of the aggregators' local top-k lists. Each word
  reaches exactly one aggregator, so the global top-k is always among the union of the local ones.

What the tuples carry, and how it is written as text, is storm/streams.py's.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable, Iterable, Sequence

from keysplit.storm.streams import encode_flush


def top_items(counts: dict[str, int], k: int) -> list[list]:
    """The ``k`` largest ``[word, count]`` pairs, by count then word (deterministic ties).

    >>> top_items({"a": 3, "b": 5, "c": 3}, 2)
    [['b', 5], ['a', 3]]
    """
    best = heapq.nsmallest(k, counts.items(), key=lambda item: (-item[1], item[0]))
    return [[w, c] for w, c in best]


class CounterState:
    """What every counter task keeps between two flushes, whatever its input: the input tuples since the last flush,
    each once, in order (what the flush acks: acking an id twice is fatal on Storm), the words it has held (its
    memory, DistCost) and the words it processed."""

    def __init__(self) -> None:
        self.inputs: list[Hashable] = []
        self.seen: set[str] = set()
        self.new_keys: list[str] = []
        self.processed = 0

    def drain_inputs(self) -> list[Hashable]:
        """The input tuples since the last call, each once (to ack after the flush's emits)."""
        out, self.inputs = self.inputs, []
        return out

    def drain_new_keys(self) -> list[str]:
        """Words held for the first time since the last call (to add to the worker's key set in Redis)."""
        out, self.new_keys = self.new_keys, []
        return out

    @property
    def distinct(self) -> int:
        return len(self.seen)


class BatchedCounts(CounterState):
    """A counter task's state between two flushes when its input is a router's batches, kept as the flush sends it:
    one tuple per aggregator (storm/bolts.py, ``CounterBolt.emit_flushes``).

    Per word its count and its occurrences as the ``"line,position"`` texts the batches carried (never parsed:
    the aggregator's commit puts them into its script's JSON); per aggregator the input tuples (batches) that
    carried one of its words, each once, in order: the anchors of the flush's tuple to it. ``aggregator_of(word)``
    is the aggregator Storm's fields grouping on the word picks, asked once per word for the task's life.

    >>> c = BatchedCounts(lambda w: 0 if w < "c" else 1)
    >>> c.add_batch("t1", ["a", "b", "a"], ["7,0", "7,1", "8,0"]); c.add_batch("t2", ["c", "a"], ["9,0", "9,1"])
    >>> c.drain()
    {0: ('a\\tb', '3,1', '7,0,8,0,9,1;7,1', ['t1', 't2']), 1: ('c', '1', '9,0', ['t2'])}
    >>> c.drain_inputs(), c.processed, c.distinct, c.drain(), c.drain_inputs()
    (['t1', 't2'], 5, 3, {}, [])
    """

    def __init__(self, aggregator_of: Callable[[str], int]) -> None:
        super().__init__()
        self.aggregator_of = aggregator_of
        self.aggregator: dict[str, int] = {}  # word -> its aggregator, once asked
        self.counts: dict[str, int] = {}
        self.occurrences: dict[str, list[str]] = {}
        self.anchors: dict[int, list[Hashable]] = {}  # aggregator -> the inputs since the last flush with its words

    def add_batch(self, tup: Hashable, words: Sequence[str], pairs: Sequence[str] | None) -> None:
        """Count the words of input tuple ``tup``, with their occurrences ``pairs`` (None: at-least-once, none)."""
        counts, aggregator = self.counts, self.aggregator
        touched = set()
        for word in words:
            n = counts.get(word)
            if n is None:
                counts[word] = 1
                if word not in self.seen:
                    self.seen.add(word)
                    self.new_keys.append(word)
                    aggregator[word] = self.aggregator_of(word)
            else:
                counts[word] = n + 1
            touched.add(aggregator[word])
        if pairs is not None:
            occurrences = self.occurrences
            for word, pair in zip(words, pairs):
                held = occurrences.get(word)
                if held is None:
                    occurrences[word] = [pair]
                else:
                    held.append(pair)
        for a in touched:
            self.anchors.setdefault(a, []).append(tup)
        self.inputs.append(tup)
        self.processed += len(words)

    def drain(self) -> dict[int, tuple[str, str, str, list[Hashable]]]:
        """Per aggregator index: its :data:`~keysplit.storm.streams.FLUSHES` values (:func:`~keysplit.storm.streams.
        encode_flush`: the words, their counts, each word's pairs joined by commas, empty at-least-once) and the
        inputs they cover; resets the counts."""
        groups: dict[int, tuple[list, list, list]] = {}
        aggregator, occurrences = self.aggregator, self.occurrences
        for word, n in self.counts.items():
            group = groups.get(aggregator[word])
            if group is None:
                group = groups[aggregator[word]] = ([], [], [])
            group[0].append(word)
            group[1].append(n)
            group[2].append(",".join(occurrences.get(word, ())))
        out = {a: (*encode_flush(words, counts, occ), self.anchors[a]) for a, (words, counts, occ) in groups.items()}
        self.counts, self.occurrences, self.anchors = {}, {}, {}
        return out


class PartialCounts(CounterState):
    """A counter task's state between two flushes (aggregation period T), one word a tuple (``keysplit.batch`` 1).

    A count covers each input tuple that carried one of its words once, however many of its words the tuple
    carried: the count's anchors. ``inputs`` are the input tuples since the
    last flush, each once, in order: what the flush acks (acking an id twice is fatal on Storm).

    >>> p = PartialCounts()
    >>> for i, w in enumerate(["a", "b", "a"]):
    ...     p.add(w, f"t{i}", (7, i))
    >>> p.add("a", "t3", (8, 0)); p.add("a", "t3", (8, 1)); p.add("c", "t3", (8, 2))
    >>> p.drain()
    [('a', 4, ['t0', 't2', 't3'], [7, 0, 7, 2, 8, 0, 8, 1]), ('b', 1, ['t1'], [7, 1]), ('c', 1, ['t3'], [8, 2])]
    >>> p.drain_inputs()
    ['t0', 't1', 't2', 't3']
    >>> p.processed, p.distinct, p.drain(), p.drain_inputs()
    (6, 3, [], [])
    """

    def __init__(self) -> None:
        super().__init__()
        self.counts: dict[str, int] = {}
        self.covered: dict[str, list[Hashable]] = {}
        self.occurrences: dict[str, list] = {}  # word -> [line, position, ...]

    def add(self, word: str, tup: Hashable, occurrence: tuple[int, int] | None = None) -> None:
        """Count one occurrence of ``word`` carried by input tuple ``tup``; ``occurrence`` is its
        ``(line, position)`` (exactly-once totals: storm/exactly_once.py). The words of one tuple are added one
        after the other, so a tuple that carries a word twice is its last cover already."""
        inputs = self.inputs
        if not inputs or inputs[-1] != tup:
            inputs.append(tup)
        n = self.counts.get(word)
        if n is None:
            self.counts[word] = 1
            self.covered[word] = [tup]
            self.occurrences[word] = list(occurrence) if occurrence else []
            if word not in self.seen:
                self.seen.add(word)
                self.new_keys.append(word)
        else:
            self.counts[word] = n + 1
            covered = self.covered[word]
            if covered[-1] != tup:
                covered.append(tup)
            if occurrence:
                self.occurrences[word] += occurrence
        self.processed += 1

    def drain(self) -> list[tuple[str, int, list[Hashable], list[int]]]:
        """The partial counts since the last flush, each with the tuples and occurrences it covers; resets them."""
        out = [(w, c, self.covered[w], self.occurrences[w]) for w, c in self.counts.items()]
        self.counts = {}
        self.covered = {}
        self.occurrences = {}
        return out


class Totals:
    """An aggregator's merged counts.

    >>> t = Totals()
    >>> t.add("a", 2); t.add("b", 1); t.add("a", 3)
    >>> t.drain_increments()
    {'a': 5, 'b': 1}
    >>> t.top(1), t.words
    ([['a', 5]], 6)
    """

    def __init__(self, initial: dict[str, int] | None = None) -> None:
        self.totals: dict[str, int] = dict(initial or {})
        self.increments: dict[str, int] = {}
        self.words = sum(self.totals.values())

    def add(self, word: str, count: int) -> None:
        self.totals[word] = self.totals.get(word, 0) + count
        self.increments[word] = self.increments.get(word, 0) + count
        self.words += count

    def set(self, word: str, total: int) -> None:
        """``word``'s total is ``total`` (as committed in Redis: exactly-once totals count each word once)."""
        self.words += total - self.totals.get(word, 0)
        self.totals[word] = total

    def drain_increments(self) -> dict[str, int]:
        out, self.increments = self.increments, {}
        return out

    def top(self, k: int) -> list[list]:
        return top_items(self.totals, k)


def merge_top(lists: Iterable[Iterable[Iterable]], k: int) -> list[list]:
    """The global top-k of several local top-k lists (a word listed twice keeps its largest count).

    >>> merge_top([[["a", 5], ["b", 2]], [["c", 4], ["a", 1]]], 2)
    [['a', 5], ['c', 4]]
    """
    best: dict[str, int] = {}
    for items in lists:
        for word, count in items:
            if count > best.get(word, -1):
                best[word] = int(count)
    return top_items(best, k)
