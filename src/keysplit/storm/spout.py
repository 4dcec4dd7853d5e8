"""RedisStreamSpout: the topology's source of dataset records (a thin wrapper over :class:`StreamFeed`)."""

from __future__ import annotations

import time

from streamparse import Spout

from keysplit.datasets import decode_record
from keysplit.redis_client import client
from keysplit.storm import quiet_exit
from keysplit.storm.components import ROUTER, record_start
from keysplit.storm.feed import open_feed
from keysplit.storm.keys import RunKeys
from keysplit.storm.multilang import CoalescedWrites
from keysplit.storm.settings import RunSettings
from keysplit.storm.spout_pacing import RatePacer
from keysplit.storm.streams import LINES, component_tasks, declare, decode_ids, encode_lines, route_value

quiet_exit.install()  # a normal shutdown leaves no traceback in the task's stderr

#: Lines a spout emits for one ``next`` at most (fewer when its windows or the feed hold no more). Storm's ShellSpout
#: forwards each tuple's ack to the subprocess and waits for its ``sync`` (apache/storm ``storm-client/src/jvm/org/
#: apache/storm/spout/ShellSpout.java``, ``ack`` -> ``querySubprocess``), one round trip a tuple, and a ``next`` emits
#: one tuple per router: at no delay on Storm 2.8.8, 256 lines completed 195,000 words/s where 64 did 175,000
#: (W = 8, 4 routers; docs/benchmarks/storm-cluster.md).
LINES_PER_NEXT = 256


class RedisStreamSpout(CoalescedWrites, Spout):
    """Emits feed entries' encoded records and line numbers, several lines in a tuple whose id is their entry ids;
    an ack XACKs each line (and, for exactly-once totals, completes it: storm/exactly_once.py), a fail replays each.

    Several lines a tuple: each ``next`` takes the lines ready now (up to :data:`LINES_PER_NEXT`, each within the
    feed's windows) and emits those bound for one router together, in feed order; it never waits for a line to fill
    a tuple, so a spout with one line ready emits a tuple of one line. Storm's cost is per tuple: its emit, its
    acker entry and ack, the router's read and ack of it, and every batch anchored to it (storm/router.py), so with
    one line a tuple the spout, the router and the acker paid per line what the counters pay per batch
    (docs/design/batches.md, "The no-delay ceiling"). The lines of a tuple complete, and are replayed, together;
    each still keeps its own identity (its line number: exactly-once) and its own place in the feed's windows.

    With ``keysplit.rate`` R > 0 (open loop) the P spout tasks together emit R words per second, line i due at
    (words before it) / R as the replay's ``sequence / rate`` says (storm/spout_pacing.py).

    Within max pending, the spout keeps at most its adaptive window of lines out: additive increase on acks,
    multiplicative decrease on timeouts (storm/window.py), so a topology that cannot complete max pending lines
    within the message timeout settles at a window it can complete instead of timing out every line again and
    again. Open loop too: once a timeout has cut the window, the schedule forgives a lag beyond a tenth of a
    second instead of catching it up in a burst (storm/spout_pacing.py says why).

    Each line goes to the router the simulator deals its record to (``keysplit.stream.source_of``, stored with
    the line when the feed was loaded): the spout emits its ``route`` value and the routers subscribe with a
    fields grouping on it, the trick the counters' stream uses (storm/streams.py ``route_value``). Lines of a feed
    loaded without that field go round-robin by line number."""

    outputs = declare(LINES)

    def initialize(self, conf, context):
        settings = RunSettings.from_conf(conf)
        keys = RunKeys(settings.run_id)
        index = component_tasks(context, self.component_name).index(int(self.task_id))
        conn = client(settings.redis_connect_url())
        record_start(conn, keys, self.component_name, index, conf, context)
        self.feed = open_feed(conn, keys, settings, conf, f"spout-{index}", index)
        self.routers = len(component_tasks(context, ROUTER))
        self.routes = [route_value(s, self.routers) for s in range(self.routers)]
        # open loop: this spout's share of the rate; closed loop (rate 0): no schedule
        self.pacer = RatePacer(settings.rate / settings.spouts) if settings.rate else None

    def next_tuple(self):
        # Several lines per call: Storm's ShellSpout forwards one nextTuple as one ``next`` and then reads the
        # subprocess's emits until its ``sync`` (apache/storm storm-client/src/jvm/org/apache/storm/spout/
        # ShellSpout.java, querySubprocess), so a call may emit many tuples. Each line still passes the feed's
        # adaptive and exactly-once windows (StreamFeed.next), so at most max pending lines are ever out.
        by_router: dict[int, list[tuple[str, str, int]]] = {}
        for _ in range(LINES_PER_NEXT):
            item = self.next_line()
            if item is None:
                break
            entry_id, record, line, router = item
            by_router.setdefault(router, []).append((entry_id, record, line))
        for router, lines in by_router.items():
            records, numbers, tup_id = encode_lines(lines)
            self.emit([records, numbers, self.routes[router]], tup_id=tup_id)
        if not by_router:
            self.feed.rest()  # a run whose lines are all acked: no polling of Storm's 1 ms wait (StreamFeed.rest)

    def next_line(self) -> tuple[str, str, int, int] | None:
        """The next line if one is ready (and due, open loop): ``(entry id, record, line, router)``."""
        if self.pacer is not None and not self.pacer.ready(time.time()):
            return None  # not yet due: the runner's spout wait strategy calls again shortly
        item = self.feed.next()
        if item is None:  # Storm's spout wait strategy sleeps before asking again
            return None
        if self.pacer is not None:
            self.pacer.sent(len(decode_record(item[1])[1]), time.time(), forgive=self.feed.flow.cuts > 0)
        entry_id, record, line, source = item
        return entry_id, record, line, source if 0 <= source < self.routers else line % self.routers

    def ack(self, tup_id):
        for entry_id in decode_ids(tup_id):
            self.feed.ack(entry_id)

    def fail(self, tup_id):
        for entry_id in decode_ids(tup_id):
            self.feed.fail(entry_id)
