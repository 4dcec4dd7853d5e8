"""The spout's logic: read dataset records from a Redis stream with a consumer group, at least once.

Each spout task is one consumer (``spout-<index>``) of the group ``spouts`` on the run's feed stream; Redis
remembers every entry delivered to a consumer until it is XACKed (the pending entries list, PEL). That
gives Storm's guarantee without any state in the spout process:

- a tuple's id is its stream entry id; ``ack`` XACKs it (batched);
- ``fail`` (a failed or timed-out tuple tree) re-emits the entry and XCLAIMs it to reset its idle time, so
  no other consumer takes it over while it is being replayed;
- a restarted spout first re-reads its own PEL (``XREADGROUP ... 0``): entries delivered before the crash
  and never acked are replayed;
- entries idle longer than ``orphan_idle_ms`` in another consumer's PEL (a consumer that no longer runs,
  e.g. after the spout parallelism changed) are taken over with XAUTOCLAIM and replayed.

The complete latency of a tuple (emit to ack, Storm's "complete latency") goes into a mergeable
:class:`~keysplit.latency.LatencyHistogram`.

With a :class:`~keysplit.storm.exactly_once.Dedup` (exactly-once totals) an ack also completes the line: the
``XACK``, the completion and the spout's metrics are one script (:data:`ACK`), which forgets the line's commit marks
and returns the floor (the lowest incomplete line). One script is one unit however it is retried: a lost reply or a
restarted server makes the client send it again whole (loaded again on NOSCRIPT), and XACKing or completing a line
twice changes nothing. (In a MULTI/EXEC, a retry on a restarted server ran the ``XACK`` and failed the script with
NOSCRIPT: lines acked and never complete, a floor that never moved again.) A fresh line is emitted only below
``floor + window``, so the marks Redis keeps never cover more than ``window`` lines, however long the stream.

With a :class:`~keysplit.storm.window.AdaptiveWindow` (``flow``) the spout keeps at most that window's lines out
(replays included: a line failed and not yet sent again is not out), and tells it each ack and each timeout (a
fail of a line emitted at least ``timeout_secs`` ago): the rule against Storm's timeout meltdown
(storm/window.py).

Every Redis call may be retried by the client after a lost connection; a retried ``XREADGROUP ... >`` may have
delivered entries whose reply was lost. So every :data:`PENDING_REREAD_SECS`, whatever its buffer holds, the spout
compares its own pending list with the entries it knows (in flight or buffered) and takes the others back
(``XCLAIM``) to emit them; waiting until the buffer is empty would wait forever under the exactly-once window,
where the buffer always holds the next line while the lost ones hold the floor.

A floor that does not move for :data:`HEAL_SECS` while the window holds lines back is looked at
(:meth:`StreamFeed.heal_floor`): lines the group delivered that no pending list holds were XACKed, so their trees
completed; any of them not complete (a keysplit before :data:`ACK` could leave such lines) is completed then. The
spout heals itself, on the local runner and on a Storm cluster alike: no ``--resume`` is needed.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import redis

from keysplit.datasets import decode_record
from keysplit.latency import SPOUT_BITS, LatencyHistogram
from keysplit.storm import exactly_once
from keysplit.storm.exactly_once import Dedup
from keysplit.storm.keys import FEED_GROUP, RunKeys
from keysplit.storm.window import AdaptiveWindow

#: Seconds between checks of a spout's own pending list for entries it does not know (a lost XREADGROUP reply).
PENDING_REREAD_SECS = 1.0
#: Seconds the floor may stay where it is, with the window holding lines back, before the spout looks for lines
#: XACKed and not complete (and between two such looks).
HEAL_SECS = 5.0
#: Entry ids one XPENDING or XACK call takes at most.
ID_CHUNK = 1000

# The spout's acknowledgement, one script: XACK the entries, complete their lines (exactly-once) and write the
# spout's metrics. KEYS: stream, seen, done, floor, metrics. ARGV: group, n, n entry ids, m, m values (line, words,
# line, words, ...), then the metrics' field, value, ... Returns the floor. Run again whole after a lost reply,
# it changes nothing: an XACKed entry is not XACKed again, a complete line not completed again.
ACK = exactly_once.COMPLETE_LINES + """
local n = tonumber(ARGV[2])
for i = 3, 2 + n, ID_CHUNK do
  redis.call('XACK', KEYS[1], ARGV[1], unpack(ARGV, i, math.min(i + ID_CHUNK - 1, 2 + n)))
