"""Exactly-once totals: idempotent commits of word occurrences, forgotten behind a low watermark of lines.

Every word occurrence has an identity that no replay changes: ``(line, position)``, the line's sequence number
in the feed (0, 1, 2, ... as loaded) and the word's position in it. The router sends it with every word; a
counter keeps the occurrences each partial count covers and sends them with the count; the aggregator, where a
count becomes a total, commits a batch of counts in one Redis script (:data:`COMMIT`) that adds to a word's
total only the occurrences not committed before, and marks them committed, atomically. A replay of a line,
whichever counters a load-aware grouping sends its words to this time, carries the same identities, so it adds
nothing that was already added; a stale tuple of an earlier attempt that arrives late is just as harmless.

What is remembered, and when it is forgotten (Redis, per run; :class:`~keysplit.storm.keys.RunKeys`):

- ``dedup:seen``, a hash with a field ``"line:position"`` per committed occurrence of a line not yet complete;
- ``dedup:done``, the set of complete lines at or above the floor, and ``dedup:floor``, the lowest line that is
  not complete (every line below it is);
- ``dedup:dropped``, how many occurrences the commits dropped as counted before, and ``dedup:peak``, the most
  marks ``seen`` ever held (measures, not state).

A line is complete when its spout gets the ack of its whole tuple tree: in Storm that means every bolt acked
every tuple of it, and the aggregators ack only after the commit, so every occurrence of the line is in the
totals. The spout then runs :data:`COMPLETE` (in the same transaction as the ``XACK``): the line joins ``done``,
its fields leave ``seen``, and the floor moves past every complete line. A commit drops any occurrence of a line
below the floor or in ``done``: that line is already counted in full. Nothing else is kept, so the memory is that
of the lines in flight: the spouts never emit a line more than ``window`` lines above the floor
(:class:`~keysplit.storm.feed.StreamFeed`), which bounds both sets whatever the stream's length.

Both scripts are idempotent, so a client may retry them after a lost connection, and a Redis restarted from its
append-only file holds a prefix of the commands, where the totals and the marks always agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import redis

from keysplit.storm.counting import encode_occurrences
from keysplit.storm.keys import RunKeys

#: Delivery guarantees of the word count's totals (``keysplit.delivery``); the first is the default.
DELIVERIES = ("exactly-once", "at-least-once")

# KEYS: counts, seen, done, floor, dropped, peak. ARGV[1]: JSON [word, ...]; ARGV[2]: JSON [[line, pos, line, pos,
# ...], ...], each word's occurrences (two arrays, so that the client builds the second from the texts tuples carry).
# Returns each word's total after the commit, in order (what the aggregator's top-k must show); counts the
# occurrences it drops as committed before in ``dropped``, and the most marks ever held in ``peak``.
COMMIT = """
local floor = tonumber(redis.call('GET', KEYS[4]) or '0')
local complete = {}
local function counted(line)
  local c = complete[line]
  if c == nil then
    c = line < floor or redis.call('SISMEMBER', KEYS[3], string.format('%d', line)) == 1
    complete[line] = c
  end
  return c
