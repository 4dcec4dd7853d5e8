"""The two-stage keyed aggregation a split key needs: partial state per task, merged per key downstream.

``PartialAggregate`` (behind a :class:`~keysplit.toolkit.router.KeyRouter`) adds each record to its key's state
with the accumulator (:mod:`keysplit.toolkit.accumulators`), the rows of a batching router's batch one by one (all of
them, or none when one is refused: the batch is failed whole, so its rows replay), and flushes at the wall clock's
multiples of its period T, the same instants in every partial task, as the word count's counters do
(storm/flush_clock.py): one tuple per merge task on the ``partials`` stream, anchored to the inputs it covers, then
acks them (a batch once, however many merge tasks its rows went to). ``MergeAggregate`` merges the partial states
of the keys it owns (:func:`~keysplit.toolkit.contract.merge_index`) and commits each partial task's flush as it
arrives (one tuple holds all of it, as the word count's aggregator commits a counter's flush), so a row waits for one
flush, T/2 on average; it emits ``(key, result)`` for each key that changed, anchored to the partials it merged, and
acks those. A crash anywhere before the commit loses nothing:
the spout replays the rows whose trees did not complete.

Delivery (docs/design/toolkit.md):

- **at-least-once** (Storm's acking, any source): a row replayed after its contribution was committed is merged
  again. With the run's Redis the merge keeps its results there (and reloads them when it restarts); without it,
  its state lives in the process, and the stream of results downstream is the only output.
- **exactly-once** (keysplit's feed as the source, ``keysplit.delivery=exactly-once``, Redis): partials fold the
  rows of their first emission into one state per key and flush it with the record ids it covers; a replayed row
  travels alone, as its contribution and its record. The merge applies each such entry whole or not at all with a
  compare-and-set that marks its records and writes the new states atomically (:mod:`keysplit.toolkit.commit`): one
  ``merge`` per entry, not per row. The marks are the word count's (``dedup:seen``, a bit a row in its feed entry's
  field, toolkit/commit.py), so the feed's completion of the entry forgets them (storm/exactly_once.py COMPLETE) and
  their memory stays bounded by the window.

Whatever the user's accumulator raises on a row, no task dies of it: the row's tuple is failed and replays, and at its
last attempt the row is set aside as a dead letter that the run's summary names (:mod:`keysplit.toolkit.deadletter`).
"""

from __future__ import annotations

import json
import threading
import time

from streamparse import Bolt, Stream

from keysplit.storm import quiet_exit
from keysplit.storm.flush_clock import FlushClock, start_flush_timer
from keysplit.storm.multilang import CoalescedWrites
from keysplit.storm.streams import component_tasks, route_value
from keysplit.toolkit.accumulators import load_accumulator
from keysplit.toolkit.commit import Entry, ExactlyOnceCommit
from keysplit.toolkit.contract import (
    PARTIAL_FIELDS,
    PARTIALS_STREAM,
    RECORD_FIELD,
    REPLAY_FIELD,
    RESERVED_FIELDS,
    RESULT_FIELDS,
    ROUTE_FIELD,
    ROWS_STREAM,
    decode_partials,
    decode_rows,
    encode_partials,
    key_text,
    merge_index,
)
from keysplit.toolkit.deadletter import DeadLetters, attempts_setting, describe, identity
from keysplit.toolkit.ranking import top_results
from keysplit.toolkit.runtime import ToolkitError, connect, fields_subscriber, input_fields, task_index

quiet_exit.install()

PARTIAL_CONFIG, MERGE_CONFIG = "keysplit.partial", "keysplit.merge"
_EMPTY = object()  # no state yet for a key in this flush (zero() is the user's, and may be any value)


def _config(conf, key: str, component: str) -> dict:
    cfg = conf.get(key)
    if not isinstance(cfg, dict):
        raise ToolkitError(f"{component}: no {key} in its configuration; build it with Aggregate.partial/merge")
    return cfg


