"""The word-count / top-k bolts: thin streamparse wrappers over ``storm/router.py`` and ``storm/counting.py``.

router --fields(route) or direct--> counter --fields(word)--> aggregator --global--> topk (every stream, its fields
and its encoding: storm/streams.py; ``keysplit.route``: storm/router.py). Counters and aggregators hold
their input tuples until the flush that sends on what those tuples contributed (a counter's every period by its
own clock, or at its tick; an aggregator's as soon as a counter's flush reaches it), then emit anchored to them
and ack them (docs/design/exactly-once.md): a crash anywhere loses nothing, the spout replays the line.

Every word travels with its occurrence ``(line, position)``; with ``keysplit.delivery=exactly-once`` (the
default) the aggregators commit counts with them so that a replayed line adds nothing twice
(storm/exactly_once.py). With ``at-least-once`` the fields are still sent (Storm checks a tuple's width
against its declared fields) and the aggregators add the counts as they come.

With ``keysplit.batch`` B > 1 the router sends the words bound for one counter together, up to B words or
``keysplit.batch_ms`` after the first, in one tuple on the ``batches`` streams (storm/router.py, ``Batcher``); a
counter counts a batch word by word, with the CPU delay for each word, and acks the batch tuple once at its flush.
The flush sends its partial counts the same way: one tuple per aggregator on the ``flushes`` stream (the words
that Storm's fields grouping on the word would send there, their counts and occurrences), not one per word. A
partial count is anchored to every input tuple that carried its words, and a batch carries words of tens of lines:
one tuple per partial count would give each of them the roots of every line of its batches (a hot word's count
covers nearly all lines of the tick), so the acker's work per count grows with the batch size; one tuple per
aggregator is anchored to each batch once.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter

from streamparse import Bolt

from keysplit.redis_client import client
from keysplit.storm import quiet_exit
from keysplit.storm.components import AGGREGATOR, COUNTER, record_start
from keysplit.storm.counting import BatchedCounts, PartialCounts, Totals, merge_top
from keysplit.storm.cpu_delay import DelayClock, tighten_timer_slack
from keysplit.storm.exactly_once import Dedup
from keysplit.storm.flush_clock import FlushClock, start_flush_timer
from keysplit.storm.keys import RunKeys
from keysplit.storm.multilang import CoalescedWrites
from keysplit.storm.router import Batch, Batcher, GroupingChannel, Router
from keysplit.storm.settings import RunSettings
from keysplit.storm.streams import (
    BATCH_DIRECT_STREAM,
    BATCH_STREAM,
    BATCHES,
    BATCHES_DIRECT,
    COUNTS,
    DIRECT_STREAM,
    FLUSH_STREAM,
    FLUSHES,
    TOPS,
    WORDS,
    WORDS_DIRECT,
    WORDS_STREAM,
    component_tasks,
    declare,
    decode_flush,
    decode_lines,
    decode_pairs,
    decode_words,
    encode_occurrences,
    encode_pairs,
    encode_words,
    fields_index,
    route_value,
)

#: Seconds between the ``sync`` messages a counter sends while it works through batches (CounterBolt.count_batch).
ALIVE_SECS = 1.0

quiet_exit.install()  # a normal shutdown leaves no traceback in the task's stderr


def _setup(bolt: Bolt, conf, context) -> tuple[RunSettings, RunKeys, int]:
    settings = RunSettings.from_conf(conf)
    index = component_tasks(context, bolt.component_name).index(int(bolt.task_id))
    return settings, RunKeys(settings.run_id), index


class RouterBolt(CoalescedWrites, Bolt):
    """The paper's source: emits each word of a record to the counter task its grouping chooses, one tuple a word
    (``keysplit.batch`` 1) or in batches per counter (storm/router.py, ``Batcher``).

    Batches: pystorm's auto-ack would ack a line when ``process`` returns, while its words may still wait in a batch
    (and a batch anchored to an acked line kills the worker: ShellBolt's "Anchored onto ... after ack/fail"), so the
    router acks its lines itself, when the batcher frees them. A batch that is not full leaves ``keysplit.batch_ms``
    after its first word from a timer thread, under the batcher's lock (as streamparse's old time-based
    ``BatchingBolt`` did): a multi-lang bolt runs only when a tuple or a heartbeat arrives. The thread only writes
    (emits without task ids, acks), which pystorm serialises under its writer lock; the main thread alone reads."""

    outputs = declare(WORDS, WORDS_DIRECT, BATCHES, BATCHES_DIRECT)

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
        self.batcher: Batcher | None = None
        if settings.batch > 1:
            self.auto_ack = False  # lines are acked when their batches have left (Batcher)
            self.batcher = Batcher(settings.batch, settings.batch_ms / 1000.0, self._emit_batch, self.ack)
            self.lock = threading.Condition()
            threading.Thread(target=self._flusher, name="batch-flusher", daemon=True).start()

    def _emit_batch(self, target: int, batch: Batch) -> None:
        words, occurrences = encode_words(batch.items), encode_pairs(batch.occurrences)
        if self.direct:
            self.emit([words, occurrences], stream=BATCH_DIRECT_STREAM, direct_task=target, anchors=list(batch.inputs),
                      need_task_ids=False)
        else:
            self.emit([words, target, occurrences], stream=BATCH_STREAM, anchors=list(batch.inputs),
                      need_task_ids=False)

    def _flusher(self) -> None:
        """Send each batch that is not full ``batch_ms`` after its first word (the timer thread), and write it at
        once: the main thread may be waiting for input."""
        try:
            self.batcher.serve(self.lock, self.serializer.flush)  # type: ignore[union-attr]
        except Exception:  # a flusher that stops would leave lines unacked until they time out
            self.logger.exception("the batch flusher failed; stopping the task")
            os._exit(1)

    def process(self, tup):
        router, now = self.router, self.router.elapsed()
        lines = [(line, router.route(record, now)) for line, record in decode_lines(*tup.values[:2])]
        if self.batcher is not None:
            with self.lock:
                idle = not self.batcher.open
                self.batcher.add_tuple(tup.id, lines)
                if idle and self.batcher.open:
                    self.lock.notify()  # the flusher waits without a deadline while no batch is open
            return
        for line, routed in lines:
            if self.direct:
                for position, (word, task) in enumerate(routed):
                    self.emit([word, line, position], stream=DIRECT_STREAM, direct_task=task)
            else:  # Storm's fields grouping on route delivers each word to the chosen task
                for position, (word, route) in enumerate(routed):
                    self.emit([word, route, line, position], stream=WORDS_STREAM, need_task_ids=False)


class CounterBolt(CoalescedWrites, Bolt):
    """The paper's worker: partial counts with an optional per-word CPU delay, flushed every period T
    (``keysplit.flush``) at the wall clock's multiples of T, the same instants in every counter (storm/flush_clock.py
    says why: a line waits for its last counter's flush).

    It flushes after any tuple that ends past a multiple of T since its last flush, from its timer thread at each
    multiple (the thread takes the counter's lock, as ``process`` does, and writes what it emitted at once, as the
    router's batch timer does: the main thread may be waiting for input), and at every tick (on Storm at the
    executor's own phase: an earlier flush than the multiple's, never a later one). The tick alone would not do: it
    waits in the task's input queue behind the tuples queued before it (as on Storm, where ``Executor.setupTicks``
    publishes ticks to the executor's receive queue), so a counter with a backlog would flush, and its lines
    complete, only once the whole backlog is counted, every counter at about the same moment; the spout's lines in
    flight then complete in waves, and the counters idle while the spout works through each wave's acks
    (docs/design/batches.md, "The no-delay ceiling"). The timer flushes what an idle counter holds.

    With ``auto_ack`` off pystorm acks nothing, ticks included, so every ``process_tick`` here acks its tick
    (the top-k bolt, and the router without batches, keep pystorm's auto-ack, which acks ticks too; acking twice
    would kill the worker: ShellBolt.handleAck throws on an unknown id)."""

    outputs = declare(COUNTS, FLUSHES)
    auto_ack = False
    auto_anchor = False

    def initialize(self, conf, context):
        settings, self.keys, self.index = _setup(self, conf, context)
        self.conn = client(settings.redis_connect_url())
        record_start(self.conn, self.keys, self.component_name, self.index, conf, context)
        self.batched = settings.batch > 1  # partial counts in one tuple per aggregator (module docstring)
        self.aggregators = aggregators = len(component_tasks(context, AGGREGATOR))
        self.exactly_once = settings.exactly_once
        self.clock = DelayClock(settings.cpu_delay_ms / 1000.0) if settings.cpu_delay_ms else None
        if self.clock is not None:
            tighten_timer_slack()
        # the aggregator Storm's fields grouping on a word picks (storm/streams.py fields_index)
        self.partial = (BatchedCounts(lambda word: fields_index(word, aggregators)) if self.batched
                        else PartialCounts())
        self.busy = 0.0
        self.reported = 0
        self.tuples = 0  # input tuples: one a word, or one a batch
        self.alive = time.perf_counter()  # when this counter last told Storm it is alive (count_batch)
        self.last_report = time.time()
        self.first_tuple: float | None = None  # when the first word reached this task (the run's first hop)
        self.flushes = FlushClock(settings.flush_secs)
        self.lock = threading.Lock()  # the main thread's tuples and ticks, and the flush timer's flushes
        start_flush_timer(self.flushes, self.lock, self.flush, lambda: self.serializer.flush(), self.logger)

    def process(self, tup):
        with self.lock:
            if self.first_tuple is None:
                self.first_tuple = time.time()
            started = time.perf_counter()
            values = tup.values
            self.tuples += 1
            if self.batched:
                self.count_batch(tup.id, decode_words(values[0]), values[-1], started)
            else:
                if self.clock is not None:  # the paper's CPU delay (storm/cpu_delay.py), as a batch of one word
                    self.clock.one(started)
                self.partial.add(values[0], tup.id, (values[-2], values[-1]) if self.exactly_once else None)
            self.busy += time.perf_counter() - started
            if self.flushes.due():
                self.flush()

    def count_batch(self, tup_id, words: list[str], occurrences: str, started: float) -> None:
        """A router's batch, word by word, each with the CPU delay (storm/cpu_delay.py).

        While it sleeps through batches it sends a ``sync`` every :data:`ALIVE_SECS`: Storm's ShellBolt counts any
        message from the subprocess as its heartbeat (apache/storm ``storm-client/src/jvm/org/apache/storm/task/
        ShellBolt.java``, ``BoltReaderRunnable``: ``setHeartbeat()`` for every command, the other commands ignored),
        and kills one silent for ``topology.subprocess.timeout.secs`` (30 s), while its heartbeat request waits in the
        pipe behind the tuples written before it. A pipe of 64 KiB holds about 5,000 batched words (13 bytes each,
        100 one-word tuples), 20 s at 4 ms a word: a hot counter with a backlog would be killed for being busy."""
        clock = self.clock
        if clock is not None:
            clock.begin(started)
            for _ in words:
                now = clock.work()
                if now - self.alive > ALIVE_SECS:
                    self.alive = now
                    self.send_message({"command": "sync"})
            clock.end()
        # counted once the batch's time is spent: only a flush, after the whole tuple, can tell the difference
        self.partial.add_batch(tup_id, words, decode_pairs(occurrences) if self.exactly_once else None)

    def process_tick(self, tup):
        with self.lock:
            self.flush()
            self.ack(tup)  # the tick too: Storm's ShellBolt holds every input until it is acked or failed

    def flush(self) -> None:
        """Send the partial counts since the last flush on, anchored to the inputs they cover, then ack those."""
        self.flushes.flushed()
        flushed = self.partial.drain()
        inputs = self.partial.drain_inputs()
        self.report()  # before the acks, so a run that sees every line acked also sees these loads
        if self.batched:
            self.emit_flushes(flushed)
        else:
            for word, count, covered, occurrences in flushed:
                self.emit([word, count, encode_occurrences(occurrences)], anchors=covered)
        for tup_id in inputs:  # each input once, however many words (and counts) it carried
            self.ack(tup_id)

    def emit_flushes(self, flushed) -> None:
        """The partial counts of a flush as one tuple per aggregator (:meth:`~keysplit.storm.counting.BatchedCounts.
        drain`) with the ``route`` that Storm's fields grouping sends to that aggregator, the one its fields grouping
        on each of these words would pick (:func:`~keysplit.storm.streams.fields_index`); anchored to every input they
        cover."""
        n = self.aggregators
        for a, (words, counts, occurrences, anchors) in flushed.items():
            self.emit([words, counts, occurrences, route_value(a, n)], stream=FLUSH_STREAM, anchors=anchors)

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
            "tuples": self.tuples,
            "distinct": self.partial.distinct,
            "rate": delta / max(now - self.last_report, 1e-9),
            "busy_s": self.busy,
            "task": self.task_id,
            "pid": os.getpid(),
        })
        pipe.execute()
        self.reported = self.partial.processed
        self.last_report = now


class AggregatorBolt(CoalescedWrites, Bolt):
    """Merges partial counts (fields grouping on the word), commits them (exactly-once: only occurrences not committed
    before, storm/exactly_once.py; at-least-once: HINCRBY), sends its top-k anchored to them, then acks them: with
    batches as soon as a counter's flush arrives (one tuple holds all of it: a line waits for one flush, not also for
    this tick; docs/design/batches.md), with ``--batch 1`` (nothing marks a flush's last tuple) at its tick."""

    outputs = declare(TOPS)
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
        self.partials = 0  # partial counts since the last commit (one a tuple, or many in a counter's flush)
        # exactly-once: (word, counter index) -> its occurrences' texts since the last commit (the counter: whose load
        # a committed occurrence is, storm/exactly_once.py COMMIT)
        self.batch: dict[tuple[str, int], list[str]] = {}
        self.counter_of = {task: i for i, task in enumerate(component_tasks(context, COUNTER))}

    def process(self, tup):
        if tup.stream == FLUSH_STREAM:  # a counter's partial counts for this aggregator (CounterBolt.emit_flushes)
            triples = decode_flush(*tup.values[:3])
            for word, count, occ in triples:
                self.add(word, count, occ, tup.task)
            self.partials += len(triples)
        else:
            word, count, occurrences = tup.values
            self.add(word, count, occurrences, tup.task)
            self.partials += 1
        self.pending.append(tup.id)
        if tup.stream == FLUSH_STREAM:  # the whole of one counter's flush for this aggregator: nothing to wait for
            self.commit()

    def add(self, word: str, count, occurrences: str, task: int) -> None:
        if self.dedup is None:
            self.totals.add(word, int(count))
        else:  # text, as it goes into the commit's JSON
            self.batch.setdefault((word, self.counter_of.get(task, -1)), []).append(occurrences)

    def process_tick(self, tup):
        self.ack(tup)  # the tick too: Storm's ShellBolt holds every input until it is acked or failed
        self.commit()

    def commit(self):
        """Commit the partial counts since the last commit (if any came), send the local top-k, ack them."""
        if not self.pending:
            return
        partials, started = self.partials, time.perf_counter()
        self.partials = 0
        if self.dedup is None:
            increments = self.totals.drain_increments()
            pipe = self.conn.pipeline(transaction=True)
            for word, count in increments.items():
                pipe.hincrby(self.keys.counts, word, count)
            pipe.execute()
        else:
            batch = [(word, ",".join(filter(None, texts))) for (word, _), texts in self.batch.items()]
            counters = [counter for _, counter in self.batch]
            for (word, _), total in zip(batch, self.dedup.commit(batch, counters=counters)):
                self.totals.set(word, int(total))
            self.batch = {}
        self.emit([self.index, json.dumps(self.totals.top(self.k))], anchors=self.pending)
        for tup_id in self.pending:
            self.ack(tup_id)
        self.pending = []
        # what a commit cost per partial count (merge, commit, acks): the replay's model calibrates on it
        pipe = self.conn.pipeline(transaction=False)
        pipe.hincrby(self.keys.aggregator(self.index), "partials", partials)
        pipe.hincrbyfloat(self.keys.aggregator(self.index), "busy_s", time.perf_counter() - started)
        pipe.execute()


class TopKBolt(CoalescedWrites, Bolt):
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
