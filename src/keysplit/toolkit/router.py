"""``KeyRouter``: any keysplit grouping on any keyed edge of a streamparse topology.

In Storm terms it is a ``CustomStreamGrouping`` (``prepare(context, stream, targetTasks)``, ``chooseTasks(taskId,
values)``) run as a bolt, because a Python topology cannot put a custom grouping on an edge (STORM-1188): the bolt
reads the key field of each tuple, asks its grouping for a worker (one grouping instance per router task: the
papers' sources), and emits the tuple with every field unchanged plus :data:`~keysplit.toolkit.contract.ROUTE_FIELD`,
the value that makes Storm's own fields grouping on that field deliver it to the chosen task of the downstream
component (``keysplit.storm.router.route_value``: the route trick that works on every Storm release). The emit is
anchored to the input and the input acked after it, so Storm's at-least-once delivery holds across the hop.

- **Workers** are the downstream component's tasks, sorted (or the first ``workers`` of them); the **source** index is
  this task's index among the router's tasks, so ``build_grouping(spec, W, S)[s]`` is the simulator's source ``s``.
- **Event time** ``now`` is the tuple's ``time`` field when the spec names one (then a run decides exactly as
  ``keysplit simulate`` does on a dataset with that time column), else wall-clock seconds since this task started.
- **Feedback**, through the run's Redis (``keysplit.redis_url``): PKG's probing reads the true loads (what every
  router sent each worker), Gedik's routers share one partitioning function (router 0 leads, the others follow;
  with ``time`` a follower waits for the leader's function of each row's period, so the decisions stay the
  simulator's: ``keysplit.storm.router``),
  offline groupings read the exact frequencies stored with keysplit's feed. FISH's capacities default to equal
  workers. Without Redis those groupings are refused when the task starts, in one line.
- **Batches in** from keysplit's feed spout (toolkit/spout.py): each row of a batch is routed as a tuple of its own
  would be, in order; the batch is acked once every row has left (in the batches out, or one tuple each).
- **Batches out** (``batch`` N > 1, ``batch_ms`` T; only to an ``Aggregate.partial``): the grouping still
  decides every tuple, in stream order (the same decisions as without batches); a
  :class:`~keysplit.storm.router.Batcher` (the word count's) holds the rows bound for one downstream task and sends
  them as one tuple on :data:`~keysplit.toolkit.contract.ROWS_STREAM` once it holds N rows, or T ms after its first
  row from a timer thread, whichever comes first. The batch is anchored to every input it carries (Storm's
  multi-anchoring: apache/storm ``BoltOutputCollectorImpl.java`` ``boltEmit``, and ``ShellBolt.java``
  ``handleEmit``, which needs every anchor still pending: keysplit.storm.router), and each input is acked when its
  batch has left: a kill anywhere replays the inputs whose trees it broke, as without batches.
- **Bad tuples**: one without the key field, or whose key is not a JSON scalar (None, a list), is failed (Storm
  replays it from the spout, or drops it for an unreliable one) and logged; the worker stays up.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from streamparse import Bolt

from keysplit.groupings import parse_grouping
from keysplit.storm import quiet_exit
from keysplit.storm.multilang import CoalescedWrites
from keysplit.storm.router import Batch, Batcher, GroupingChannel, Router
from keysplit.storm.streams import component_tasks
from keysplit.stream import DEFAULT_BATCH, DEFAULT_BATCH_MS
from keysplit.toolkit.contract import (
    RECORD_FIELD,
    ROUTE_FIELD,
    ROUTER_CONFIG,
    ROWS_FIELDS,
    ROWS_STREAM,
    decode_rows,
    encode_rows,
    key_text,
    record_id,
    split_record,
)
from keysplit.toolkit.runtime import ToolkitError, connect, fields_subscriber, input_fields, subscribers, task_index
from keysplit.toolkit.specs import KeyRouterSpec, key_router_spec, rows_a_tuple

quiet_exit.install()

class _StageKeys:
    """The keys GroupingChannel uses, named for one router stage (a topology may have several)."""

    def __init__(self, keys, component: str) -> None:
        for name in ("grouping_state", "grouping_states", "grouping_version", "grouping_epoch", "grouping_stats",
                     "grouping_unsynced"):
            setattr(self, name, keys.stage(component, name))


class KeyRouter(CoalescedWrites, Bolt):
    """Routes each tuple by its key field with a keysplit grouping (module docstring); build it with
    :meth:`KeyRouter.spec`."""

    @classmethod
    def spec(cls, *, inputs: Any, key: str, grouping: str, to: str | None = None, time: str | None = None,
             workers: int | None = None, batch: int | None = None, batch_ms: float = DEFAULT_BATCH_MS,
             split: str | None = None, name: str | None = None, par: int = 1,
             config: Mapping[str, Any] | None = None) -> KeyRouterSpec:
        """Any keysplit grouping on a keyed edge: ``KeyRouter.spec(inputs=..., key="page", grouping="pkg:d=2")``.
        In front of an ``Aggregate.partial`` it sends the rows bound for one task together, up to ``batch`` rows or
        ``batch_ms`` milliseconds after the first, whichever comes first, in one tuple (``batch=1``: one tuple a
        row; None, the default: ``keysplit.stream.DEFAULT_BATCH`` rows under exactly-once, one under at-least-once);
        a user's bolt behind it gets one tuple a row. With ``split`` the key field holds several keys, between
        occurrences of that text (``split=" "``: a line's words), and each is a row of its own, in order: the one hop
        that splits and routes, as the word count's router splits its lines."""
        return key_router_spec(cls, inputs=inputs, key=key, grouping=grouping, to=to, time=time, workers=workers,
                               batch=batch, batch_ms=batch_ms, name=name, par=par, config=config, split=split)

    outputs: list = []  # declared per spec: the upstream's fields plus the route field
    auto_ack = False  # acked after its emit (or its batch's), or failed: never both (ShellBolt kills a worker that
    auto_anchor = False  # does both)

    def initialize(self, conf, context):
        cfg = conf.get(ROUTER_CONFIG)
        if not isinstance(cfg, dict):
            raise ToolkitError(f"{self.component_name}: no {ROUTER_CONFIG} in its configuration; build it with "
                               "KeyRouter.spec(...)")
        me = self.component_name
        self.settings, self.keys, conn = connect(conf, context, me, self.task_id)
        self.conn = conn
        index, sources = task_index(context, me, self.task_id)
        target = cfg.get("to") or fields_subscriber(context, "default", ROUTE_FIELD, me)
        tasks = component_tasks(context, target)
        if not tasks:
            raise ToolkitError(f"{me}: its downstream component {target!r} has no tasks in this topology")
        workers = int(cfg.get("workers") or len(tasks))
        spec = cfg["grouping"]
        cls, params = parse_grouping(spec)
        if conn is None and (cls.needs_full_pass or params.get("load") == "probe"
                             or hasattr(cls, "export_state")):
            raise ToolkitError(f"{me}: grouping {spec} needs the run's Redis (keysplit.redis_url) for its feedback "
                               "(probed loads, shared state or exact frequencies)")
        self.loads_key = self.keys.stage(me, "loads")

        def probe() -> list[int]:  # PKG's periodic probing: what every router sent each worker so far
            loads = conn.hgetall(self.loads_key)
            return [int(loads.get(str(w), 0)) for w in range(workers)]

        def frequencies():  # offline groupings: the exact key counts stored with keysplit's feed
            from collections import Counter

            stored = conn.hgetall(self.keys.frequencies)
            if not stored:
                raise ToolkitError(f"{me}: grouping {spec} needs exact key frequencies, which only keysplit's feed "
                                   "stores (keysplit run --dataset ...)")
            return Counter({k: int(v) for k, v in stored.items()})

        channel = GroupingChannel(conn, _StageKeys(self.keys, me), self.settings.stats_secs) if conn else None
        self.router = Router(spec, workers, index, sources, tasks, probe=probe if conn else None,
                             frequencies=frequencies if conn else None, channel=channel, mode="fields")
        self.key_field = cfg["key"]
        self.time_field = cfg.get("time")
        # per input stream: where the key (and time) is, and which positions pass through (an incoming route
        # field, keysplit's feed spout's dealing value, is replaced by this router's)
        self.layout: dict[tuple[str, str], tuple[int | None, int | None, list[int] | None, int | None]] = {}
        self.from_feed: set[tuple[str, str]] = set()  # the feed spout's batches of rows (toolkit/spout.py)
        self.split = cfg.get("split")  # the key field holds several keys (a line's words): a row each

        def at(row: list[str], name: str | None) -> int | None:
            return row.index(name) if name is not None and name in row else None

        row = [f for f in cfg.get("fields") or [] if f != ROUTE_FIELD]  # a batched row's values: no route
        self.row_layout = (at(row, self.key_field), at(row, self.time_field), at(row, RECORD_FIELD))
        for stream, fields in input_fields(context).items():
            if stream[1] == ROWS_STREAM and fields == list(ROWS_FIELDS):
                self.from_feed.add(stream)
                continue
            kept = [f for f in fields if f != ROUTE_FIELD]  # positions in the row passed on (no incoming route)
            keep = [i for i, f in enumerate(fields) if f != ROUTE_FIELD]
            self.layout[stream] = (at(kept, self.key_field), at(kept, self.time_field),
                                   None if len(keep) == len(fields) else keep, at(kept, RECORD_FIELD))
        self.unreported = [0] * workers  # tuples sent to each worker since the last write to Redis
        self.failed = 0  # tuples failed since the last report
        self.failed_total = 0
        self.next_report = time.monotonic() + self.settings.stats_secs
        self.batcher: Batcher | None = None
        # batches only to a partial aggregate, which alone takes the rows stream (specs.check_topology)
        batch = rows_a_tuple(cfg.get("batch"), self.settings.delivery, DEFAULT_BATCH) \
            if subscribers(context, ROWS_STREAM) else 1
        if batch > 1:
            self.batcher = Batcher(batch, float(cfg["batch_ms"]) / 1000.0, self._emit_batch, self.ack)
            self.lock = threading.Condition()
            threading.Thread(target=self._flusher, name="batch-flusher", daemon=True).start()
        if conn is not None:
            conn.hset(self.keys.stage(me, "meta"), mapping={
                "kind": "router", "grouping": self.router.grouping.describe(), "workers": workers,
                "sources": sources, "to": target, "key": self.key_field})

    def process(self, tup):
        where = (tup.component, tup.stream)
        if where in self.from_feed:  # a batch of the feed's rows, each routed as a tuple of its own would be
            self._route(tup, decode_rows(tup.values[0]), *self.row_layout, batch=True)
            return
        key_at, time_at, keep, record_at = self.layout.get(where, (None, None, None, None))
        values = tup.values
        self._route(tup, [list(values) if keep is None else [values[i] for i in keep]], key_at, time_at, record_at,
                    batch=False)

    def _route(self, tup, rows: list[list], key_at: int | None, time_at: int | None, record_at: int | None, *,
               batch: bool) -> None:
        """Route ``rows`` (the input's, each a list of values without a route) in order, as one tuple each would be,
        then pass them on in the downstream batches (or one tuple a row) and ack the input once they have all left.
        With ``split`` each row is first one row per key of its key field. A row that cannot be routed fails the
        input whole (its rows replay together), before any of it is routed."""
        if self.split is not None:
            rows = self._split(tup, rows, key_at, record_at, batch)
            if rows is None:
                return
        texts = [key_text(row[key_at]) if key_at is not None and key_at < len(row) else None for row in rows]
        if None in texts:
            bad = rows[texts.index(None)]
            missing = key_at is None or key_at >= len(bad)
            return self._refuse(tup, (f"a row of its batch has no field {self.key_field!r}" if batch else
                                      f"it has no field {self.key_field!r}") if missing else
                                f"{'a row of its batch has' if batch else 'its'} key {bad[key_at]!r} is not a JSON "
                                "scalar (string, number or boolean)")
        router = self.router
        if time_at is not None:
            try:
                times = [float(row[time_at]) for row in rows]
            except (TypeError, ValueError, IndexError):
                return self._refuse(tup, f"{'a row of its batch has' if batch else 'it has'} no number in its time "
                                    f"field {self.time_field!r}")
            chosen = [router.choose(text, now, event_time=True) for text, now in zip(texts, times)]
        else:
            now = router.elapsed()
            chosen = [router.choose(text, now, event_time=False) for text in texts]
        unreported, targets = self.unreported, router.targets
        for worker in chosen:
            unreported[worker] += 1
        # under exactly-once a feed batch's loads are in Redis before any of it leaves (one write a batch), so the
        # loads hold every row of every completed tree even when this task dies (a kill before the first report lost
        # them)
        if self.conn is not None and ((batch and self.settings.exactly_once) or time.monotonic() >= self.next_report):
            self.report()
        if self.batcher is not None:
            with self.lock:
                idle = not self.batcher.open
                self.batcher.add_items(tup.id, [(row, targets[w]) for row, w in zip(rows, chosen)])
                if idle and self.batcher.open:
                    self.lock.notify()  # the flusher waits without a deadline while no batch is open
        else:
            for row, worker in zip(rows, chosen):
                self.emit([*row, targets[worker]], anchors=[tup.id], need_task_ids=False)
            self.ack(tup)

    def _split(self, tup, rows: list[list], key_at: int | None, record_at: int | None, batch: bool) -> list | None:
        """``split``: each row as one row per key of its key field's text (the pieces between separators, empty
        ones left out), in order; a row from keysplit's feed gives each the record of its place
        (contract.record_id, as a line's words are known by their positions). None when the input was failed."""
        out: list[list] = []
        sep = self.split
        for row in rows:
            text = row[key_at] if key_at is not None and key_at < len(row) else None
            if not isinstance(text, str):
                self._refuse(tup, f"{'a row of its batch has' if batch else 'its'} key field {self.key_field!r} "
                             f"holding {text!r}, not text to split into keys")
                return None
            record = row[record_at] if record_at is not None else None
            if record is not None and split_record(record)[1]:
                self._refuse(tup, f"its row {record} shares a feed entry with others, so its keys have no places of "
                             "their own; load the feed for this topology (keysplit run)")
                return None
            for position, key in enumerate(k for k in text.split(sep) if k):
                piece = list(row)
                piece[key_at] = key  # type: ignore[index]
                if record is not None:
                    piece[record_at] = record_id(record, position)  # type: ignore[index]
                out.append(piece)
        return out

    def _emit_batch(self, route: int, batch: Batch) -> None:
        """One batch: its rows as text and the route value of their task, anchored to every input it carries."""
        self.emit([encode_rows(batch.items), route], stream=ROWS_STREAM, anchors=list(batch.inputs),
                  need_task_ids=False)

    def _flusher(self) -> None:
        """Send each batch that is not full ``batch_ms`` after its first row (the timer thread: a multi-lang bolt
        runs only when a tuple arrives). As the word count's ``RouterBolt._flusher`` it only writes (emits without
        task ids, acks), which pystorm serialises under its writer lock."""
        try:
            self.batcher.serve(self.lock, self.serializer.flush)  # type: ignore[union-attr]
        except Exception:  # a flusher that stops would leave inputs unacked until they time out
            self.logger.exception("the batch flusher failed; stopping the task")
            os._exit(1)

    def _refuse(self, tup, why: str) -> None:
        """Fail a tuple that cannot be routed, and say why: the first one and then at 10, 100, 1000, ... of them."""
        self.fail(tup)
        self.failed += 1
        self.failed_total += 1
        if str(self.failed_total).rstrip("0") == "1":
            self.logger.warning("%s: failed a tuple from %s/%s because %s (%d failed so far)", self.component_name,
                                tup.component, tup.stream, why, self.failed_total)

    def process_tick(self, tup):
        if self.conn is not None:
            self.report()
        self.ack(tup)  # ticks too: Storm's ShellBolt holds every input until it is acked or failed

    def report(self) -> None:
        """Add what this task sent each worker since the last report to the stage's loads (the probe reads them)."""
        self.next_report = time.monotonic() + self.settings.stats_secs
        sent = self.unreported
        if not any(sent) and not self.failed:
            return
        pipe = self.conn.pipeline(transaction=True)
        for worker, n in enumerate(sent):
            if n:
                pipe.hincrby(self.loads_key, str(worker), n)
        if self.failed:
            pipe.hincrby(self.keys.stage(self.component_name, "failed"), str(self.task_id), self.failed)
        pipe.execute()
        self.unreported = [0] * len(sent)
        self.failed = 0
