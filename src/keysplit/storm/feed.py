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
``XACK`` and the completion script run in one transaction, which forgets the line's commit marks and returns the
floor (the lowest incomplete line). A fresh line is emitted only below ``floor + window``, so the marks Redis
keeps never cover more than ``window`` lines, however long the stream.

With a :class:`~keysplit.storm.window.AdaptiveWindow` (``flow``) the spout keeps at most that window's lines out
(replays included: a line failed and not yet sent again is not out), and tells it each ack and each timeout (a
fail of a line emitted at least ``timeout_secs`` ago): the rule against Storm's timeout meltdown
(storm/window.py).

Every Redis call may be retried by the client after a lost connection; a retried ``XREADGROUP ... >`` may have
delivered entries whose reply was lost, so an idle spout re-reads its own pending list every second and emits
what it holds there and does not know of.
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

#: Seconds between re-reads of an idle spout's own pending list (entries a lost XREADGROUP reply delivered).
PENDING_REREAD_SECS = 1.0
#: Seconds between reads of the floor while the window holds the next line back.
FLOOR_POLL_SECS = 0.02


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
        self.replayed = 0
        self.first_emit = 0.0
        self.last_ack = 0.0
        self._own_pending_read = False
        self._next_pending_reread = clock() + PENDING_REREAD_SECS  # the first read of it comes anyway
        self._last_ack_flush = 0.0
        self._next_orphan_check = 0.0

    # -- reading ---------------------------------------------------------------------------------------

    def next(self) -> tuple[str, str, int, int] | None:
        """The next ``(entry id, encoded record, line, source)`` to emit (a replay first), or None when nothing is
        ready; ``source`` is the router the line was dealt to when the feed was loaded, -1 if it was not."""
        now = self.clock()
        if self.ack_buffer and now - self._last_ack_flush >= self.ack_flush_secs:
            self.flush_acks()
        if self.flow is not None and not self.flow.allows(self.out):
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
            if not self.first_emit:
                self.first_emit = now
            return entry_id, record, line, source
        return None

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
            self.floor = exactly_once.floor(self.conn, self.keys)
        return line < self.floor + self.window

    def _fill(self, now: float) -> None:
        if not self._own_pending_read:
            self._read_own_pending()
            if self.buffer:
                return
        response = self.conn.xreadgroup(FEED_GROUP, self.consumer, {self.stream: ">"}, count=self.batch)
        for _stream, entries in response or []:
            self._take(entries, replay=False)
        if self.buffer:
            return
        if now >= self._next_pending_reread:
            self._next_pending_reread = now + PENDING_REREAD_SECS
            self.flush_acks()  # acked entries leave the pending list first: only unknown ones are read back
            self._read_own_pending()
        if not self.buffer and now >= self._next_orphan_check:
            self._next_orphan_check = now + self.orphan_idle_ms / 2000.0
            self._claim_orphans()

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
        gone = []
        for entry_id, data in entries:
            if not data:  # the entry was deleted from the stream while pending
                gone.append(entry_id)
                continue
            # runs loaded before lines had sequence numbers have no "s" (they run at-least-once)
            self.buffer.append((entry_id, data["r"], int(data.get("s", -1)), int(data.get("d", -1)), replay))
        if gone:
            self.conn.xack(self.stream, FEED_GROUP, *gone)

    # -- acknowledgements ------------------------------------------------------------------------------

    def ack(self, entry_id: str) -> None:
        """The tuple tree of ``entry_id`` completed: record its latency and XACK it (batched)."""
        item = self.in_flight.pop(entry_id, None)
        if item is None:
            return  # an ack for a tuple this process never emitted (or already acked)
        now = self.clock()
        self.histogram.record((now - item[1]) * 1000.0)
        self.acked += 1
        self.last_ack = now
        if self.flow is not None:
            self.flow.on_ack(self.out, now, now - item[1])
        self.ack_buffer.append(entry_id)
        if self.dedup is not None:
            self.completed.append((item[2], len(decode_record(item[0])[1])))
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
            if self.flow is not None and now - sent >= self.timeout_secs:
                self.flow.on_timeout(sent, self.out, now)
            self.replays.append(entry_id)
            self._queued.add(entry_id)

    def flush_acks(self) -> None:
        """XACK the buffered ids, complete their lines (exactly-once) and, in the same transaction, write the
        metrics that include them."""
        if self.ack_buffer:
            pipe = self.conn.pipeline(transaction=True)
            pipe.xack(self.stream, FEED_GROUP, *self.ack_buffer)
            if self.completed:
                self.dedup.complete(self.completed, client=pipe)  # type: ignore[union-attr]
            if self.metrics_key:
                pipe.hset(self.metrics_key, mapping=self.metrics())
            results = pipe.execute()
            if self.completed:
                self.floor = int(results[1])
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
        self.replayed = int(old["replayed"])
        self.first_emit = float(old["first_emit"])
        self.last_ack = float(old["last_ack"])
        if self.flow is not None and "window" in old:  # a restarted spout goes on at the window it had reached
            self.flow.restore(int(old["window"]), int(old["window_min"]), int(old["window_cuts"]))

    def metrics(self) -> dict[str, str | int | float]:
        """What the spout writes to ``...:spout:<i>``."""
        return {
            "emitted": self.emitted,
            "acked": self.acked,
            "replayed": self.replayed,
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
    """True when every entry of the feed has been delivered and acknowledged."""
    info = conn.xinfo_stream(keys.feed)
    last = info["last-generated-id"]
    for group in conn.xinfo_groups(keys.feed):
        if group["name"] == FEED_GROUP:
            return group["pending"] == 0 and group["last-delivered-id"] == last
    return False
