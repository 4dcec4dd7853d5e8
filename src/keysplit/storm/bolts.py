"""The word-count / top-k bolts: thin streamparse wrappers over ``routing`` and ``counting``.

router --fields(route) or direct--> counter --fields(word)--> aggregator --global--> topk (the router's two
streams and ``keysplit.route``: storm/router.py). Counters and aggregators hold
their input tuples until the tick that flushes what those tuples contributed, then emit anchored to them
and ack them (DESIGN.md, data flow): a crash anywhere loses nothing, the spout replays the line.

Every word travels with its occurrence ``(line, position)``; with ``keysplit.delivery=exactly-once`` (the
default) the aggregators commit counts with them so that a replayed line adds nothing twice
(storm/exactly_once.py). With ``at-least-once`` the fields are still sent (Storm checks a tuple's width
against its declared fields) and the aggregators add the counts as they come.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter

from streamparse import Bolt, Stream

from keysplit.redis_client import client
from keysplit.storm import quiet_exit
from keysplit.storm.counting import PartialCounts, Totals, decode_occurrences, encode_occurrences, merge_top
from keysplit.storm.exactly_once import Dedup
from keysplit.storm.keys import RunKeys
from keysplit.storm.router import GroupingChannel, Router, component_tasks
from keysplit.storm.settings import WordCountSettings

#: Component names in the topology (the router needs the counter's to find its task ids).
SPOUT, ROUTER, COUNTER, AGGREGATOR, TOPK = "feed", "router", "counter", "aggregator", "topk"
#: The router's streams: (word, route) fields-grouped on route, and (word) emitted directly (keysplit.route).
WORDS_STREAM, DIRECT_STREAM = "words", "words_direct"
ROUTE_FIELD = "route"

quiet_exit.install()  # a normal shutdown leaves no traceback in the task's stderr


def _setup(bolt: Bolt, conf, context) -> tuple[WordCountSettings, RunKeys, int]:
    settings = WordCountSettings.from_conf(conf)
    index = component_tasks(context, bolt.component_name).index(int(bolt.task_id))
    return settings, RunKeys(settings.run_id), index


def received_configuration(conf, context) -> dict:
    """What the topology runs with, as a task sees it: the ``keysplit.*`` settings of its configuration (the
    password's file or variable name aside), Storm's settings the run depends on, and the task counts of the
    context. Every task of a topology receives the same configuration and context."""
    settings = WordCountSettings.from_conf(conf)
    keep = {k: v for k, v in settings.conf().items()
            if k not in ("keysplit.redis_url", "keysplit.redis_password_file", "keysplit.redis_password_env")}
    tasks = {name: len(component_tasks(context, name)) for name in (SPOUT, ROUTER, COUNTER, AGGREGATOR)}
    return {**keep, "sources": tasks[ROUTER], "counter_tasks": tasks[COUNTER], "aggregators": tasks[AGGREGATOR],
            "spouts": tasks[SPOUT], "max_pending": conf.get("topology.max.spout.pending"),
            "message_timeout_secs": conf.get("topology.message.timeout.secs"),
            "worker_processes": conf.get("topology.workers")}


def record_start(conn, keys: RunKeys, component: str, index: int, conf=None, context=None) -> None:
    """Count this process start of task ``component[index]``: on a cluster, where the runner's worker and task
    counters do not exist, the starts beyond one per task are what `--collect` can report as restarts. The
    first task to start also records the configuration it received (:func:`received_configuration`), so the
    run's summary says what ran, whatever the run's record said when its feed was loaded."""
    conn.hincrby(keys.starts, f"{component}:{index}", 1)
    if conf is not None:
        conn.set(keys.received, json.dumps(received_configuration(conf, context)), nx=True)


class RouterBolt(Bolt):
    """The paper's source: emits each word of a record to the counter task its grouping chooses."""

    outputs = [Stream(fields=["word", ROUTE_FIELD, "line", "position"], name=WORDS_STREAM),
               Stream(fields=["word", "line", "position"], name=DIRECT_STREAM, direct=True)]

    def initialize(self, conf, context):
        settings, keys, index = _setup(self, conf, context)
        conn = client(settings.redis_connect_url())
        record_start(conn, keys, self.component_name, index, conf, context)
        workers = settings.workers

        def probe() -> list[int]:  # PKG's periodic probing (L P_T): the counters' true loads
            loads = conn.hgetall(keys.loads)
            return [int(loads.get(str(i), 0)) for i in range(workers)]

        def frequencies() -> Counter:  # for offline groupings: exact frequencies stored with the feed
            return Counter({w: int(c) for w, c in conn.hgetall(keys.frequencies).items()})

        capacities = [1000.0 / settings.cpu_delay_ms] * workers if settings.cpu_delay_ms > 0 else None
        self.router = Router(
            settings.grouping, workers, index, len(component_tasks(context, self.component_name)),
            component_tasks(context, COUNTER), probe=probe, capacities=capacities, frequencies=frequencies,
            channel=GroupingChannel(conn, keys, poll_secs=settings.stats_secs), mode=settings.route,
        )
        self.direct = settings.route == "direct"

    def process(self, tup):
        record, line = tup.values[:2]
        routed = self.router.route(record, self.router.elapsed())
        if self.direct:
            for position, (word, task) in enumerate(routed):
                self.emit([word, line, position], stream=DIRECT_STREAM, direct_task=task)
        else:  # Storm's fields grouping on route delivers each word to the chosen task
            for position, (word, route) in enumerate(routed):
                self.emit([word, route, line, position], stream=WORDS_STREAM, need_task_ids=False)


class CounterBolt(Bolt):
    """The paper's worker: partial counts with an optional per-tuple CPU delay, flushed every tick.

    With ``auto_ack`` off pystorm acks nothing, ticks included, so every ``process_tick`` here acks its tick
    (the router and top-k bolts keep pystorm's auto-ack, which acks ticks too; acking twice would kill the
    worker: ShellBolt.handleAck throws on an unknown id)."""

    outputs = [Stream(fields=["word", "count", "occurrences"])]
    auto_ack = False
    auto_anchor = False

    def initialize(self, conf, context):
        settings, self.keys, self.index = _setup(self, conf, context)
        self.conn = client(settings.redis_connect_url())
        record_start(self.conn, self.keys, self.component_name, self.index, conf, context)
        self.exactly_once = settings.exactly_once
        self.delay = settings.cpu_delay_ms / 1000.0
        self.partial = PartialCounts()
        self.busy = 0.0
        self.reported = 0
        self.last_report = time.time()
        self.first_tuple: float | None = None  # when the first word reached this task (the run's first hop)

    def process(self, tup):
        if self.first_tuple is None:
            self.first_tuple = time.time()
        started = time.perf_counter()
        if self.delay:
            time.sleep(self.delay)  # the paper's CPU delay, as a sleep so many workers fit on few cores
        values = tup.values
        self.partial.add(values[0], tup.id, (values[-2], values[-1]) if self.exactly_once else None)
        self.busy += time.perf_counter() - started

    def process_tick(self, tup):
        flushed = self.partial.drain()
        self.report()  # before the acks, so a run that sees every line acked also sees these loads
        for word, count, covered, occurrences in flushed:
            self.emit([word, count, encode_occurrences(occurrences)], anchors=covered)
        for _, _, covered, _ in flushed:
            for tup_id in covered:
                self.ack(tup_id)
        self.ack(tup)  # the tick too: Storm's ShellBolt holds every input until it is acked or failed

    def report(self):
        now = time.time()
        delta = self.partial.processed - self.reported
        pipe = self.conn.pipeline(transaction=False)
        if delta:
            pipe.hincrby(self.keys.loads, str(self.index), delta)
        if self.first_tuple is not None:  # kept from the task's first start: a restart does not move it
            pipe.hsetnx(self.keys.counter(self.index), "first_tuple", self.first_tuple)
        new_keys = self.partial.drain_new_keys()
        if new_keys:
            pipe.sadd(self.keys.keys(self.index), *new_keys)
        pipe.hset(self.keys.counter(self.index), mapping={
            "processed": self.partial.processed,
            "distinct": self.partial.distinct,
            "rate": delta / max(now - self.last_report, 1e-9),
            "busy_s": self.busy,
            "task": self.task_id,
            "pid": os.getpid(),
        })
        pipe.execute()
        self.reported = self.partial.processed
        self.last_report = now


class AggregatorBolt(Bolt):
    """Merges partial counts (fields grouping on the word); every tick commits them to Redis (exactly-once: only
    occurrences not committed before, storm/exactly_once.py; at-least-once: HINCRBY), sends its local top-k to
    the top-k bolt anchored to the partial counts it covers, then acks them."""

    outputs = [Stream(fields=["aggregator", "top"])]
    auto_ack = False
    auto_anchor = False

    def initialize(self, conf, context):
        settings, self.keys, self.index = _setup(self, conf, context)
        self.k = settings.top_k
        self.conn = client(settings.redis_connect_url())
        record_start(self.conn, self.keys, self.component_name, self.index, conf, context)
        self.dedup = Dedup(self.conn, self.keys) if settings.exactly_once else None
        # after a restart, continue from the stored totals (words of other aggregators only add
        # candidates with their true counts at this moment; the global merge keeps the largest)
        self.totals = Totals({w: int(c) for w, c in self.conn.hgetall(self.keys.counts).items()})
        self.pending: list = []
        self.batch: dict[str, list[int]] = {}  # exactly-once: word -> occurrences since the last commit

    def process(self, tup):
        word, count, occurrences = tup.values
        if self.dedup is None:
            self.totals.add(word, int(count))
        else:
            self.batch.setdefault(word, []).extend(decode_occurrences(occurrences))
        self.pending.append(tup.id)

    def process_tick(self, tup):
        self.ack(tup)  # the tick too: Storm's ShellBolt holds every input until it is acked or failed
        if not self.pending:
            return
        partials, started = len(self.pending), time.perf_counter()
        self.commit()
        # what the tick cost per partial count (merge, commit, acks): the replay's model calibrates on it
        pipe = self.conn.pipeline(transaction=False)
        pipe.hincrby(self.keys.aggregator(self.index), "partials", partials)
        pipe.hincrbyfloat(self.keys.aggregator(self.index), "busy_s", time.perf_counter() - started)
        pipe.execute()

    def commit(self):
        """Commit the partial counts since the last tick, send the local top-k, ack them."""
        if self.dedup is None:
            increments = self.totals.drain_increments()
            pipe = self.conn.pipeline(transaction=True)
            for word, count in increments.items():
                pipe.hincrby(self.keys.counts, word, count)
            pipe.execute()
        else:
            batch = list(self.batch.items())
            for (word, _), total in zip(batch, self.dedup.commit(batch)):
                self.totals.set(word, int(total))
            self.batch = {}
        self.emit([self.index, json.dumps(self.totals.top(self.k))], anchors=self.pending)
        for tup_id in self.pending:
            self.ack(tup_id)
        self.pending = []


class TopKBolt(Bolt):
    """The global top-k: merges the aggregators' local lists and writes the result to Redis."""

    outputs = []

    def initialize(self, conf, context):
        settings, self.keys, index = _setup(self, conf, context)
        self.k = settings.top_k
        self.conn = client(settings.redis_connect_url())
        record_start(self.conn, self.keys, self.component_name, index, conf, context)
        stored = self.conn.hgetall(self.keys.topk_meta)
        self.lists = {int(k[5:]): json.loads(v) for k, v in stored.items() if k.startswith("list:")}

    def process(self, tup):
        index, top = tup.values
        self.lists[int(index)] = json.loads(top)
        merged = merge_top(self.lists.values(), self.k)
        pipe = self.conn.pipeline(transaction=True)
        pipe.set(self.keys.topk, json.dumps(merged))
        pipe.hset(self.keys.topk_meta, mapping={f"list:{index}": top, "updated": time.time()})
        pipe.execute()