class PartialAggregate(CoalescedWrites, Bolt):
    """Partial state per key, flushed every period to the merge task that owns the key (module docstring)."""

    outputs = [Stream(fields=list(PARTIAL_FIELDS), name=PARTIALS_STREAM)]
    auto_ack = False
    auto_anchor = False

    def initialize(self, conf, context):
        me = self.component_name
        cfg = _config(conf, PARTIAL_CONFIG, me)
        settings, keys, self.conn = connect(conf, context, me, self.task_id)
        self.acc = load_accumulator(cfg["accumulator"])
        self.key_field = cfg["key"]
        self.period = float(cfg["period"])
        self.index, _ = task_index(context, me, self.task_id)
        declared = input_fields(context)
        # the fields of the rows each input stream carries: a batch's rows are its router's default stream's values
        # without the route field (contract.ROWS_STREAM)
        self.batched = {(c, s) for c, s in declared if s == ROWS_STREAM}
        self.fields = {(c, s): ([f for f in declared.get((c, "default"), ()) if f != ROUTE_FIELD]
                                if (c, s) in self.batched else fields) for (c, s), fields in declared.items()}
        # rows with an identity (keysplit's feed): entries carry the records they cover, first emissions folded and
        # replays apart, whatever the delivery (a merge isolates a row its user's code refuses by them, deadletter.py)
        self.tracked = all(RECORD_FIELD in f for f in self.fields.values())
        self.dead = DeadLetters(self.conn, keys, me, self.index, attempts_setting(conf),
                                settings.exactly_once and self.tracked)
        merge = fields_subscriber(context, PARTIALS_STREAM, ROUTE_FIELD, me)
        merges = len(component_tasks(context, merge))
        self.routes = [route_value(m, merges) for m in range(merges)]
        self.owner: dict[str, int] = {}  # key -> its merge task (its hash, memoised until the flush)
        self.states: dict[str, object] = {}  # key (JSON text) -> state of the rows since the flush
        # rows from keysplit's feed: key -> the records its state covers (first emissions), and its replays, alone
        self.covers: dict[str, list[int]] = {}
        self.replays: dict[str, list[list]] = {}  # key -> [[contribution, [record]], ...]
        self.entries = 0  # entries flushed: (key, state) per flush, plus one per replayed row
        # per merge task, the inputs its partials cover (a batch may cover several merge tasks: acked once)
        self.inputs: list[dict] = [{} for _ in range(merges)]
        # flushes at the wall clock's multiples of T, the same instants in every partial task (storm/flush_clock.py):
        # a row waits for one flush, T/2 on average, and every merge gets the partial states of a period together
        self.flushes = FlushClock(self.period)
        self.lock = threading.Lock()  # the main thread's tuples and ticks, and the flush timer's flushes
        start_flush_timer(self.flushes, self.lock, self.flush, lambda: self.serializer.flush(), self.logger)
        self.records = 0
        self.tuples = 0  # input tuples: fewer than records behind a batching router
        # the keys this task held since its last flush; every flush adds them to a set in Redis whose size is the
        # keys the task ever held (the state a split key costs), so the task's memory follows the keys of a period,
        # not every key it ever saw
        self.held_key = keys.stage(me, f"held:{self.index}")
        self.held = 0
        self.failed = 0
        self.tasks_key = keys.stage(me, "tasks")
        if self.conn is not None:  # a restarted task goes on counting its records (the keys it holds start again)
            before = self.conn.hget(self.tasks_key, str(self.index))
            if before:
                stored = json.loads(before)
                self.records, self.tuples = int(stored.get("records", 0)), int(stored.get("tuples", 0))
                self.entries = int(stored.get("entries", 0))

    def process(self, tup):
        with self.lock:  # the flush timer flushes too
            self._process(tup)

    def _process(self, tup):
        where = (tup.component, tup.stream)
        fields = self.fields.get(where, ())
        rows = decode_rows(tup.values[0]) if where in self.batched else [tup.values]
        acc, states, tracked = self.acc, self.states, self.tracked
        # the tuple's rows, added to the states only once every row is accepted: per key [state, records, replays]
        staged: dict[str, list] = {}
        accepted = 0
        for values in rows:
            record = dict(zip(fields, values))
            key = record.get(self.key_field)
            if key_text(key) is None:
                return self._refuse(tup, f"its key {key!r} is not a JSON scalar")
            name = json.dumps(key)
            entry = staged.get(name)
            state = entry[0] if entry is not None else states.get(name, _EMPTY)
            replay = tracked and record.get(REPLAY_FIELD) != 0  # may be committed already: kept apart
            try:
                value = acc.one(record) if replay else acc.add(acc.zero() if state is _EMPTY else state, record)
            except Exception as exc:  # the user's code, whatever it raises: this task stays up (deadletter.py)
                if self._set_aside(record, key, exc):
                    continue  # the row is a dead letter: the tuple's other rows go on
                return self._refuse(tup, describe(exc))
            accepted += 1
            if entry is None:
                entry = staged[name] = [state, [], []]
            if replay:
                entry[2].append([value, [record[RECORD_FIELD]]])
            else:
                entry[0] = value
                if tracked:
                    entry[1].append(record[RECORD_FIELD])
        if not staged:  # every row of it was set aside: nothing will carry it
            self.ack(tup)
            return
        for name, (state, records, replays) in staged.items():
            if state is not _EMPTY:
                states[name] = state
            if records:
                self.covers.setdefault(name, []).extend(records)
            if replays:
                self.replays.setdefault(name, []).extend(replays)
            owner = self.owner.get(name)
            if owner is None:
                owner = self.owner[name] = merge_index(name, len(self.routes))
            self.inputs[owner][tup.id] = None
        self.records += accepted
        self.tuples += 1
        if self.flushes.due():
            self.flush()

    def _set_aside(self, record: dict, key, exc: Exception) -> bool:
        """One more failed attempt of the row: True when it was its last and the row is now a dead letter."""
        rid = record.get(RECORD_FIELD) if self.tracked else None
        values = {f: v for f, v in record.items() if f not in RESERVED_FIELDS}
        row = identity(rid, values)
        if not self.dead.exhausted(row):
            return False
        self.dead.write(row, record=rid, key=key, values=values, error=describe(exc))
        self.logger.warning("%s: row %s is a dead letter after %d attempts: %s", self.component_name,
                            rid if rid is not None else values, self.dead.attempts, describe(exc))
        return True

    def _refuse(self, tup, why: str) -> None:
        self.fail(tup)
        self.failed += 1
        if str(self.failed).rstrip("0") == "1":
            self.logger.warning("%s: failed a tuple from %s/%s because %s (%d failed so far)", self.component_name,
                                tup.component, tup.stream, why, self.failed)

    def process_tick(self, tup):
        with self.lock:
            self.flush()
            self.ack(tup)  # ticks too: Storm's ShellBolt holds every input until it is acked or failed

    def flush(self) -> None:
        """Send each merge task the partial states of its keys, anchored to the inputs they cover; ack those."""
        self.flushes.flushed()
        if not self.states and not self.replays:
            return
        by_merge: list[list] = [[] for _ in self.routes]
        for name, state in self.states.items():
            by_merge[self.owner[name]].append([name, state, self.covers[name]] if self.tracked else [name, state])
        for name, replays in self.replays.items():
            by_merge[self.owner[name]].extend([name, contribution, records] for contribution, records in replays)
        self.entries += sum(map(len, by_merge))
        for m, entries in enumerate(by_merge):
            if entries:
                self.emit([encode_partials(entries), self.routes[m]], stream=PARTIALS_STREAM,
                          anchors=list(self.inputs[m]), need_task_ids=False)
        acked: set = set()
        for inputs in self.inputs:
            for tup_id in inputs:
                if tup_id not in acked:  # once: acking an id twice kills the worker (ShellBolt.handleAck)
                    acked.add(tup_id)
                    self.ack(tup_id)
            inputs.clear()
        if self.conn is not None:
            if self.owner:
                pipe = self.conn.pipeline(transaction=False)
                pipe.sadd(self.held_key, *self.owner)
                pipe.scard(self.held_key)
                self.held = pipe.execute()[1]
            self.conn.hset(self.tasks_key, str(self.index),
                           json.dumps({"records": self.records, "tuples": self.tuples, "keys": self.held,
                                       "entries": self.entries, "failed": self.failed}))
        self.states, self.covers, self.replays, self.owner = {}, {}, {}, {}