end
local totals, dropped = {}, 0
local occurrences = cjson.decode(ARGV[2])
for i, word in ipairs(cjson.decode(ARGV[1])) do
  -- one HSET per word (per 1000 occurrences), not one HSETNX per occurrence: it returns how many of its fields
  -- were new, which is the count to add (an occurrence twice in the list is new once, as HSETNX in turn said);
  -- the calls, not the hash operations, were most of the script's time
  local occ, new, fields = occurrences[i], 0, {}
  for j = 1, #occ, 2 do
    if not counted(occ[j]) then
      fields[#fields + 1] = string.format('%d:%d', occ[j], occ[j + 1])
      fields[#fields + 1] = '1'
      if #fields == 2000 then new = new + redis.call('HSET', KEYS[2], unpack(fields)); fields = {} end
    end
  end
  if #fields > 0 then new = new + redis.call('HSET', KEYS[2], unpack(fields)) end
  dropped = dropped + #occ / 2 - new
  if new > 0 then
    totals[i] = redis.call('HINCRBY', KEYS[1], word, new)
  else
    totals[i] = tonumber(redis.call('HGET', KEYS[1], word) or '0')
  end
end
if dropped > 0 then redis.call('INCRBY', KEYS[5], dropped) end
local held = redis.call('HLEN', KEYS[2])
if held > tonumber(redis.call('GET', KEYS[6]) or '0') then redis.call('SET', KEYS[6], held) end
return totals
"""

# KEYS: seen, done, floor. ARGV: line, words, line, words, ... of lines whose tuple trees completed.
# Returns the new floor.
COMPLETE = """
local floor = tonumber(redis.call('GET', KEYS[3]) or '0')
-- the lines' SADDs and their marks' HDELs go in calls of up to 1000 members, whatever the lines' lengths
local lines, fields = {}, {}
for i = 1, #ARGV, 2 do
  if tonumber(ARGV[i]) >= floor then
    lines[#lines + 1] = ARGV[i]
    if #lines == 1000 then redis.call('SADD', KEYS[2], unpack(lines)); lines = {} end
    for p = 0, tonumber(ARGV[i + 1]) - 1 do
      fields[#fields + 1] = ARGV[i] .. ':' .. p
      if #fields == 1000 then redis.call('HDEL', KEYS[1], unpack(fields)); fields = {} end
    end
  end
end
if #lines > 0 then redis.call('SADD', KEYS[2], unpack(lines)) end
if #fields > 0 then redis.call('HDEL', KEYS[1], unpack(fields)) end
local start = floor
while redis.call('SREM', KEYS[2], string.format('%d', floor)) == 1 do floor = floor + 1 end
if floor ~= start then redis.call('SET', KEYS[3], floor) end
return floor
"""


class Dedup:
    """The run's commit and completion scripts on one connection (registered once, run by SHA)."""

    def __init__(self, conn: redis.Redis, keys: RunKeys) -> None:
        self.keys = keys
        self._commit = conn.register_script(COMMIT)
        self._complete = conn.register_script(COMPLETE)

    def commit(self, batch: Sequence[tuple[str, str | Sequence[int]]], client: redis.Redis | None = None
               ) -> list[int]:
        """Add each word's occurrences ``[line, pos, line, pos, ...]`` not counted before; the words' totals. The
        occurrences may be given as the text a tuple carries them in (``"7,0,7,2"``): the script's JSON is built
        around it, never parsed."""
        k = self.keys
        words = json.dumps([word for word, _ in batch], separators=(",", ":"), ensure_ascii=False)
        texts = (occ if isinstance(occ, str) else encode_occurrences(occ) for _, occ in batch)
        return self._commit(keys=[k.counts, k.dedup_seen, k.dedup_done, k.dedup_floor, k.dedup_dropped, k.dedup_peak],
                            args=[words, f"[[{'],['.join(texts)}]]" if batch else "[]"], client=client)

    def complete(self, lines: Iterable[tuple[int, int]], client=None):
        """Lines ``(line, words)`` whose tuple trees completed: forget their marks, move the floor (returned;
        in a pipeline ``client``, its result)."""
        args = [v for line in lines for v in line]
        k = self.keys
        return self._complete(keys=[k.dedup_seen, k.dedup_done, k.dedup_floor], args=args, client=client)


def floor(conn: redis.Redis, keys: RunKeys) -> int:
    """The lowest line not yet complete (every line below it is counted in full)."""
    return int(conn.get(keys.dedup_floor) or 0)


def dropped(conn: redis.Redis, keys: RunKeys) -> int:
    """Occurrences the commits dropped because they were committed before (replays, stale tuples)."""
    return int(conn.get(keys.dedup_dropped) or 0)


def peak_marks(conn: redis.Redis, keys: RunKeys) -> int:
    """The most commit marks the run ever held at once (kept by the commit script: exact, not sampled)."""
    return int(conn.get(keys.dedup_peak) or 0)


def memory(conn: redis.Redis, keys: RunKeys) -> tuple[int, int]:
    """``(bytes, marks)``: Redis memory of the de-duplication state now, and the committed occurrences it marks."""
    pipe = conn.pipeline(transaction=False)
    for key in (keys.dedup_seen, keys.dedup_done, keys.dedup_floor):
        pipe.memory_usage(key)
    pipe.hlen(keys.dedup_seen)
    *sizes, marks = pipe.execute()
    return sum(s or 0 for s in sizes), int(marks)