end
local m = tonumber(ARGV[3 + n])
local floor
if m > 0 then
  floor = complete_lines(KEYS[2], KEYS[3], KEYS[4], ARGV, 4 + n, 3 + n + m)
else
  floor = tonumber(redis.call('GET', KEYS[4]) or '0')
end
if #ARGV > 3 + n + m then redis.call('HSET', KEYS[5], unpack(ARGV, 4 + n + m, #ARGV)) end
return floor
""".replace("ID_CHUNK", str(ID_CHUNK))
#: Seconds between reads of the floor while the window holds the next line back.
FLOOR_POLL_SECS = 0.02
#: An idle spout's first and longest rest in a ``next`` (seconds; :meth:`StreamFeed.rest`).
IDLE_REST_SECS, IDLE_REST_MAX_SECS = 0.001, 0.1


class StreamFeed:
    """One spout task's reader of a run's feed: every line at least once, and with ``dedup`` each line completed
    (its commit marks forgotten) once it is acked."""

    def __init__(
        self,
        conn: redis.Redis,
        keys: RunKeys,
        consumer: str,
        *,
        batch: int = 256,
        orphan_idle_ms: int = 90_000,
        ack_flush_secs: float = 0.05,
        metrics_key: str | None = None,
        clock: Callable[[], float] = time.time,
        dedup: Dedup | None = None,
        window: int = 0,
        flow: AdaptiveWindow | None = None,
        timeout_secs: float = 30.0,
        words: Callable[[str], int] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.conn = conn
        self.stream = keys.feed
        self.consumer = consumer
        self.batch = batch
        self.orphan_idle_ms = orphan_idle_ms
        self.ack_flush_secs = ack_flush_secs
        self.clock = clock
        self.metrics_key = metrics_key
        self.keys = keys
        self.dedup = dedup
        self.window = window if dedup is not None else 0
        self.flow = flow
        self.timeout_secs = timeout_secs
        # how many commit marks a line's record can have: its words (the word count), or one (a toolkit feed's row)
        self.words = words or (lambda record: len(decode_record(record)[1]))
        self.floor = 0  # the lowest incomplete line, as last read (exactly-once)
        self._next_floor_read = 0.0
        # entry id -> (encoded record, last emit time, line number in the feed)
        self.in_flight: dict[str, tuple[str, float, int, int]] = {}  # entry id -> (record, sent, line, source)
        self.buffer: deque[tuple[str, str, int, int, bool]] = deque()  # (entry id, record, line, source, replay)
        self.replays: deque[str] = deque()
        self._queued: set[str] = set()  # the ids in ``replays``: a line failed twice before resending goes once
        self.ack_buffer: list[str] = []
        self.completed: list[tuple[int, int]] = []  # (line, words) of the acked lines in ack_buffer
        self.histogram = LatencyHistogram(bits=SPOUT_BITS)
        self.emitted = 0
        self.acked = 0
        self.rows_acked = 0  # a toolkit feed's rows (an entry holds one or more: toolkit/spout.py); else its lines
        self.replayed = 0
        self.timed_out = 0  # lines failed a message timeout or more after their emit (Storm's timeouts, in lines)
        self.first_emit = 0.0
        self.last_ack = 0.0
        self.healed = 0  # lines this process found XACKed and not complete, and completed (heal_floor)
        self._own_pending_read = False
        self._next_pending_reread = clock() + PENDING_REREAD_SECS  # the first read of it comes anyway
        self._last_ack_flush = 0.0
        self._next_orphan_check = 0.0
        self._floor_moved = clock()  # when the floor last moved (as this spout saw it)
        self._next_heal = 0.0
        self._ack = conn.register_script(ACK)
        self.sleep = sleep
        self.drained = False  # the last read of the feed found no entry
        self.rest_secs = 0.0  # the idle spout's last rest (0: it was not idle)
        #: Whether the line :meth:`next` returned last may have been emitted before: a replay of a failed or timed-out
        #: tree, or a line taken back from a pending list (after a restart, a lost reply, an orphan). False only for a
        #: line's first emission, read from the group with ``>`` (each entry is delivered so once to the whole group):
        #: the toolkit's partials fold such rows into one state (toolkit/aggregate.py) and keep the others apart.
        self.replaying = False

    # -- reading ---------------------------------------------------------------------------------------

    def next(self) -> tuple[str, str, int, int] | None:
        """The next ``(entry id, encoded record, line, source)`` to emit (a replay first), or None when nothing is
        ready; ``source`` is the router the line was dealt to when the feed was loaded, -1 if it was not."""
        now = self.clock()
        if self.ack_buffer and now - self._last_ack_flush >= self.ack_flush_secs:
            self.flush_acks()
        if self._own_pending_read and now >= self._next_pending_reread:
            self._next_pending_reread = now + PENDING_REREAD_SECS
            self._take_unknown_pending()
        if self.flow is not None and not self.flow.allows(self.out, now):
            return None  # the adaptive window is full: Storm calls again, and we emit nothing (storm/window.py)
        while self.replays:
            entry_id = self.replays.popleft()
            self._queued.discard(entry_id)
            item = self.in_flight.get(entry_id)
            if item is None:
                continue
            # reset the entry's idle time and keep it ours while it is replayed
            self.conn.xclaim(self.stream, FEED_GROUP, self.consumer, 0, [entry_id], justid=True)
            self.in_flight[entry_id] = (item[0], now, item[2], item[3])
            self.replayed += 1  # counted when sent again, not when failed: a late ack may cancel the replay
            self.replaying = True
            return entry_id, item[0], item[2], item[3]
        if not self.buffer:
            self._fill(now)
        while self.buffer:
            entry_id, record, line, source, replay = self.buffer[0]
            if entry_id in self.in_flight:
                self.buffer.popleft()
                continue
            if self.window and not replay and not self._in_window(line, now):
                return None  # the window is full: wait for the lowest incomplete line
            self.buffer.popleft()
            self.in_flight[entry_id] = (record, now, line, source)
            self.emitted += 1
            # Lines re-read from a pending list count as replays when they are sent: the process that read
            # them first may have sent them (there is no telling which it had sent).
            self.replayed += replay
            self.replaying = replay
            if not self.first_emit:
                self.first_emit = now
            return entry_id, record, line, source
        return None

    @property
    def idle(self) -> bool:
        """Nothing to do until the feed grows: its last read found nothing, no line is out, buffered or waiting
        for a replay, and every ack is flushed."""
        return self.drained and not self.in_flight and not self.buffer and not self.ack_buffer

    def rest(self) -> float:
        """Called after a ``next`` that emitted nothing: if the feed is :attr:`idle`, sleep, from
        :data:`IDLE_REST_SECS` doubling up to :data:`IDLE_REST_MAX_SECS` while it stays idle; returns the seconds
        slept. Storm's spout wait strategy sleeps 1 ms between two ``nextTuple`` calls that emit nothing
        (``topology.spout.wait.strategy``, WaitStrategyProgressive: apache/storm storm-client/src/jvm/org/apache/
        storm/policy/WaitStrategyProgressive.java, called by executor/spout/SpoutExecutor.java), and each call is a
        multi-lang round trip to this process (spout/ShellSpout.java ``nextTuple``) and here a read of the feed:
        a thousand of each a second, a tenth of a core with no line in sight (docs/benchmarks/storm-cluster.md).
        With nothing out no ack or fail can come, so the rest delays nothing but a line appended to the feed later,
        by at most the longest rest."""
        if not self.idle:
            self.rest_secs = 0.0
            return 0.0
        self.rest_secs = min(IDLE_REST_MAX_SECS, max(IDLE_REST_SECS, 2 * self.rest_secs))
        self.sleep(self.rest_secs)
        return self.rest_secs

    @property
    def out(self) -> int:
        """Lines emitted and neither acked nor failed (a failed line waiting to be sent again is not out)."""
        return len(self.in_flight) - len(self._queued)

    def _in_window(self, line: int, now: float) -> bool:
        """Whether ``line`` is below ``floor + window`` (reading the floor again at most every FLOOR_POLL_SECS)."""
        if line < self.floor + self.window:
            return True
        if now >= self._next_floor_read:
            self._next_floor_read = now + FLOOR_POLL_SECS
            self._set_floor(exactly_once.floor(self.conn, self.keys))
        if line >= self.floor + self.window and now - self._floor_moved >= HEAL_SECS and now >= self._next_heal:
            self._next_heal = now + HEAL_SECS
            self.heal_floor()
        return line < self.floor + self.window

    def _set_floor(self, floor: int) -> None:
        if floor > self.floor:
            self.floor = floor
            self._floor_moved = self.clock()

    def _fill(self, now: float) -> None:
        if not self._own_pending_read:
            self._read_own_pending()
            if self.buffer:
                return
        response = self.conn.xreadgroup(FEED_GROUP, self.consumer, {self.stream: ">"}, count=self.batch)
        for _stream, entries in response or []:
            self._take(entries, replay=False)
        self.drained = not self.buffer
        if self.buffer:
            return
        if now >= self._next_orphan_check:
            self._next_orphan_check = now + self.orphan_idle_ms / 2000.0
            self._claim_orphans()
        if not self.buffer and not self.in_flight and self.window and now >= self._next_heal:
            # nothing to read, nothing out: the last lines of a feed may be XACKed and not complete
            self._next_heal = now + HEAL_SECS
            self.heal_floor()

    def _read_own_pending(self) -> None:
        """Entries delivered to this consumer name before a restart and never acked: replay them all."""
        start = "0"
        while True:
            response = self.conn.xreadgroup(FEED_GROUP, self.consumer, {self.stream: start}, count=self.batch)
            entries = response[0][1] if response else []
            if not entries:
                break
            self._take([e for e in entries if e[0] not in self.in_flight], replay=True)
            start = entries[-1][0]
        self._own_pending_read = True

    def _take_unknown_pending(self) -> None:
        """Take back the entries of this consumer's pending list that it neither has out nor holds in its buffer
        (delivered by a read whose reply was lost) and queue them as replays. XPENDING's summary first: most of the
        time the counts agree and nothing more is read."""
        self.flush_acks()  # acked entries leave the pending list first
        known = self.in_flight.keys() | {item[0] for item in self.buffer}
        summary = self.conn.xpending(self.stream, FEED_GROUP)
        own = next((int(c["pending"]) for c in summary.get("consumers") or [] if c["name"] == self.consumer), 0)
        if own <= len(known):
            return
        unknown, start = [], "-"
        while True:
            rows = self.conn.xpending_range(self.stream, FEED_GROUP, start, "+", ID_CHUNK, consumername=self.consumer)
            unknown += [r["message_id"] for r in rows if r["message_id"] not in known]
            if len(rows) < ID_CHUNK:
                break
            start = "(" + rows[-1]["message_id"]
        for i in range(0, len(unknown), self.batch):  # XCLAIM returns the entries and keeps them ours
            self._take(self.conn.xclaim(self.stream, FEED_GROUP, self.consumer, 0, unknown[i:i + self.batch]),
                       replay=True)

    def heal_floor(self) -> int:
        """Complete the lines above the floor that the group delivered and no pending list holds: an entry leaves
        a pending list only by its XACK, which only a completed tuple tree sends, so such a line is counted in
        full. The lines healed (0 when the floor is held by a line still pending, as it mostly is)."""
        floor = exactly_once.floor(self.conn, self.keys)
        pipe = self.conn.pipeline(transaction=True)  # one moment: delivered by then and not pending at it
        pipe.xinfo_groups(self.stream)
        pipe.xpending(self.stream, FEED_GROUP)
        groups, pending = pipe.execute()
        last = next((g["last-delivered-id"] for g in groups if g["name"] == FEED_GROUP), "0-0")
        lowest = pending["min"] if pending["pending"] else last  # entries below it are XACKed
        first = self.conn.xrange(self.stream, lowest, lowest, count=1)
        if not first or not first[0][1]:
            return 0  # nothing delivered yet, or the entry was deleted
        top = int(first[0][1].get("s", -1))  # the line of that entry: lines follow entry ids
        end, count = ("(" + lowest, top - floor) if pending["pending"] else (lowest, top - floor + 1)
        if count <= 0:
            return 0
        lines = [(int(data["s"]), len(decode_record(data["r"])[1]))
                 for _id, data in self.conn.xrevrange(self.stream, end, "-", count=count)
                 if data and int(data.get("s", -1)) >= floor]
        if not lines:
            return 0
        self._set_floor(int(self.dedup.complete(lines)))  # type: ignore[union-attr]
        self.healed += len(lines)
        return len(lines)

    def _claim_orphans(self) -> None:
        start = "0-0"
        while True:
            result = self.conn.xautoclaim(self.stream, FEED_GROUP, self.consumer, self.orphan_idle_ms,
                                          start_id=start, count=self.batch)
            start, entries = result[0], result[1]
            self._take([e for e in entries if e[0] not in self.in_flight], replay=True)
            if start in ("0-0", b"0-0"):
                break

    def _take(self, entries: list, replay: bool) -> None:
        """Buffer ``entries``; replays (entries read back from a pending list) go first, since the window never holds
        them back while a fresh line it holds back would keep them behind it."""
        gone, items = [], []
        for entry_id, data in entries:
            if not data:  # the entry was deleted from the stream while pending
                gone.append(entry_id)
                continue
            # runs loaded before lines had sequence numbers have no "s" (they run at-least-once)
            items.append((entry_id, data["r"], int(data.get("s", -1)), int(data.get("d", -1)), replay))
        if replay:
            self.buffer.extendleft(reversed(items))
        else:
            self.buffer.extend(items)
        if gone:
            self.conn.xack(self.stream, FEED_GROUP, *gone)

    # -- acknowledgements ------------------------------------------------------------------------------

    def ack(self, entry_id: str, rows: int = 1) -> None:
        """The tuple tree of ``entry_id`` (holding ``rows`` rows) completed: record its latency and XACK it
        (batched)."""
        item = self.in_flight.pop(entry_id, None)
        if item is None:
            return  # an ack for a tuple this process never emitted (or already acked)
        now = self.clock()
        self.histogram.record((now - item[1]) * 1000.0)
        self.acked += 1
        self.rows_acked += rows
        self.last_ack = now
        if self.flow is not None:
            self.flow.on_ack(self.out, now, now - item[1])
        self.ack_buffer.append(entry_id)
        if self.dedup is not None:
            self.completed.append((item[2], self.words(item[0])))
        if len(self.ack_buffer) >= self.batch:
            self.flush_acks()

    def fail(self, entry_id: str) -> None:
        """The tuple tree of ``entry_id`` failed or timed out: emit it again (and, if it timed out, cut the
        adaptive window)."""
        if entry_id in self.in_flight and entry_id not in self._queued:
            sent = self.in_flight[entry_id][1]
            now = self.clock()
            # Storm fails a tree for a timeout no earlier than the timeout after its emit (SpoutExecutor's rotating
            # pending map); the bolts here never fail a tuple themselves, but an older fail is what a timeout is
            if now - sent >= self.timeout_secs:
                self.timed_out += 1
                if self.flow is not None:
                    self.flow.on_timeout(sent, self.out, now)
            self.replays.append(entry_id)
            self._queued.add(entry_id)

    def flush_acks(self) -> None:
        """XACK the buffered ids, complete their lines (exactly-once) and write the metrics that include them: one
        script (:data:`ACK`), retried whole by the client after a lost connection."""
        if self.ack_buffer:
            k = self.keys
            pairs = [v for line in self.completed for v in line]
            metrics = [v for item in self.metrics().items() for v in item] if self.metrics_key else []
            floor = self._ack(keys=[self.stream, k.dedup_seen, k.dedup_done, k.dedup_floor,
                                    self.metrics_key or k.spout(-1)],
                              args=[FEED_GROUP, len(self.ack_buffer), *self.ack_buffer, len(pairs), *pairs, *metrics])
            if self.dedup is not None:
                self._set_floor(int(floor))
            self.ack_buffer.clear()
            self.completed.clear()
        self._last_ack_flush = self.clock()

    def restore(self) -> None:
        """Continue the metrics a previous process of this spout task wrote (after a restart)."""
        if not self.metrics_key:
            return
        old = self.conn.hgetall(self.metrics_key)
        if not old:
            return
        self.histogram = LatencyHistogram.from_json(old["histogram"])
        self.emitted = int(old["emitted"])
        self.acked = int(old["acked"])
        self.rows_acked = int(old.get("rows_acked", self.acked))
        self.replayed = int(old["replayed"])
        self.healed = int(old.get("healed", 0))
        self.timed_out = int(old.get("timed_out", 0))
        self.first_emit = float(old["first_emit"])
        self.last_ack = float(old["last_ack"])
        if self.flow is not None and "window" in old:  # a restarted spout goes on at the window it had reached
            self.flow.restore(int(old["window"]), int(old["window_min"]), int(old["window_cuts"]))

    def metrics(self) -> dict[str, str | int | float]:
        """What the spout writes to ``...:spout:<i>``."""
        return {
            "emitted": self.emitted,
            "acked": self.acked,
            "rows_acked": self.rows_acked,
            "replayed": self.replayed,
            "healed": self.healed,
            "timed_out": self.timed_out,
            "in_flight": len(self.in_flight),
            "first_emit": self.first_emit,
            "last_ack": self.last_ack,
            "histogram": self.histogram.to_json(),
            **(self.flow.metrics() if self.flow is not None else {}),
        }


def create_group(conn: redis.Redis, keys: RunKeys) -> None:
    """Create the spouts' consumer group at the start of the feed (idempotent)."""
    try:
        conn.xgroup_create(keys.feed, FEED_GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def feed_done(conn: redis.Redis, keys: RunKeys) -> bool:
    """True when every entry of the feed has been delivered and acknowledged (or the feed is gone: a finished run
    deletes it, so ``--collect`` of a run finished here reads it as done rather than failing on a missing key)."""
    if not conn.exists(keys.feed):
        return True
    info = conn.xinfo_stream(keys.feed)
    last = info["last-generated-id"]
    for group in conn.xinfo_groups(keys.feed):
        if group["name"] == FEED_GROUP:
            return group["pending"] == 0 and group["last-delivered-id"] == last
    return False


def open_feed(conn: redis.Redis, keys: RunKeys, settings, conf, consumer: str, index: int, *,
              words: Callable[[str], int] | None = None) -> StreamFeed:
    """A spout task's feed as Storm's configuration asks for it, restored (its own pending lines re-read): the
    exactly-once window when ``settings`` deliver exactly once, and the adaptive window within max pending, starting
    at the lines a latency target needs for the feed's words a line (storm/window.py). Both spouts call it: the word
    count's (storm/spout.py) and the toolkit's (keysplit.toolkit.spout)."""
    timeout = float(conf.get("topology.message.timeout.secs", 30))
    max_pending = conf.get("topology.max.spout.pending")
    lines, messages = conn.hmget(keys.record, ("lines", "messages"))  # the feed's, recorded when it was loaded
    feed = StreamFeed(
        conn, keys, consumer,
        orphan_idle_ms=int(3 * timeout * 1000), metrics_key=keys.spout(index),
        dedup=Dedup(conn, keys) if settings.exactly_once else None,
        window=settings.window_lines(max_pending),
        # Storm calls nextTuple below max pending whatever we do; this window keeps the lines out within what
        # completes before the message timeout (storm/window.py)
        flow=AdaptiveWindow(settings.window_policy, int(max_pending) if max_pending else None, timeout,
                            target_secs=settings.latency_target,
                            start=settings.window_start(float(messages or 0) / max(1.0, float(lines or 0))),
                            slow_start=settings.cpu_delay_ms <= 0),
        timeout_secs=timeout, words=words,
    )
    feed.restore()
    return feed
