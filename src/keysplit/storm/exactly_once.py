"""Exactly-once totals: idempotent commits of word occurrences, forgotten behind a low watermark of lines.

Every word occurrence has an identity that no replay changes: ``(line, position)``, the line's sequence number
in the feed (0, 1, 2, ... as loaded) and the word's position in it. The router sends it with every word; a
counter keeps the occurrences each partial count covers and sends them with the count; the aggregator, where a
count becomes a total, commits a batch of counts in one Redis script (:data:`COMMIT`) that adds to a word's
total only the occurrences not committed before, and marks them committed, atomically. A replay of a line,
whichever counters a load-aware grouping sends its words to this time, carries the same identities, so it adds
nothing that was already added; a stale tuple of an earlier attempt that arrives late is just as harmless.

What is remembered, and when it is forgotten (Redis, per run; :class:`~keysplit.storm.keys.RunKeys`):

- ``dedup:seen``, a hash of commit marks: field ``"line:segment"``, a bit mask of the committed positions
  ``segment * SPAN`` to ``segment * SPAN + SPAN - 1`` of a line at or above the floor (one field for a line of up
  to :data:`SPAN` words);
- ``dedup:done``, a hash of the complete lines above the floor (each with its number of mark fields), and
  ``dedup:floor``, the lowest line that is not complete (every line below it is);
- ``dedup:dropped``, how many occurrences the commits dropped as counted before, and ``dedup:peak``, the most
  mark fields ``seen`` ever held (measures, not state).

A line is complete when its spout gets the ack of its whole tuple tree: in Storm that means every bolt acked
every tuple of it, and the aggregators ack only after the commit, so every occurrence of the line is in the
totals and its marks have every bit set. The spout then completes it (:data:`COMPLETE_LINES`) in the one script
that also XACKs it (storm/feed.py, :data:`~keysplit.storm.feed.ACK`), so a line is XACKed if and only if it is
complete, whatever connection is lost or server restarted meanwhile: the line joins ``done`` and the floor moves
past every complete line, deleting their marks. A commit
drops any occurrence of a line below the floor, or whose bit is set: a complete line above the floor keeps its
marks until the floor passes it. Nothing else is kept, so the memory is that of the lines in flight: the spouts
never emit a line more than ``window`` lines above the floor (:class:`~keysplit.storm.feed.StreamFeed`), which
bounds both hashes whatever the stream's length.

Every script is idempotent, so a client may retry it whole after a lost connection (redis-py loads it again when a
restarted server answers NOSCRIPT), and a Redis restarted from its append-only file holds a prefix of the scripts'
effects, where the totals and the marks always agree. A line XACKed but never completed (by a keysplit before the
two were one script) is completed by the spouts when they see the floor stall (storm/feed.py, ``heal_floor``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import redis

from keysplit.storm.keys import RunKeys
from keysplit.storm.streams import encode_occurrences

#: Delivery guarantees of the word count's totals (``keysplit.delivery``); the first is the default.
DELIVERIES = ("exactly-once", "at-least-once")

#: Positions of a line one commit mark holds: a mark is a bit mask in a Redis hash field, read and written by Lua
#: as a double, which holds every integer below 2^53 exactly.
SPAN = 48

# KEYS: counts, seen, floor, dropped, peak, loads once (not done: see below). ARGV[1]: JSON [word, ...]; ARGV[2]: JSON
# [[line, pos, line, pos, ...], ...], each word's occurrences (two arrays, so that the client builds the second from
# the texts tuples carry); ARGV[3] (optional): JSON [counter, ...], the counter task each word's entry came from.
# Each counter's load, the words it counted once, grows by the occurrences its entries commit first (``loads:once``):
# after any replay or restart the loads add up to the words of the feed, once each.
# Returns each word's total after the commit, in order (what the aggregator's top-k must show); counts the
# occurrences it drops as committed before in ``dropped``, and the most marks ever held in ``peak``.
#
# The marks: field "line:segment" of ``seen``, bit p of it set when position segment * SPAN + p of the line is
# committed. One field per line of up to SPAN words, not one per occurrence: the script reads the fields its
# occurrences fall in with one HMGET, sets their bits in Lua and writes the changed ones with one HSET, where a
# field per occurrence cost a string, a hash entry and an append-only-file record each (and as many again to
# delete). A complete line above the floor keeps its marks, every bit set, until the floor passes it (COMPLETE), so
# a commit asks nothing but the floor to know what is counted in full.
COMMIT = """
local floor = tonumber(redis.call('GET', KEYS[3]) or '0')
local words, occurrences = cjson.decode(ARGV[1]), cjson.decode(ARGV[2])
local mfloor = math.floor
-- each occurrence's mark field (an index into fields) and bit, in order; 0 for a line below the floor
local fields, slot, where, bit, n = {}, {}, {}, {}, 0
for i = 1, #words do
  local occ = occurrences[i]
  for j = 1, #occ, 2 do
    local line, pos = occ[j], occ[j + 1]
    n = n + 1
    if line < floor then
      where[n] = 0
    else
      local segment = mfloor(pos / SPAN)
      local key = line  -- a number for a line's first segment (most lines have no other), else a string
      if segment > 0 then key = line .. ':' .. segment end
      local f = slot[key]
      if f == nil then
        fields[#fields + 1] = string.format('%d:%d', line, segment)
        f = #fields
        slot[key] = f
      end
      where[n], bit[n] = f, 2 ^ (pos - segment * SPAN)
    end
  end
end
local marks = {}
for s = 1, #fields, 1000 do
  local part = redis.call('HMGET', KEYS[2], unpack(fields, s, math.min(s + 999, #fields)))
  for k = 1, #part do marks[s + k - 1] = tonumber(part[k]) or 0 end
end
local counters = (ARGV[3] and #ARGV[3] > 0) and cjson.decode(ARGV[3]) or nil
local counted = {}
local totals, dropped, changed, k = {}, 0, {}, 0
for i, word in ipairs(words) do
  local new = 0
  for _ = 1, #occurrences[i], 2 do
    k = k + 1
    local f = where[k]
    if f > 0 then
      local b, m = bit[k], marks[f]
      if m % (b + b) < b then  -- not committed before (nor earlier in this commit)
        marks[f] = m + b
        changed[f] = true
        new = new + 1
      end
    end
  end
  dropped = dropped + #occurrences[i] / 2 - new
  if counters and new > 0 then counted[counters[i]] = (counted[counters[i]] or 0) + new end
  if new > 0 then
    totals[i] = redis.call('HINCRBY', KEYS[1], word, new)
  else
    totals[i] = tonumber(redis.call('HGET', KEYS[1], word) or '0')
  end
end
local out = {}
for f in pairs(changed) do
  out[#out + 1] = fields[f]
  out[#out + 1] = string.format('%.0f', marks[f])
  if #out == 2000 then redis.call('HSET', KEYS[2], unpack(out)); out = {} end
end
if #out > 0 then redis.call('HSET', KEYS[2], unpack(out)) end
if dropped > 0 then redis.call('INCRBY', KEYS[4], dropped) end
for counter, n in pairs(counted) do redis.call('HINCRBY', KEYS[6], counter, n) end
local held = redis.call('HLEN', KEYS[2])
if held > tonumber(redis.call('GET', KEYS[5]) or '0') then redis.call('SET', KEYS[5], held) end
return totals
""".replace("SPAN", str(SPAN))

# A Lua function: complete the lines ``(line, words)`` given as ARGV[first], ARGV[first + 1], ... up to ARGV[last]
# (KEYS seen, done, floor by name) and return the new floor. ``done`` maps a complete line above the floor to its
# number of mark fields, so that the floor, passing it later, deletes them; the lines of this call the floor passes
# at once never enter it. A line given again (a retried call, a line completed twice) changes nothing.
COMPLETE_LINES = """
local function complete_lines(seen, done, floorkey, args, first, last)
  local floor = tonumber(redis.call('GET', floorkey) or '0')
  local segments = {}
  for i = first, last, 2 do
    local line = tonumber(args[i])
    if line >= floor then segments[line] = math.ceil(tonumber(args[i + 1]) / SPAN) end
  end
  -- move the floor past every complete line, forgetting its marks (HDELs of up to 1000 fields)
  local start, fields, passed = floor, {}, {}
  while true do
    local name, count = string.format('%d', floor), segments[floor]
    if count ~= nil then
      segments[floor] = nil
    else
      count = tonumber(redis.call('HGET', done, name))
      if count == nil then break end
    end
    passed[#passed + 1] = name  -- also a line of this call: a retried call may have put it in done already
    if #passed == 1000 then redis.call('HDEL', done, unpack(passed)); passed = {} end
    for segment = 0, count - 1 do
      fields[#fields + 1] = string.format('%d:%d', floor, segment)
      if #fields == 1000 then redis.call('HDEL', seen, unpack(fields)); fields = {} end
    end
    floor = floor + 1
  end
  if #passed > 0 then redis.call('HDEL', done, unpack(passed)) end
  if #fields > 0 then redis.call('HDEL', seen, unpack(fields)) end
  if floor ~= start then redis.call('SET', floorkey, floor) end
  -- the other lines of this call wait in done for the floor
  local rest = {}
  for line, count in pairs(segments) do
    rest[#rest + 1] = string.format('%d', line)
    rest[#rest + 1] = count
    if #rest == 2000 then redis.call('HSET', done, unpack(rest)); rest = {} end
  end
  if #rest > 0 then redis.call('HSET', done, unpack(rest)) end
  return floor
end
""".replace("SPAN", str(SPAN))

# KEYS: seen, done, floor. ARGV: line, words, line, words, ... of lines whose tuple trees completed. Returns the new
# floor. (The spout runs COMPLETE_LINES in its acknowledgement script instead, with the XACK: storm/feed.py.)
COMPLETE = COMPLETE_LINES + "return complete_lines(KEYS[1], KEYS[2], KEYS[3], ARGV, 1, #ARGV)\n"


class Dedup:
    """The run's commit and completion scripts on one connection (registered once, run by SHA)."""

    def __init__(self, conn: redis.Redis, keys: RunKeys) -> None:
        self.keys = keys
        self._commit = conn.register_script(COMMIT)
        self._complete = conn.register_script(COMPLETE)

    def commit(self, batch: Sequence[tuple[str, str | Sequence[int]]], client: redis.Redis | None = None,
               counters: Sequence[int] | None = None) -> list[int]:
        """Add each word's occurrences ``[line, pos, line, pos, ...]`` not counted before; the words' totals. The
        occurrences may be given as the text a tuple carries them in (``"7,0,7,2"``): the script's JSON is built
        around it, never parsed. ``counters``: the counter each entry came from, whose load (``loads:once``) grows
        by the occurrences it counts first. A word may have several entries (one per counter)."""
        k = self.keys
        words = json.dumps([word for word, _ in batch], separators=(",", ":"), ensure_ascii=False)
        texts = (occ if isinstance(occ, str) else encode_occurrences(occ) for _, occ in batch)
        return self._commit(keys=[k.counts, k.dedup_seen, k.dedup_floor, k.dedup_dropped, k.dedup_peak, k.loads_once],
                            args=[words, f"[[{'],['.join(texts)}]]" if batch else "[]",
                                  json.dumps(list(counters)) if counters is not None else ""], client=client)

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
    """The most mark fields the run ever held at once (kept by the commit script: exact, not sampled); one a line
    above the floor with a committed word, for lines of up to :data:`SPAN` words."""
    return int(conn.get(keys.dedup_peak) or 0)


def memory(conn: redis.Redis, keys: RunKeys) -> tuple[int, int]:
    """``(bytes, marks)``: Redis memory of the de-duplication state now, and its mark fields (:data:`SPAN`)."""
    pipe = conn.pipeline(transaction=False)
    for key in (keys.dedup_seen, keys.dedup_done, keys.dedup_floor):
        pipe.memory_usage(key)
    pipe.hlen(keys.dedup_seen)
    *sizes, marks = pipe.execute()
    return sum(s or 0 for s in sizes), int(marks)