class MergeAggregate(CoalescedWrites, Bolt):
    """Merges the partial states of the keys it owns and commits each partial flush as it arrives (module docstring)."""

    outputs = [Stream(fields=list(RESULT_FIELDS))]
    auto_ack = False
    auto_anchor = False

    def initialize(self, conf, context):
        me = self.component_name
        cfg = _config(conf, MERGE_CONFIG, me)
        self.settings, self.keys, self.conn = connect(conf, context, me, self.task_id)
        self.acc = load_accumulator(cfg["accumulator"])
        self.top = int(cfg.get("top") or 0)
        self.index, self.merges = task_index(context, me, self.task_id)
        self.partial_index = {task: i for source, _ in input_fields(context)
                              for i, task in enumerate(component_tasks(context, source))}
        self.results_key = self.keys.stage(me, "results")
        self.top_key = self.keys.stage(me, "top")
        self.tasks_key = self.keys.stage(me, "tasks")
        self.totals: dict[str, object] = {}  # key (JSON text) -> merged state of the keys this task owns
        self.dead = DeadLetters(self.conn, self.keys, me, self.index, attempts_setting(conf), False)
        self.exactly = ExactlyOnceCommit(self.conn, self.keys, self.results_key, self.acc, me, refused=self._refused) \
            if self.conn is not None else None
        # what this task did, for benchmarks/merge_balance.py: commits, entries received, records they covered,
        # accumulator merges, tuples failed (an entry a replay overtook, or one refused), entries set aside, commits
        # tried again, CPU seconds
        self.work = {"commits": 0, "entries": 0, "records": 0, "merges": 0, "split": 0, "aside": 0, "retries": 0,
                     "busy_s": 0.0}
        if self.conn is not None:  # a restarted task continues from its committed results (and its counts)
            mine = {name: text for name, text in self.conn.hgetall(self.results_key).items()
                    if merge_index(name, self.merges) == self.index}
            self.exactly.load(mine)  # type: ignore[union-attr]
            self.totals = self.exactly.states  # type: ignore[union-attr]
            before = self.conn.hget(self.tasks_key, str(self.index))
            if before:
                self.work.update(json.loads(before))
        self.pending: list = []
        self.batch: dict[str, list[Entry]] = {}  # exactly-once: key -> entries since the commit
        self.tuples: list[list[tuple[str, Entry]]] = []  # at-least-once: each partial tuple's entries, in order

    def process(self, tup):
        started = time.process_time()
        source = len(self.pending)
        origin = self.partial_index.get(int(tup.task), -1)  # which partial task sent it: the loads counted once
        entries = [(e[0], Entry(e[1], e[2] if len(e) == 3 else [], source, origin))
                   for e in decode_partials(tup.values[0])]
        if self.settings.exactly_once and entries and all(len(e.records) for _, e in entries):
            for name, entry in entries:
                self.batch.setdefault(name, []).append(entry)
        else:  # at-least-once, or rows without identities (a user's spout): applied tuple by tuple
            self.tuples.append(entries)
        self.pending.append(tup.id)
        self.work["busy_s"] += time.process_time() - started
        self.commit()  # a partial task's whole flush for this merge: nothing to wait for

    def process_tick(self, tup):
        self.ack(tup)
        if self.pending:
            self.commit()

    def commit(self) -> None:
        """Merge and commit the partials since the last commit, emit the changed results, ack the partials (fail those
        carrying an entry a replay overtook: their rows replay, toolkit/commit.py)."""
        if not self.pending:
            return
        started = time.process_time()
        changed, split = self._commit_at_least_once() if self.tuples else ([], set())
        if self.batch:
            self._claim_marks()
            outcome = self.exactly.commit(self.batch)  # type: ignore[union-attr]
            changed, split = changed + outcome.changed, split | outcome.split
            for what in ("entries", "records", "merges", "aside"):
                self.work[what] += getattr(outcome, what)
            self.work["retries"] += outcome.attempts - 1  # compare-and-sets lost: reads the first attempt spared
        self.work["split"] += len(split)
        try:  # result() is the user's code too
            for name in changed:
                self.emit([json.loads(name), self._result_text(name)], anchors=self.pending, need_task_ids=False)
            if self.conn is not None and self.top and changed:
                best = top_results(((json.loads(k), self.acc.result(s)) for k, s in self.totals.items()), self.top)
                self.conn.hset(self.top_key, str(self.index), json.dumps([[k, r] for k, r in best]))
        except Exception as exc:
            self.logger.warning("%s: the accumulator's result raised %s; the states are committed, the results not "
                                "emitted", self.component_name, describe(exc))
        for i, tup_id in enumerate(self.pending):
            if i in split:
                self.fail(tup_id)
            else:
                self.ack(tup_id)
        if split:
            self.logger.warning("%s: failed %d partial tuple(s) (an entry a replay overtook, or one the accumulator "
                                "refused); their rows replay one by one", self.component_name, len(split))
        self.pending = []
        self.batch = {}
        self.tuples = []
        self.work["commits"] += 1
        self.work["busy_s"] += time.process_time() - started
        if self.conn is not None:
            self.conn.hset(self.tasks_key, str(self.index), json.dumps(self.work))

    def _claim_marks(self) -> None:
        """The feed's commit marks serve one merge stage: the first to commit exactly once owns them, and another
        stage refuses to start committing (it would drop every record the first one marked)."""
        if self.conn is None:
            raise ToolkitError(f"{self.component_name}: exactly-once merges commit to the run's Redis; set "
                               "keysplit.redis_url or keysplit.delivery=at-least-once")
        if getattr(self, "_owns_marks", False):
            return
        owner_key = self.keys.stage("", "marks_owner")
        self.conn.set(owner_key, self.component_name, nx=True)
        owner = self.conn.get(owner_key)
        if owner != self.component_name:
            raise ToolkitError(f"{self.component_name}: merge stage {owner} already commits this feed exactly once; "
                               "a topology has one exactly-once merge (keysplit.delivery=at-least-once for more)")
        self._owns_marks = True

    def _result_text(self, name: str):
        """A result as a tuple value: an int or a string as it is, anything else as JSON text (Kryo's rule)."""
        result = self.acc.result(self.totals[name])
        return result if isinstance(result, (str, int)) and not isinstance(result, bool) else json.dumps(result)

    def _commit_at_least_once(self) -> tuple[list[str], set]:
        """Merge each partial tuple's entries into the totals, a tuple whole or not at all (a tuple with an entry the
        accumulator refuses is failed, and none of it applied: its rows replay, each once more); write the results."""
        acc, totals = self.acc, self.totals
        changed: dict[str, None] = {}
        split: set = set()
        for entries in self.tuples:
            source = entries[0][1].source if entries else None
            trial: dict[str, object] = {}
            for name, entry in entries:
                self.work["entries"] += 1
                self.work["records"] += len(entry.records)
                try:  # the user's code: whatever it raises, this task stays up (toolkit/deadletter.py)
                    base = trial[name] if name in trial else totals[name] if name in totals else acc.zero()
                    trial[name] = acc.merge(base, entry.state)
                    self.work["merges"] += 1
                except Exception as exc:
                    if self._refused(name, entry, exc):
                        self.work["aside"] += 1
                        continue
                    split.add(source)
                    break
            if source not in split:
                totals.update(trial)
                changed.update(dict.fromkeys(trial))
        if self.conn is not None and changed:
            self.conn.hset(self.results_key, mapping={name: json.dumps(totals[name]) for name in changed})
        return list(changed), split

    def _refused(self, name: str, entry: Entry, exc: Exception) -> bool:
        """The accumulator raised on ``entry``: True when it is a dead letter now (one row, out of attempts), False
        when its tuple is to be failed (an entry of several rows: they replay alone, so the one at fault is found)."""
        if len(entry.records) > 1:
            return False
        record = entry.records[0] if entry.records else None
        row = identity(record, name)  # a row from a user's spout is known by its key here
        if not self.dead.exhausted(row):
            return False
        self.dead.write(row, record=record, key=json.loads(name), values={"contribution": entry.state},
                        error=describe(exc))
        self.logger.warning("%s: %s is a dead letter after %d attempts: %s", self.component_name,
                            f"record {record}" if record is not None else f"key {name}", self.dead.attempts,
                            describe(exc))
        return True
