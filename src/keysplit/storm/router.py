"""The router's logic (the PKG paper's "source"): split a record into words and choose a counter task for
each with the configured grouping, exactly as ``keysplit.groupings.hosting.route`` does in process.

The router learns the topology from Storm's multi-lang context: ``task->component`` maps every task id to
its component. Counter task ids sorted ascending are the grouping's workers 0..W-1 (the first W of them
when there are more counter tasks than W); this router's index among the sorted router task ids is its
source index s, so ``build_grouping(spec, W, S)[s]`` is the same instance the simulator would give source s.

Route modes (``keysplit.route``): how the chosen counter task reaches Storm. ``direct`` emits each word with
``direct_task=`` on a direct stream; Storm 2.6.0 and later cannot run that from a multi-lang component (their
``multilang/JsonSerializer.java`` casts the parsed ``task`` field to ``Long``, but json-smart yields ``Integer``
for small numbers: ``ClassCastException``). ``fields`` (the default, every release) emits ``(word, route)`` on a
stream fields-grouped on ``route``, with ``route`` chosen by :func:`~keysplit.storm.streams.route_value` so that
Storm's own fields grouping delivers the word to the chosen task.

Event time ``now`` in Storm is the wall clock (docs/design/routing.md), measured from the router's start
(:meth:`Router.elapsed`) so that it begins near 0 as the simulator's ``sequence / rate`` does: groupings with
periods (PKG's probe interval, FISH's epochs, Gedik's windows) count their periods from 0, and a Unix time
of ~1.8e9 s would make them catch up through hundreds of millions of periods at the first message.

Groupings whose sources share state in process (Gedik's one partitioning function: the ``export_state`` hook
of ``groupings/base.py``) cannot share an object across router processes; given a :class:`GroupingChannel`
(Redis), router 0 is the **leader**: it alone updates the state and publishes every version of it, each naming
the first period of event time it applies to (``since``), and its progress (``epoch``, the latest period it
routed a message in) whenever that grows. The other routers are **followers**. With event time from the data
(a toolkit router's ``time=`` field) a follower decides a message of period k only once the leader's progress
has reached k, with the latest version whose ``since`` is at most k (:meth:`Router.sync_at`): the version the
simulator's sources use for that message, whatever the routers' relative speeds, so the loads are the
simulator's. It waits at most ``sync_wait`` seconds (the leader is down, or got no message of period k because
the stream ended), then decides with what it has and counts the decision as ``unsynced``. With the wall clock
as event time (the word count) there is nothing to agree on: followers poll the published version at most every
``poll_secs`` and install a newer state (:meth:`Router.sync`). The leader also writes its grouping's ``stats()``
(rebuilds, migration) for the run's summary: after every state change and at most every ``poll_secs`` otherwise.

**Batches** (``keysplit.batch`` B > 1, ``keysplit.batch_ms`` T): the router still asks its grouping for every word, in
stream order (the same decisions as without batches), but a :class:`Batcher` holds the words bound for one counter
and sends them as one tuple once it holds B of them, or T ms after its first word, whichever comes first. A batch
is anchored to every line it carries a word of (Storm's multi-anchoring: apache/storm
``storm-client/src/jvm/org/apache/storm/executor/bolt/BoltOutputCollectorImpl.java`` ``boltEmit`` gives each anchor
its own edge id, and ``task/ShellBolt.java`` ``handleEmit`` resolves each anchor id among the bolt's pending
inputs, so every anchor must still be unacked), and a line is acked only once every batch carrying one of its words
was emitted. Its values are strings (:func:`~keysplit.storm.streams.encode_words` and
:func:`~keysplit.storm.streams.encode_pairs`) and the route value: what Kryo writes between workers (the streams
and their encodings: storm/streams.py).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence

from keysplit.datasets import decode_record
from keysplit.errors import KeysplitError
from keysplit.groupings import BaseGrouping
from keysplit.groupings.base import Reporting, SharedState
from keysplit.groupings.hosting import prepare_groupings
from keysplit.storm.keys import RunKeys
from keysplit.storm.streams import route_value

#: How the router addresses the counter task it chose (see the module docstring); the first is the default.
ROUTE_MODES = ("fields", "direct")
#: Versions of a shared state kept in Redis and by each follower: a follower decides rows of the periods the leader
#: is in or just passed, and a replayed row of an older period takes the oldest kept (replays change loads anyway).
KEPT_VERSIONS = 256


class GroupingChannel:
    """The routers' Redis channel for a grouping's shared state (``export_state``) and its ``stats()``."""

    def __init__(self, conn, keys: RunKeys, poll_secs: float = 1.0) -> None:
        self.conn = conn
        self.keys = keys
        self.poll_secs = poll_secs

    def publish(self, state: dict | None, stats: dict | None = None, epoch: int | None = None) -> None:
        """Store ``state`` (with its ``version``: kept among every version, and as the latest) and, atomically with
        it, the version followers poll and the leader's progress ``epoch``."""
        pipe = self.conn.pipeline(transaction=True)
        if state is not None:
            text = json.dumps(state)
            version = int(state["version"])
            pipe.hset(self.keys.grouping_states, str(version), text)
            if version > KEPT_VERSIONS:  # bounded: a follower needs the versions of the periods it is in
                pipe.hdel(self.keys.grouping_states, str(version - KEPT_VERSIONS))
            pipe.set(self.keys.grouping_state, text)
            pipe.set(self.keys.grouping_version, int(state["version"]))
        if epoch is not None:  # after the states: a follower that reads it finds every state up to it
            pipe.set(self.keys.grouping_epoch, int(epoch))
        if stats is not None:
            pipe.set(self.keys.grouping_stats, json.dumps(stats))
        pipe.execute()

    def version(self) -> int:
        """The published state's version (0 when nothing is published yet): one cheap GET."""
        return int(self.conn.get(self.keys.grouping_version) or 0)

    def epoch(self) -> int:
        """The leader's progress: the latest period it routed a message in (0 before it published one)."""
        return int(self.conn.get(self.keys.grouping_epoch) or 0)

    def state(self) -> dict | None:
        raw = self.conn.get(self.keys.grouping_state)
        return json.loads(raw) if raw else None

    def states(self, after: int = 0, upto: int | None = None) -> list[dict]:
        """The published states with versions in (``after``, ``upto``] (``upto``: the latest), by version; the
        last :data:`KEPT_VERSIONS` at most."""
        upto = self.version() if upto is None else upto
        fields = [str(v) for v in range(max(after + 1, upto - KEPT_VERSIONS + 1, 1), upto + 1)]
        stored = self.conn.hmget(self.keys.grouping_states, fields) if fields else []
        return [json.loads(raw) for raw in stored if raw]

    def count_unsynced(self, n: int = 1) -> None:
        """A follower decided ``n`` messages without the leader's state for their period (the summary says so)."""
        self.conn.incrby(self.keys.grouping_unsynced, n)

    def unsynced(self) -> int:
        return int(self.conn.get(self.keys.grouping_unsynced) or 0)

    def write_stats(self, stats: dict) -> None:
        self.conn.set(self.keys.grouping_stats, json.dumps(stats))

    def read_stats(self) -> dict | None:
        raw = self.conn.get(self.keys.grouping_stats)
        return json.loads(raw) if raw else None


