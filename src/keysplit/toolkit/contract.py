"""The toolkit's tuple contract in one place: the fields and streams keysplit adds to a user's topology, how a
key becomes text, which merge task owns a key, and how partial states travel (Storm's ``declareOutputFields``
for the toolkit's components).

- A :class:`~keysplit.toolkit.router.KeyRouter` passes each tuple through with every field unchanged and
  appends :data:`ROUTE_FIELD`, the value that makes Storm's fields grouping deliver it to the task its grouping
  chose (:func:`keysplit.storm.router.route_value`, the route trick that works on every Storm release).
- keysplit's feed spout (:class:`~keysplit.toolkit.spout.FeedSpout`) adds :data:`RECORD_FIELD`, the row's
  identity in the feed (:func:`record_id`: its entry and its place in it): what exactly-once commits deduplicate by
  (storm/exactly_once.py),
  :data:`REPLAY_FIELD`, 0 on a row's first emission (made once per row for the whole run) and 1 when it may have been
  emitted before, and its own :data:`ROUTE_FIELD`, which deals records to the routers as the simulator deals them to
  sources.
- With ``batch`` > 1 a KeyRouter sends the rows bound for one downstream task together, as one tuple on
  :data:`ROWS_STREAM`: the JSON text of the list of the rows' value lists (:func:`encode_rows`) and the route value;
  only a partial aggregate subscribes to it (and unpacks it row by row).
- A partial aggregate flushes, every period, one tuple per merge task on :data:`PARTIALS_STREAM`: the JSON text of
  ``[[key, state], ...]`` (at-least-once) or ``[[key, state, [record, ...]], ...]`` (exactly-once: per key one state
  folding the rows of their first emission, with the records it covers, and one ``[key, one(row), [record]]`` per
  replayed row; toolkit/commit.py), and the route value of the merge task that owns those keys
  (:func:`merge_index`).
- A merge emits ``(key, result)`` on the default stream after each commit, for a user's bolt downstream.

Values are strings and integers only: what Storm's Kryo serialises between workers on every release (a list or
dict value halts a worker, a float is a BigDecimal on Storm 2.6+).
"""

from __future__ import annotations

import json
from typing import Any

# which merge task owns a key: keysplit.hashing's, where the topology model reads it too
from keysplit.hashing import MERGE_SEED, merge_index  # noqa: F401

# the field a KeyRouter appends (and the feed spout emits to deal records to the routers): the word count's own
from keysplit.storm.exactly_once import SPAN
from keysplit.storm.streams import ROUTE_FIELD

#: The feed spout's record identity: :func:`record_id` of the row's feed entry and its place in it (a row alone in
#: its entry, as under at-least-once, is known by the entry's sequence number itself).
RECORD_FIELD = "keysplit_record"
#: Rows one feed entry holds at most: the positions one commit mark holds (storm/exactly_once.py ``SPAN``), so that an
#: entry has one mark field; its rows are acked, replayed and forgotten together.
ENTRY_ROWS_MAX = SPAN
#: Rows a feed entry holds by default when the feed sends a router batches under exactly-once (else one): a line of
#: the word count's datasets holds about ten words, and the spout's costs are per entry (toolkit/spout.py).
DEFAULT_ENTRY_ROWS = 16
_POSITION = 1 << 32  # record ids: the entry's sequence number below 2**32, the row's place in it above
#: The feed spout's replay flag: 0 on a row's first emission, 1 when it may have been emitted before (storm/feed.py
#: ``StreamFeed.replaying``); a partial folds only first emissions together (toolkit/commit.py).
REPLAY_FIELD = "keysplit_replay"
#: Fields no user stream may declare: keysplit adds them.
RESERVED_FIELDS = (ROUTE_FIELD, RECORD_FIELD, REPLAY_FIELD)
#: A batching KeyRouter's stream: many rows for one downstream task in one tuple (the word count's ``batches``
#: carry words and occurrences: another layout, another name).
ROWS_STREAM = "rows"
ROWS_FIELDS = ("rows", ROUTE_FIELD)
#: A partial aggregate's stream to its merge stage.
PARTIALS_STREAM = "partials"
PARTIAL_FIELDS = ("partials", ROUTE_FIELD)
#: The component configuration keys holding a feed spout's and a router's settings (their spec's ``config``).
FEED_CONFIG = "keysplit.feed"
ROUTER_CONFIG = "keysplit.router"
#: A merge's output fields (default stream).
RESULT_FIELDS = ("key", "result")
#: JSON scalar types a key may have.
KEY_TYPES = (str, int, float, bool)


def key_text(key: Any) -> str | None:
    """A key as the groupings hash it: a string as it is, another JSON scalar as its JSON text; None when the
    value cannot be a key (None, a list, a dict).

    >>> key_text("home"), key_text(42), key_text(1.5), key_text(True), key_text(None)
    ('home', '42', '1.5', 'true', None)
    """
    if isinstance(key, str):
        return key
    if isinstance(key, KEY_TYPES):
        return json.dumps(key)
    return None


def record_id(line: int, position: int) -> int:
    """The identity of the row at ``position`` in the feed entry ``line`` (that entry's sequence number): its commit
    mark is bit ``position`` of field ``"line:0"`` (storm/exactly_once.py), and a row alone in its entry is known by
    ``line`` itself.

    >>> record_id(7, 0), record_id(7, 3), split_record(record_id(7, 3))
    (7, 12884901895, (7, 3))
    """
    return line + position * _POSITION


def split_record(record: int) -> tuple[int, int]:
    """``(line, position)`` of a record id (:func:`record_id`)."""
    return record % _POSITION, record // _POSITION


def entry_id(line: int) -> str:
    """The feed's stream id of entry ``line`` (a toolkit feed names its entries so, runs/topology_run.py
    ``load_rows``): where a record's row is found again (a dead letter's place in the dataset)."""
    return f"{line + 1}-0"


def mark_field(record: int) -> tuple[str, int]:
    """Where a record's commit mark is: the field of ``dedup:seen`` and the bit in it (storm/exactly_once.py: bit
    ``position % SPAN`` of field ``"line:segment"``, a row being a word of its entry's line).

    >>> mark_field(7), mark_field(record_id(7, 50))
    (('7:0', 0), ('7:1', 2))
    """
    line, position = record % _POSITION, record // _POSITION
    return f"{line}:{position // SPAN}", position % SPAN


def encode_partials(entries: list) -> str:
    """A flush's partial states for one merge task as tuple text (compact JSON)."""
    return json.dumps(entries, separators=(",", ":"))


def decode_partials(text: str) -> list:
    return json.loads(text)


def encode_rows(rows: list) -> str:
    """A batch's rows (each the list of a tuple's values, the route field left out) as tuple text (compact JSON):
    Kryo writes no list value between workers.

    >>> encode_rows([["0.5", "/home", 7], ["0.6", "/a", 1]])
    '[["0.5","/home",7],["0.6","/a",1]]'
    """
    return json.dumps(rows, separators=(",", ":"))


def decode_rows(text: str) -> list:
    return json.loads(text)
