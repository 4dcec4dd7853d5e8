"""The word-count topology's tuple contract, in one place: every stream with its fields, the text encodings of
its values, and how a component addresses a task through Storm's fields grouping (what each component's
``declareOutputFields`` states in Storm, plus what keysplit puts into the values).

::

    feed ──LINES──▶ router ──WORDS | WORDS_DIRECT | BATCHES | BATCHES_DIRECT──▶ counter
    counter ──COUNTS (fields: word) | FLUSHES (fields: keysplit_route)──▶ aggregator ──TOPS (global)──▶ topk

**Values are strings and small integers.** A tuple crossing between workers is written by Kryo, which knows
no JSON library's list or map (apache/storm ``serialization/SerializationFactory.java``; ``conf/defaults.yaml``
has ``topology.fall.back.on.java.serialization: false``), so several lines, words or occurrences travel as one
string each: :func:`encode_lines`, :func:`encode_words`, :func:`encode_pairs`, :func:`encode_occurrences`.

**The route trick.** A component that chose a task itself reaches it through Storm's own fields grouping on a
``keysplit_route`` field (:data:`ROUTE_FIELD`) whose value is :func:`route_value`: it works on every Storm release,
where direct emits from multi-lang components do not (storm/router.py). :func:`fields_index` is the other direction:
the task Storm's fields grouping on a word picks (the counters use it to know which aggregator a word reaches).
Storm's hash is :mod:`keysplit.javahash`'s.

This module imports no component and streamparse only when a component declares its outputs (:func:`declare`),
so the runner, the topology model and a user's own topology can import it cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from keysplit.datasets.base import KEY_SEPARATOR
from keysplit.javahash import choose_task_index

#: The field a fields grouping routes on when the emitter chose the task itself (:func:`route_value`), in every
#: topology (the toolkit's components append it to a user's fields, so it carries keysplit's prefix).
ROUTE_FIELD = "keysplit_route"
#: Storm's name of a component's stream when it names none.
DEFAULT_STREAM = "default"


@dataclass(frozen=True)
class StreamDecl:
    """One output stream: its name, its fields in order (Storm checks a tuple's width against them) and whether
    it is a direct stream (``emitDirect`` only)."""

    name: str
    fields: tuple[str, ...]
    direct: bool = False


#: The spout's lines, several a tuple (:func:`encode_lines`), fields-grouped on the route field to their router.
LINES = StreamDecl(DEFAULT_STREAM, ("records", "lines", ROUTE_FIELD))
#: The router's words, one a tuple with its occurrence: fields-grouped on the route field (``keysplit.route=fields``) or
#: direct (``keysplit.route=direct``).
WORDS = StreamDecl("words", ("word", ROUTE_FIELD, "line", "position"))
WORDS_DIRECT = StreamDecl("words_direct", ("word", "line", "position"), direct=True)
#: The router's batches (``keysplit.batch`` > 1): the words bound for one counter (:func:`encode_words`) and their
#: occurrences (:func:`encode_pairs`).
BATCHES = StreamDecl("batches", ("words", ROUTE_FIELD, "occurrences"))
BATCHES_DIRECT = StreamDecl("batches_direct", ("words", "occurrences"), direct=True)
#: A counter's partial counts one a tuple (no batches), fields-grouped on ``word`` (:func:`encode_occurrences`).
COUNTS = StreamDecl(DEFAULT_STREAM, ("word", "count", "occurrences"))
#: A counter's partial counts with batches: one tuple per aggregator a flush, fields-grouped on the route field.
FLUSHES = StreamDecl("flushes", ("words", "counts", "occurrences", ROUTE_FIELD))
#: An aggregator's local top-k (JSON text), to the one top-k task.
TOPS = StreamDecl(DEFAULT_STREAM, ("aggregator", "top"))

#: Stream names, for emits and subscriptions.
WORDS_STREAM, DIRECT_STREAM = WORDS.name, WORDS_DIRECT.name
BATCH_STREAM, BATCH_DIRECT_STREAM = BATCHES.name, BATCHES_DIRECT.name
FLUSH_STREAM = FLUSHES.name


def declare(*decls: StreamDecl) -> list:
    """A component's ``outputs``: streamparse's ``Stream`` of each declaration (imported here, on a component's
    first use, so that the runner and the model import this module without streamparse).

    >>> [(s.name, s.fields, s.direct) for s in declare(WORDS_DIRECT)]
    [('words_direct', ['word', 'line', 'position'], True)]
    """
    from streamparse import Stream

    return [Stream(fields=list(d.fields), name=d.name, direct=d.direct) for d in decls]


# --------------------------------------------------------------------------------- addressing a task


def component_tasks(context: Mapping, component: str) -> list[int]:
    """Task ids of ``component`` in a multi-lang context, sorted (Storm's fields grouping numbers them so).

    >>> component_tasks({"task->component": {"3": "counter", "1": "router", "5": "counter"}}, "counter")
    [3, 5]
    """
    mapping = context.get("task->component", {})
    return sorted(int(task) for task, name in mapping.items() if name == component)


def route_value(target_index: int, num_tasks: int) -> int:
    """The ``route`` value that Storm's fields grouping on ``route`` sends to sorted task ``target_index``.

    Storm picks ``sorted_tasks[floorMod(Arrays.deepHashCode([route]), num_tasks)]`` (apache/storm
    ``daemon/GrouperFactory.java`` FieldsGrouper, ``utils/TupleUtils.java`` chooseTaskIndex; 1.x's
    ``executor.clj`` ``mk-fields-grouper`` floors the same hash), and ``deepHashCode([v]) = 31 * 1 + v.hashCode()``.
    ``route`` reaches the JVM as JSON: json-simple (Storm < 2.6) parses it as a ``Long``, json-smart (2.6+) as
    an ``Integer``; for ``0 <= v < 2^31`` both ``hashCode``s are ``v`` (``Long``'s is ``(int)(v ^ v >>> 32)`` and
    the high word is 0). So ``v = (target_index - 31) mod num_tasks``, in ``[0, num_tasks)``, gives
    ``floorMod(31 + v, num_tasks) = target_index`` on every release (``tests/local/test_storm_fidelity.py`` checks it
    with both parsers' hashes).

    >>> [route_value(i, 4) for i in range(4)]
    [1, 2, 3, 0]
    """
    if not 0 <= target_index < num_tasks:
        raise ValueError(f"target index {target_index} is not in [0, {num_tasks})")
    return (target_index - 31) % num_tasks


def fields_index(word: str, num_tasks: int) -> int:
    """The index, among a component's sorted tasks, of the task Storm's fields grouping on one string field sends
    ``word`` to (:func:`keysplit.javahash.choose_task_index` of ``[word]``).

    >>> fields_index("a", 2), fields_index("hello", 3)
    (0, 2)
    """
    return choose_task_index((word,), num_tasks)


# ------------------------------------------------------------------------------------------ encodings

#: What joins the records of a spout tuple's lines (a record's keys hold no line break: datasets.clean_key), and what
#: joins their line numbers, and their feed entry ids in the tuple's id.
RECORD_SEPARATOR, LIST_SEPARATOR = "\n", " "


def encode_lines(lines: Sequence[tuple[str, str, int]]) -> tuple[str, str, str]:
    """A spout tuple of several lines ``(entry id, encoded record, line number)``: its ``records`` and ``lines``
    values and its id (storm/spout.py).

    >>> encode_lines([("5-0", "\\ta\\tb", 7), ("5-1", "\\tc", 8)])
    ('\\ta\\tb\\n\\tc', '7 8', '5-0 5-1')
    >>> decode_lines('\\ta\\tb\\n\\tc', '7 8'), decode_ids('5-0 5-1')
    ([(7, '\\ta\\tb'), (8, '\\tc')], ['5-0', '5-1'])
    """
    return (RECORD_SEPARATOR.join(record for _, record, _ in lines),
            LIST_SEPARATOR.join(str(line) for _, _, line in lines),
            LIST_SEPARATOR.join(entry_id for entry_id, _, _ in lines))


def decode_lines(records: str, numbers: str) -> list[tuple[int, str]]:
    """A spout tuple's ``(line number, encoded record)`` pairs (:func:`encode_lines`)."""
    return list(zip(map(int, numbers.split(LIST_SEPARATOR)), records.split(RECORD_SEPARATOR)))


def decode_ids(tup_id: str) -> list[str]:
    """The feed entry ids of a spout tuple's lines, from its id (:func:`encode_lines`)."""
    return tup_id.split(LIST_SEPARATOR)


def encode_words(words: Sequence[str]) -> str:
    """A batch's words as one string tuple value: joined by the dataset's key separator (a tab), which no key
    contains (``keysplit.datasets.clean_key``).

    >>> encode_words(["a", "b c"]) == "a" + KEY_SEPARATOR + "b c", decode_words(encode_words(["a", "b c"]))
    (True, ['a', 'b c'])
    """
    return KEY_SEPARATOR.join(words)


def decode_words(text: str) -> list[str]:
    """The words :func:`encode_words` joined."""
    return text.split(KEY_SEPARATOR)


def occurrence(line: int, position: int) -> str:
    """The text of one occurrence: ``"line,position"``."""
    return f"{line},{position}"


def encode_pairs(pairs: Sequence[str]) -> str:
    """A batch's occurrences, each the text ``"line,position"`` (:func:`occurrence`), as one string tuple value:
    the pairs joined by spaces, so that a counter splits them back into pairs with one ``split`` and a flush joins a
    word's pairs with commas into the text its partial count carries (:func:`encode_occurrences`'s form).

    >>> encode_pairs([occurrence(7, 0), occurrence(7, 2)]), decode_pairs("7,0 7,2")
    ('7,0 7,2', ['7,0', '7,2'])
    """
    return " ".join(pairs)


def decode_pairs(text: str) -> list[str]:
    """The ``"line,position"`` pairs :func:`encode_pairs` joined."""
    return text.split(" ")


def encode_occurrences(occurrences: list[int] | list[str]) -> str:
    """A partial count's occurrences ``[line, position, ...]`` as one string tuple value. A counter fed batches
    builds the same text by joining the pairs the batches carried (``counting.BatchedCounts``), and the aggregator
    puts the text into its commit's JSON (``exactly_once.Dedup.commit``): nobody parses it on the way.

    >>> encode_occurrences([7, 0, 7, 2]), encode_occurrences("7,0,7,2".split(","))
    ('7,0,7,2', '7,0,7,2')
    """
    return ",".join(map(str, occurrences))


def encode_flush(words: Sequence[str], counts: Sequence[int], occurrences: Sequence[str]) -> tuple[str, str, str]:
    """A :data:`FLUSHES` tuple's ``words``, ``counts`` and ``occurrences`` values: the words (:func:`encode_words`),
    their counts joined by commas, and each word's occurrence text (:func:`encode_occurrences`' form) joined by
    ``;`` (empty texts at-least-once).

    >>> encode_flush(["a", "b"], [3, 1], ["7,0,8,0", "7,1"])
    ('a\\tb', '3,1', '7,0,8,0;7,1')
    """
    return encode_words(words), ",".join(map(str, counts)), ";".join(occurrences)


def decode_flush(words: str, counts: str, occurrences: str) -> list[tuple[str, str, str]]:
    """A :data:`FLUSHES` tuple's ``(word, count, occurrences)`` triples, as ``counting.BatchedCounts.drain`` joined
    them (:func:`encode_flush`; the occurrence texts are not parsed).

    >>> decode_flush("a\\tb", "3,1", "7,0,8,0;7,1")
    [('a', '3', '7,0,8,0'), ('b', '1', '7,1')]
    """
    return list(zip(decode_words(words), counts.split(","), occurrences.split(";")))
