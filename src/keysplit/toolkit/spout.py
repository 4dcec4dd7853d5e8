"""``FeedSpout``: keysplit's Redis feed as the source of a user's topology, rows in batches to a router.

``keysplit run TOPOLOGY --dataset csv:views.csv,key=page`` loads the rows into the run's feed (a Redis stream);
each FeedSpout task reads it as the word count's spout does (:class:`keysplit.storm.feed.StreamFeed`: a consumer
group, every row at least once, replays of failed and timed-out rows, a restarted task's own pending rows, the
adaptive window against timeout meltdown) and emits each row's declared fields, as text, plus three of keysplit's:

- :data:`~keysplit.toolkit.contract.RECORD_FIELD`, the row's identity in the feed (its entry and its place in it,
  :func:`~keysplit.toolkit.contract.record_id`): the identity an
  exactly-once merge deduplicates by, so a replayed row adds nothing twice;
- :data:`~keysplit.toolkit.contract.REPLAY_FIELD`, 0 on the row's first emission and 1 when it may have been emitted
  before (:attr:`keysplit.storm.feed.StreamFeed.replaying`): an exactly-once partial folds first emissions into one
  state per key and keeps replays apart (keysplit.toolkit.commit);
- :data:`~keysplit.toolkit.contract.ROUTE_FIELD`, which deals rows to the router subscribed with a fields grouping
  on it (:meth:`keysplit.toolkit.KeyRouter.spec` subscribes so by itself) exactly as ``keysplit simulate`` deals
  records to its sources (``keysplit.stream.source_of``, stored with each row when the feed is loaded).

**Batches.** In front of a :class:`~keysplit.toolkit.KeyRouter` (``inputs=[feed]``) the spout sends the rows dealt
to one router task together, as the word count's spout sends lines: one tuple on
:data:`~keysplit.toolkit.contract.ROWS_STREAM` holding up to ``batch`` rows (each the list of the values above but the
route), whose id is their entry ids. Storm's cost is per tuple (its emit, its acker entry, its ack, the router's read
and ack of it), so one tuple a row paid per row what a batch pays once (``benchmarks/toolkit_speed.py``). A ``next``
never waits for rows to fill a batch: with one entry ready it emits a batch of it. The rows of a batch complete, and
are replayed, together; each keeps its own record and replay flag.

**Entries of many rows.** The feed's own costs are per entry, as the word count's are per line: the spout's read,
decode, window and ack, the commit mark, the completion that forgets it. So under exactly-once, in front of a
router, ``keysplit run`` loads up to :data:`~keysplit.toolkit.contract.DEFAULT_ENTRY_ROWS` rows of one router in one
entry (runs/topology_run.py ``load_rows``), as a line holds words: the entry is the unit of the feed's windows, acks
and replays, and each row its own record (:func:`~keysplit.toolkit.contract.record_id`, the entry and the row's place:
a bit of the entry's commit mark). A batch holds whole entries. Under at-least-once a
batch holds one row unless the spec sets ``batch``: a failure replays every row of its tuple, the merge would count
twice the rows that had gone through, and a row the user's code refuses (a dead letter, toolkit/deadletter.py) would
take its neighbours with it.
For a user's bolt subscribed to the spout (``inputs=[feed]`` on its own spec), or with ``batch=1``, each row is one
tuple on the default stream; a feed sends its rows one way (``keysplit.toolkit.specs.check_topology``).

With ``keysplit.delivery=exactly-once`` (the default) an acked entry also completes its line (storm/exactly_once.py),
which lets the merge forget its commit mark once every entry below it is complete.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from streamparse import Spout

from keysplit.storm import quiet_exit
from keysplit.storm.feed import open_feed
from keysplit.storm.multilang import CoalescedWrites
from keysplit.storm.spout_pacing import RatePacer
from keysplit.storm.streams import LIST_SEPARATOR, component_tasks, decode_ids, route_value
from keysplit.toolkit.contract import FEED_CONFIG, ROUTE_FIELD, ROWS_STREAM, encode_rows, record_id
from keysplit.toolkit.runtime import ToolkitError, connect, subscribers, task_index
from keysplit.toolkit.specs import FeedSpoutSpec, feed_spout_spec, rows_a_tuple

quiet_exit.install()

#: Rows a spout emits for one ``next`` at most, one tuple each (Storm's ShellSpout reads every emit until the
#: ``sync``).
ROWS_PER_NEXT = 64
#: Rows in one batch at most under exactly-once, by default: the word count's lines a ``next`` (storm/spout.py
#: ``LINES_PER_NEXT``).
DEFAULT_FEED_BATCH = 256


class FeedSpout(CoalescedWrites, Spout):
    """Emits the rows of keysplit's feed (module docstring); build it with :meth:`FeedSpout.spec`."""

    outputs: list = []  # declared per spec: the row's fields, the record id and the route value

    @classmethod
    def spec(cls, *, fields: list[str], batch: int | None = None, name: str | None = None, par: int = 1,
             config: Mapping[str, Any] | None = None) -> FeedSpoutSpec:
        """keysplit's Redis feed as a spout: emits those ``fields`` of each row that ``keysplit run --dataset
        csv:FILE,key=COL`` loaded (streamparse's ``Spout.spec``, with the fields the feed holds); to a KeyRouter up
        to ``batch`` rows in a tuple (1: one tuple a row; None, the default: :data:`DEFAULT_FEED_BATCH` under
        exactly-once, one under at-least-once: :func:`keysplit.toolkit.specs.rows_a_tuple`)."""
        return feed_spout_spec(cls, fields=fields, batch=batch, name=name, par=par, config=config)

    def initialize(self, conf, context):
        cfg = conf.get(FEED_CONFIG)
        if not isinstance(cfg, dict):
            raise ToolkitError(f"{self.component_name}: no {FEED_CONFIG} in its configuration; build it with "
                               "FeedSpout.spec(...)")
        settings, keys, conn = connect(conf, context, self.component_name, self.task_id)
        if conn is None:
            raise ToolkitError(f"{self.component_name}: keysplit's feed is in Redis; set keysplit.redis_url "
                               "(keysplit run sets it)")
        self.fields = list(cfg["fields"])
        index, _ = task_index(context, self.component_name, self.task_id)
        # an entry's rows are positions of one commit mark field (at most ENTRY_ROWS_MAX of them, as a line's words)
        self.feed = open_feed(conn, keys, settings, conf, f"{self.component_name}-{index}", index,
                              words=lambda entry: 1)
        # batches when a router takes this spout's rows stream (check_topology: then nothing takes its default one),
        # under exactly-once: a failure replays every row of the tuple, which only the merge's marks count once
        batched = bool(subscribers(context, ROWS_STREAM))
        self.batch = rows_a_tuple(cfg.get("batch"), settings.delivery, DEFAULT_FEED_BATCH) if batched else 1
        stream = ROWS_STREAM if batched else "default"
        # the router this spout deals rows to: the component grouping its stream on the route field, if any
        dealt = [name for name, g in subscribers(context, stream).items()
                 if list(g.get("fields") or []) == [ROUTE_FIELD]]
        routers = len(component_tasks(context, dealt[0])) if len(dealt) == 1 else 1
        self.routes = [route_value(s, routers) for s in range(routers)]
        if batched:
            self.next_tuple = self.next_batches  # type: ignore[method-assign]
        self.sizes: dict[str, int] = {}  # entry id -> its rows, while it is out (the rows acked, storm/feed.py)
        # open loop (keysplit.rate R > 0, `keysplit run --rate`): the P feed spout tasks together emit R rows a
        # second, row i due at i / R, as the word count's spout paces lines (storm/spout_pacing.py)
        spouts = len(component_tasks(context, self.component_name)) or 1
        self.pacer = RatePacer(settings.rate / spouts) if settings.rate else None

    def next_entry(self) -> tuple[str, int, list[list]] | None:
        """The next feed entry if one is ready (and due, open loop): ``(entry id, router task, rows)``, each row the
        values of its fields, its record (contract.record_id: the entry and its place in it) and its replay flag."""
        pacer = self.pacer
        if pacer is not None and not pacer.ready(time.time()):
            return None  # not yet due: the runner's spout wait strategy calls again shortly
        feed = self.feed
        item = feed.next()
        if item is None:  # Storm's spout wait strategy sleeps before asking again
            return None
        entry_id, text, line, source = item
        decoded = json.loads(text)
        fields, replay = self.fields, int(feed.replaying)
        if isinstance(decoded, dict):  # an entry of one row is the row itself, known by the entry's number
            rows = [[*(decoded.get(f) for f in fields), line, replay]]
        else:
            rows = [[*(row.get(f) for f in fields), record_id(line, position), replay]
                    for position, row in enumerate(decoded)]
        if pacer is not None:
            pacer.sent(len(rows), time.time(), forgive=feed.flow.cuts > 0)
        self.sizes[entry_id] = len(rows)
        routers = len(self.routes)
        return entry_id, source if 0 <= source < routers else line % routers, rows

    def next_batches(self):
        """Up to ``batch`` rows per router task, as many as are ready now (each within the feed's windows), one
        tuple per router task in feed order, whole entries each; a router's batch that fills leaves at once."""
        size = self.batch
        held: dict[int, tuple[list, list]] = {}
        emitted = False
        budget = max(size * len(self.routes), ROWS_PER_NEXT)
        while budget > 0:
            item = self.next_entry()
            if item is None:
                break
            entry_id, router, rows = item
            budget -= len(rows)
            batch, ids = held.setdefault(router, ([], []))
            batch.extend(rows)
            ids.append(entry_id)
            if len(batch) >= size:
                self._emit_rows(router, *held.pop(router))
                emitted = True
        for router, (batch, ids) in held.items():
            self._emit_rows(router, batch, ids)
            emitted = True
        if not emitted:
            self.feed.rest()  # nothing emitted and nothing out: rest (storm/feed.py StreamFeed.rest)

    def _emit_rows(self, router: int, rows: list, ids: list[str]) -> None:
        self.emit([encode_rows(rows), self.routes[router]], stream=ROWS_STREAM, tup_id=LIST_SEPARATOR.join(ids))

    def next_tuple(self):
        for emitted in range(ROWS_PER_NEXT):
            item = self.next_entry()
            if item is None:
                if not emitted:
                    self.feed.rest()  # nothing emitted and nothing out: rest (storm/feed.py StreamFeed.rest)
                return
            entry_id, router, rows = item
            if len(rows) != 1:  # the loader packs rows only for a feed that sends batches (runs/topology_run.py)
                raise ToolkitError(f"{self.component_name}: feed entry {entry_id} holds {len(rows)} rows, and this "
                                   "spout sends one tuple a row; load the feed for this topology (keysplit run "
                                   "--load-only with the same topology and delivery)")
            self.emit([*rows[0], self.routes[router]], tup_id=entry_id)

    def ack(self, tup_id):
        for entry_id in decode_ids(tup_id):  # a row's id is its entry id; a batch's, its entries' ids
            self.feed.ack(entry_id, self.sizes.pop(entry_id, 1))

    def fail(self, tup_id):
        for entry_id in decode_ids(tup_id):
            self.feed.fail(entry_id)
