"""``FeedSpout``: keysplit's Redis feed as the source of a user's topology, one tuple per row.

``keysplit run TOPOLOGY --dataset csv:views.csv,key=page`` loads the rows into the run's feed (a Redis stream);
each FeedSpout task reads it as the word count's spout does (:class:`keysplit.storm.feed.StreamFeed`: a consumer
group, every row at least once, replays of failed and timed-out rows, a restarted task's own pending rows, the
adaptive window against timeout meltdown) and emits each row's declared fields, as text, plus three of keysplit's:

- :data:`~keysplit.toolkit.contract.RECORD_FIELD`, the row's sequence number in the feed: the identity an
  exactly-once merge deduplicates by, so a replayed row adds nothing twice;
- :data:`~keysplit.toolkit.contract.REPLAY_FIELD`, 0 on the row's first emission and 1 when it may have been emitted
  before (:attr:`keysplit.storm.feed.StreamFeed.replaying`): an exactly-once partial folds first emissions into one
  state per key and keeps replays apart (keysplit.toolkit.commit);
- :data:`~keysplit.toolkit.contract.ROUTE_FIELD`, which deals rows to the router subscribed with a fields grouping
  on it (:meth:`keysplit.toolkit.KeyRouter.spec` subscribes so by itself) exactly as ``keysplit simulate`` deals
  records to its sources (``keysplit.stream.source_of``, stored with each row when the feed is loaded).

With ``keysplit.delivery=exactly-once`` (the default) an acked row also completes its line (storm/exactly_once.py),
which lets the merge forget its commit mark once every row below it is complete.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from streamparse import Spout

from keysplit.storm import quiet_exit
from keysplit.storm.feed import open_feed
from keysplit.storm.multilang import CoalescedWrites
from keysplit.storm.streams import component_tasks, route_value
from keysplit.toolkit.contract import FEED_CONFIG, ROUTE_FIELD
from keysplit.toolkit.runtime import ToolkitError, connect, subscribers, task_index
from keysplit.toolkit.specs import FeedSpoutSpec, feed_spout_spec

quiet_exit.install()

#: Rows a spout emits for one ``next`` at most (Storm's ShellSpout reads every emit until the ``sync``).
ROWS_PER_NEXT = 64


class FeedSpout(CoalescedWrites, Spout):
    """Emits the rows of keysplit's feed (module docstring); build it with :meth:`FeedSpout.spec`."""

    outputs: list = []  # declared per spec: the row's fields, the record id and the route value

    @classmethod
    def spec(cls, *, fields: list[str], name: str | None = None, par: int = 1,
             config: Mapping[str, Any] | None = None) -> FeedSpoutSpec:
        """keysplit's Redis feed as a spout: emits those ``fields`` of each row that ``keysplit run --dataset
        csv:FILE,key=COL`` loaded (streamparse's ``Spout.spec``, with the fields the feed holds)."""
        return feed_spout_spec(cls, fields=fields, name=name, par=par, config=config)

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
        # one record, one key: one commit mark a row
        self.feed = open_feed(conn, keys, settings, conf, f"{self.component_name}-{index}", index, words=lambda row: 1)
        # the router this spout deals rows to: the component grouping its stream on the route field, if any
        dealt = [name for name, g in subscribers(context, "default").items()
                 if list(g.get("fields") or []) == [ROUTE_FIELD]]
        routers = len(component_tasks(context, dealt[0])) if len(dealt) == 1 else 1
        self.routes = [route_value(s, routers) for s in range(routers)]

    def next_tuple(self):
        routes = self.routes
        for emitted in range(ROWS_PER_NEXT):
            item = self.feed.next()
            if item is None:  # Storm's spout wait strategy sleeps before asking again
                if not emitted:
                    self.feed.rest()  # nothing emitted and nothing out: rest (storm/feed.py StreamFeed.rest)
                return
            entry_id, text, line, source = item
            row = json.loads(text)
            values = [row.get(f) for f in self.fields]
            route = routes[source if 0 <= source < len(routes) else line % len(routes)]
            values += [line, int(self.feed.replaying), route]
            self.emit(values, tup_id=entry_id)

    def ack(self, tup_id):
        self.feed.ack(tup_id)

    def fail(self, tup_id):
        self.feed.fail(tup_id)