class Router:
    """One source: a prepared grouping instance and the counter task id of each worker index."""

    def __init__(
        self,
        spec: str,
        workers: int,
        source: int,
        sources: int,
        counter_task_ids: Sequence[int],
        *,
        probe: Callable[[], Sequence[int]] | None = None,
        capacities: Sequence[float] | None = None,
        frequencies: Callable[[], Counter] | None = None,
        channel: GroupingChannel | None = None,
        mode: str = "direct",
        sync_wait: float = 5.0,
    ) -> None:
        if workers > len(counter_task_ids):
            raise KeysplitError(f"W={workers} workers is more than the {len(counter_task_ids)} counter tasks")
        if mode not in ROUTE_MODES:
            raise KeysplitError(f"unknown route mode {mode!r}; valid: {', '.join(ROUTE_MODES)}")
        counter_task_ids = sorted(counter_task_ids)
        self.tasks = counter_task_ids[:workers]
        self.mode = mode
        # what route() pairs with each word: the task id (direct) or the route value for worker w (fields)
        self.targets = (self.tasks if mode == "direct"
                        else [route_value(w, len(counter_task_ids)) for w in range(workers)])
        self.grouping: BaseGrouping = prepare_groupings(
            spec, workers, sources, true_loads=probe, capacities=capacities, frequencies=frequencies
        )[source]
        self.routed = 0
        self.t0 = time.time()
        self.channel = channel
        g = self.grouping
        self.role: str | None = None
        self.shared: SharedState | None = None  # the grouping's shared state, when a channel carries it
        self.reporting: Reporting | None = None  # the grouping whose stats() this router writes (router 0)
        # a follower's versions of the shared state: (since, version, state), by version; the one installed
        self.versions: list[tuple[int, int, dict]] = []
        self.installed = 0
        self.known_epoch = 0  # the leader's progress as last read (a follower)
        # a follower waiting for the leader answers no heartbeat meanwhile: ShellBolt kills a subprocess silent for
        # topology.subprocess.timeout.secs, else supervisor.worker.timeout.secs, 30 s by default
        # (storm-client/src/jvm/org/apache/storm/task/ShellBolt.java, ``workerTimeoutMills``): stay well below it
        self.sync_wait = sync_wait
        self.unsynced = 0  # decisions made without the leader's state for their period (sync_at timed out)
        self.gave_up = -1  # the latest period sync_at waited sync_wait for in vain
        if channel is not None and isinstance(g, SharedState):
            self.shared = g
            self.role = "leader" if source == 0 else "follower"
            g.set_role(self.role)
            self.versions.append((0, g.state_version, g.export_state()))
            published = channel.state()
            if published is not None:  # a restarted router continues from the published state
                g.import_state(published)
                if self.role == "follower":
                    self._learn(channel.states())
                    self.known_epoch = channel.epoch()
                    self.installed = g.state_version
        if channel is not None and source == 0 and isinstance(g, Reporting):
            self.reporting = g
        self.reports = self.reporting is not None
        self.version = self.shared.state_version if self.shared is not None else 0
        self.epoch = self.shared.epoch if self.shared is not None else 0  # the leader's, as published
        self.next_sync = 0.0  # monotonic time of the next follower poll / periodic stats write

    def elapsed(self) -> float:
        """Wall-clock seconds since this router started: the ``now`` a Storm router passes to ``choose``."""
        return time.time() - self.t0

    def route(self, encoded_record: str, now: float) -> list[tuple[str, int]]:
        """``(word, target)`` for every word of the record, the target being the counter task id (direct mode)
        or the ``route`` value that reaches it (fields mode); ``now`` is wall-clock time (docs/design/routing.md)."""
        _, words = decode_record(encoded_record)
        if self.role == "follower":
            self.sync()
        choose, tasks = self.grouping.choose, self.targets
        out = [(w, tasks[choose(w, now)]) for w in words]
        self.routed += len(out)
        if self.reports:
            self.report()
        return out

    def choose(self, key: str, now: float, *, event_time: bool) -> int:
        """One message's worker index, as a toolkit router decides it: a follower first installs the leader's
        state (for ``now``'s period when ``now`` is the data's own time, else the latest), the leader publishes
        what changed after it."""
        if self.role == "follower":
            if event_time:
                self.sync_at(now)
            else:
                self.sync()
        worker = self.grouping.choose(key, now)
        if self.reports:
            self.report()
        return worker

    def sync(self, force: bool = False) -> bool:
        """Follower: install the leader's state if a newer version is published (at most every
        ``poll_secs`` unless ``force``); True when it installed one."""
        channel, shared = self.channel, self.shared
        clock = time.monotonic()
        if channel is None or shared is None or (not force and clock < self.next_sync):
            return False
        self.next_sync = clock + channel.poll_secs
        if channel.version() <= self.version:
            return False
        state = channel.state()
        if state is None or int(state["version"]) <= self.version:
            return False
        shared.import_state(state)
        self.version = int(state["version"])
        return True

    def sync_at(self, now: float) -> bool:
        """Follower, with event time from the data: install the state the simulator's source uses for a message
        at ``now`` (module docstring). Waits for the leader's progress to reach ``now``'s period, at most
        ``sync_wait`` seconds; False when it gave up (the message is then decided with the latest state known)."""
        channel, shared = self.channel, self.shared
        if channel is None or shared is None:
            return True
        epoch = shared.epoch_of(now)
        synced = True
        if epoch > self.known_epoch:
            # one wait per period: once it gave up on a period, later rows of it only look (one GET), so the rows
            # behind a silent leader are not held sync_wait each, past Storm's message timeout
            deadline = time.monotonic() if epoch <= self.gave_up else None
            pause = 0.0005
            while (published := channel.epoch()) < epoch:
                clock = time.monotonic()
                deadline = clock + self.sync_wait if deadline is None else deadline
                if clock >= deadline:
                    synced = False
                    self.gave_up = max(self.gave_up, epoch)
                    break
                time.sleep(min(pause, max(deadline - clock, 0.0)))
                pause = min(pause * 2, 0.05)
            self.known_epoch = max(self.known_epoch, published)
            if (latest := channel.version()) > self.versions[-1][1]:
                self._learn(channel.states(after=self.versions[-1][1], upto=latest))
        if not synced:
            self.unsynced += 1
            channel.count_unsynced()
        usable = [v for v in self.versions if v[0] <= epoch] or self.versions[:1]  # older than all kept: the oldest
        _, version, state = max(usable, key=lambda v: v[1])
        if version != self.installed:
            shared.import_state(state)
            self.installed = version
        self.version = self.versions[-1][1]
        return synced

    def _learn(self, states: Iterable[dict]) -> None:
        """Keep the published ``states`` (a follower chooses among them by period)."""
        known = {v for _, v, _ in self.versions}
        for state in states:
            if int(state["version"]) not in known:
                self.versions.append((int(state.get("since", 0)), int(state["version"]), state))
        self.versions.sort(key=lambda v: v[1])
        del self.versions[:-KEPT_VERSIONS]

    def report(self, force: bool = False) -> None:
        """Leader: publish the state when its version grew (with the stats) and its progress when that grew,
        else write the stats at most every ``poll_secs`` unless ``force``."""
        channel, reporting, shared = self.channel, self.reporting, self.shared
        if channel is None or reporting is None:
            return
        clock = time.monotonic()
        if self.role == "leader" and shared is not None and shared.state_version != self.version:
            channel.publish(shared.export_state(), reporting.stats(), shared.epoch)
            self.version = shared.state_version
            self.epoch = shared.epoch
        elif self.role == "leader" and shared is not None and shared.epoch != self.epoch:
            channel.publish(None, epoch=shared.epoch)  # a period passed without a rebuild: followers may go on
            self.epoch = shared.epoch
            return
        elif force or clock >= self.next_sync:
            channel.write_stats(reporting.stats())
        else:
            return
        self.next_sync = clock + channel.poll_secs


class Batch:
    """What a router holds for one downstream task: its items (the word count's words, a toolkit router's rows),
    each word's occurrence ``"line,position"`` (the word count's), the input tuples it carries items of
    (``inputs``: the word count's spout tuples of one or more lines each, the feed's batches of rows), in order, and
    when its first item came (monotonic seconds)."""

    __slots__ = ("inputs", "items", "occurrences", "opened")

    def __init__(self, opened: float) -> None:
        self.items: list = []
        self.occurrences: list[str] = []
        self.inputs: dict[Hashable, None] = {}
        self.opened = opened


class Batcher:
    """A router's batches (module docstring): per target, the words routed to it since its last batch left.

    ``emit(target, batch)`` sends a batch (anchored to ``batch.inputs``, the input tuples it carries words of);
    ``ack(tup)`` acks an input tuple (a spout tuple of one or more lines) once every batch that carries a word of it
    was emitted. A tuple's reference count is the batches holding its words, plus one while its lines are being
    added, so a batch that fills in the middle of them does not free it early. ``size`` words at most per batch,
    ``wait`` seconds at most from its first word (:meth:`flush_due`; the caller calls it when :meth:`next_due` says,
    from a timer thread: a multi-lang bolt runs only when a tuple arrives).

    >>> sent, acked = [], []
    >>> b = Batcher(2, 0.05, lambda t, batch: sent.append((t, batch.items, list(batch.inputs))), acked.append,
    ...             clock=lambda: 0.0)
    >>> b.add_tuple("T0", [(7, [("a", 1), ("b", 2), ("c", 1)])])
    >>> sent, acked
    ([(1, ['a', 'c'], ['T0'])], [])
    >>> b.add_tuple("T1", [(8, [("d", 2)]), (9, [])])
    >>> sent[-1], acked
    ((2, ['b', 'd'], ['T0', 'T1']), ['T0', 'T1'])
    """

    def __init__(self, size: int, wait: float, emit: Callable[[int, Batch], None], ack: Callable[[Hashable], None],
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        if size < 1 or not wait > 0:
            raise ValueError(f"a batch needs size >= 1 and wait > 0, got {size} and {wait}")
        self.size = size
        self.wait = wait
        self.emit = emit
        self.ack = ack
        self.clock = clock
        self.open: dict[int, Batch] = {}  # target -> its batch; in the order they opened, so the oldest is first
        self.refs: dict[Hashable, int] = {}  # input tuple -> batches still holding a word of it (+1 while added)
        self.batches = 0  # batches emitted
        self.items = 0  # items emitted in them

    def add_tuple(self, tup: Hashable, lines: Iterable[tuple[int, Sequence[tuple[str, int]]]]) -> None:
        """The lines of input tuple ``tup``: each its feed line number and its words ``(word, target)`` in order;
        each word joins its target's batch, and a batch that reaches ``size`` words is emitted at once."""
        self.refs[tup] = 1
        size = self.size
        for line, routed in lines:
            prefix = f"{line},"  # occurrence texts, streams.occurrence(line, position), one format a line
            for position, (word, target) in enumerate(routed):
                batch = self._join(tup, word, target)
                batch.occurrences.append(prefix + str(position))
                if len(batch.items) >= size:
                    self._send(target)
        self._release(tup)

    def add(self, tup: Hashable, item: object, target: int) -> None:
        """Input tuple ``tup`` carrying one item for ``target`` (a toolkit router's row: no lines, no occurrences);
        held by that one batch, so acked when it leaves.

        >>> sent, acked = [], []
        >>> b = Batcher(2, 0.05, lambda t, batch: sent.append((t, batch.items)), acked.append, clock=lambda: 0.0)
        >>> b.add("T0", ["a", 1], 5); b.add("T1", ["b", 2], 6); b.add("T2", ["c", 3], 5)
        >>> sent, acked
        ([(5, [['a', 1], ['c', 3]])], ['T0', 'T2'])
        """
        self.refs[tup] = 0
        if len(self._join(tup, item, target).items) >= self.size:
            self._send(target)

    def add_items(self, tup: Hashable, items: Iterable[tuple[object, int]]) -> None:
        """Input tuple ``tup`` carrying many items, each ``(item, target)`` (a toolkit router's batch of rows from
        the feed): each joins its target's batch, and ``tup`` is acked once every batch holding one has left.

        >>> sent, acked = [], []
        >>> b = Batcher(2, 0.05, lambda t, batch: sent.append((t, batch.items)), acked.append, clock=lambda: 0.0)
        >>> b.add_items("T0", [("a", 5), ("b", 6), ("c", 5)]); b.add_items("T1", [("d", 6)])
        >>> sent, acked
        ([(5, ['a', 'c']), (6, ['b', 'd'])], ['T0', 'T1'])
        """
        self.refs[tup] = 1  # held while its items are added, so a batch that fills among them does not free it early
        size = self.size
        for item, target in items:
            if len(self._join(tup, item, target).items) >= size:
                self._send(target)
        self._release(tup)

    def _join(self, tup: Hashable, item: object, target: int) -> Batch:
        """``item`` of input tuple ``tup`` into ``target``'s batch (opened if none is): the batch holds a reference
        to ``tup`` once, however many of its items it carries."""
        batch = self.open.get(target)
        if batch is None:
            batch = self.open[target] = Batch(self.clock())
        batch.items.append(item)
        if tup not in batch.inputs:
            batch.inputs[tup] = None
            self.refs[tup] += 1
        return batch

    def next_due(self) -> float | None:
        """When the oldest open batch must leave (monotonic seconds), or None when none is open."""
        for batch in self.open.values():
            return batch.opened + self.wait
        return None

    def flush_due(self, now: float | None = None) -> None:
        """Emit every batch whose first word is ``wait`` old."""
        limit = (self.clock() if now is None else now) - self.wait
        while self.open:
            target, batch = next(iter(self.open.items()))
            if batch.opened > limit:
                break
            self._send(target)

    def serve(self, lock: threading.Condition, written: Callable[[], None]) -> None:
        """A timer thread's loop (``RouterBolt._flusher``'s): under ``lock``, sleep until the oldest open batch is
        due, emit it and call ``written`` (write the emits now: the main thread may be waiting for input). The adder
        holds ``lock`` too, and notifies it when it opens a batch while none was open. Returns only by raising."""
        with lock:
            while True:
                due = self.next_due()
                wait = None if due is None else due - self.clock()
                if wait is None or wait > 0:
                    lock.wait(wait)
                else:
                    self.flush_due()
                    written()

    def flush_all(self) -> None:
        while self.open:
            self._send(next(iter(self.open)))

    def _send(self, target: int) -> None:
        batch = self.open.pop(target)
        self.emit(target, batch)  # anchored to input tuples not acked yet: their references include this batch
        self.batches += 1
        self.items += len(batch.items)
        for tup in batch.inputs:
            self._release(tup)

    def _release(self, tup: Hashable) -> None:
        left = self.refs[tup] - 1
        if left:
            self.refs[tup] = left
        else:
            del self.refs[tup]
            self.ack(tup)
