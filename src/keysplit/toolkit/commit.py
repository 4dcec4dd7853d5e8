"""The exactly-once commit of a merge stage: pre-merged partial states applied once, by the records they cover.

A partial task folds the rows of a key it receives for the first time (a row's first emission, which the feed makes
once per row for the whole run: storm/feed.py ``replaying``) into one state with the user's ``add``, and sends it
once per flush as an **entry** ``(state, records)``: the state and the record ids it covers. A row that may have been
emitted before (a replay) travels as an entry of its own, ``(one(row), [record])``. So the entries of a run cover each
record at most once in a first-emission entry and once in each replay's single entry, and two first-emission entries
never share a record.

:class:`ExactlyOnceCommit` applies a flush's entries to the stored states, each entry whole or not at all, by the
commit marks of the feed (one bit a record, storm/exactly_once.py; a record below the floor is complete, hence
committed):

- **none of its records committed**: ``merge(stored, state)``, one call for the entry however many rows it covers,
  and its records are marked in the same script that writes the state (:data:`COMMIT`);
- **all committed** (a replay whose row a commit already holds, an entry whose rows replays committed first):
  dropped, counted in ``dedup:dropped``;
- **some committed**: a first-emission entry that a replay overtook (its row timed out, was sent again and committed
  while the entry was on its way). Its state cannot be split into rows, so it is not applied and the caller fails the
  tuple that carried it: the tuple tree's rows replay, each in a single entry, and those not committed are counted
  then. Every fresh emission is in one entry, so a second round never meets the same mix;
- **refused by the user's merge** (it raised): the caller's ``refused`` decides: an entry of one row at its last
  attempt is set aside as a dead letter (its record marked, its state not applied: toolkit/deadletter.py), any other
  splits as above, so that its rows come back alone.

The merge's work per flush is one ``merge`` per entry (a key per partial task that sent it) and, per record, a test
of a set and a bit of Redis: the rows a hot key gathers from every partial task are merged where the grouping spread
them. Trident's transactional state stores a batch id beside each value so that a replayed batch is applied once;
here the batch's identity is the set of records, because a load-aware grouping replays a row into another task and
another flush. The commit is a compare-and-set, as before: Python merges (the accumulator is the user's code) and
the script writes only if none of the records it marks was marked, and no state it replaces changed, since the read.
The first attempt reads nothing: it merges into the states the task last committed, and reads the marks, the floor
and the stored states only when the script refuses (after a replay, a restart, a lost reply).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from keysplit.errors import KeysplitError
from keysplit.storm.exactly_once import SPAN
from keysplit.storm.keys import RunKeys
from keysplit.toolkit.accumulators import Accumulator
from keysplit.toolkit.contract import mark_field, record_id

#: Attempts of a commit whose compare-and-set lost (a restarted task's predecessor still finishing its last commit,
#: a state or a mark that the first, optimistic attempt did not read).
COMMIT_ATTEMPTS = 20

# KEYS: seen (commit marks), floor (lowest incomplete entry), results, dropped, committed. ARGV[1]: JSON [record, ...]
# to mark; ARGV[2]: JSON [[key, old state text or false, new state text], ...]; ARGV[3]: records dropped as committed
# before; ARGV[4]: JSON {partial task index: records whose state this commit applies}, added to the committed hash
# (each record's row counted once, at the partial task its commit came from: the loads counted once).
# Returns 1, or 0 (nothing written) when a record is marked or complete, or a state changed, since the caller read
# them: the caller reads again and retries. A record is line + position * 2^32 (toolkit/contract.py record_id), and
# its mark bit ``position % SPAN`` of field "line:segment", segment = position // SPAN: the word count's layout, a row
# being a word of its entry's line (storm/exactly_once.py COMMIT), the fields the feed's completion of the entry
# deletes.
COMMIT = """
local floor = tonumber(redis.call('GET', KEYS[2]) or '0')
local records = cjson.decode(ARGV[1])
local fields, slot, where, bit = {}, {}, {}, {}
for i = 1, #records do
  local r = records[i]
  local line = r % POSITION
  if line < floor then return 0 end
  local position = math.floor(r / POSITION)
  local segment = math.floor(position / SPAN)
  local name = string.format('%d:%d', line, segment)
  local f = slot[name]
  if f == nil then
    fields[#fields + 1] = name
    f = #fields
    slot[name] = f
  end
  where[i], bit[i] = f, 2 ^ (position - segment * SPAN)
end
local marks = {}
for s = 1, #fields, 1000 do
  local part = redis.call('HMGET', KEYS[1], unpack(fields, s, math.min(s + 999, #fields)))
  for k = 1, #part do marks[s + k - 1] = tonumber(part[k]) or 0 end
end
for i = 1, #records do
  local f, b = where[i], bit[i]
  if marks[f] % (b + b) >= b then return 0 end
  marks[f] = marks[f] + b
end
local states = cjson.decode(ARGV[2])
for i = 1, #states do
  local current = redis.call('HGET', KEYS[3], states[i][1])
  if current ~= states[i][2] then return 0 end
end
for s = 1, #fields, 1000 do
  local out = {}
  for k = s, math.min(s + 999, #fields) do
    out[#out + 1] = fields[k]
    out[#out + 1] = string.format('%.0f', marks[k])
  end
  redis.call('HSET', KEYS[1], unpack(out))
end
for i = 1, #states do redis.call('HSET', KEYS[3], states[i][1], states[i][3]) end
if tonumber(ARGV[3]) > 0 then redis.call('INCRBY', KEYS[4], ARGV[3]) end
for origin, n in pairs(cjson.decode(ARGV[4])) do redis.call('HINCRBY', KEYS[5], origin, n) end
return 1
""".replace("POSITION", str(record_id(0, 1))).replace("SPAN", str(SPAN))


@dataclass
class Entry:
    """A partial state and the records it covers, from the input tuple ``source`` (what is failed when it splits)."""

    state: Any
    records: list[int]
    source: Hashable = None
    origin: int = -1  # the index of the partial task that sent it (-1: unknown)


@dataclass
class Outcome:
    """What one commit did: the keys whose state changed (their new states are in :attr:`ExactlyOnceCommit.states`),
    the sources to fail (an entry that a replay overtook), and the work it took."""

    changed: list[str] = field(default_factory=list)
    split: set = field(default_factory=set)
    aside: int = 0  # entries set aside (dead letters: their records are marked, their states not applied)
    merges: int = 0  # accumulator.merge calls of the attempt that committed
    entries: int = 0
    records: int = 0  # records covered by the entries
    dropped: int = 0  # records dropped as committed before
    attempts: int = 0
    applied: dict[int, int] = field(default_factory=dict)  # partial task index -> records whose states were applied


class ExactlyOnceCommit:
    """A merge task's committed states of the keys it owns and the script that commits entries to them exactly once
    (module docstring). ``states`` and ``texts``: key (JSON text) -> state and its stored JSON text, as last committed
    or read."""

    def __init__(self, conn, keys: RunKeys, results_key: str, accumulator: Accumulator, where: str = "merge",
                 refused: Callable[[str, Entry, Exception], bool] | None = None, committed_key: str = "") -> None:
        self.conn, self.keys, self.results_key, self.acc, self.where = conn, keys, results_key, accumulator, where
        self.committed_key = committed_key or keys.stage(where, "committed")
        # an entry the user's merge raised on: True sets it aside (a dead letter), False fails its tuple (default)
        self.refused = refused or (lambda name, entry, exc: False)
        self._verdicts: dict[int, bool] = {}  # per commit: an entry is judged once however often the plan is made
        self.states: dict[str, Any] = {}
        self.texts: dict[str, str] = {}
        self.floor = 0  # the floor as last read: records below it are complete
        self._script = conn.register_script(COMMIT)

    def load(self, stored: dict[str, str]) -> None:
        """The committed states a restarted task starts from (``key -> JSON text``)."""
        for name, text in stored.items():
            self.texts[name] = text
            self.states[name] = json.loads(text)

    def commit(self, batch: dict[str, list[Entry]]) -> Outcome:
        """Apply ``batch`` (key -> entries) exactly once: the first attempt against the states this task last
        committed and no marks, the next ones against what Redis holds."""
        names = list(batch)
        stored = [self.texts.get(name) for name in names]
        self._verdicts = {}
        marked: set[int] = set()
        for attempt in range(1, COMMIT_ATTEMPTS + 1):
            out, updates, taken, new_states = self._plan(batch, names, stored, marked)
            new_texts = {u[0]: u[2] for u in updates}
            k = self.keys
            ok = self._script(keys=[k.dedup_seen, k.dedup_floor, self.results_key, k.dedup_dropped, self.committed_key],
                              args=[json.dumps(sorted(taken)), json.dumps(updates), out.dropped,
                                    json.dumps({str(o): n for o, n in out.applied.items()} or {"-1": 0})])
            if int(ok) == 1:
                out.attempts = attempt
                for name, text in zip(names, stored):
                    if name in new_states:
                        self.states[name], self.texts[name] = new_states[name], new_texts[name]
                    elif text is not None:  # read again: what Redis holds
                        self.texts[name], self.states[name] = text, json.loads(text)
                return out
            marked, stored = self._read(batch, names)
        raise KeysplitError(f"{self.where}: {COMMIT_ATTEMPTS} exactly-once commits in a row lost their "
                            "compare-and-set; another task is writing this merge's keys")

    def _plan(self, batch: dict[str, list[Entry]], names: list[str], stored: list[str | None], marked: set[int]):
        """Merge each entry none of whose records is committed (marked, below the floor, or taken by an earlier entry
        of this commit) into its key's stored state; drop those all of whose records are; the others split."""
        acc, floor, entry_span = self.acc, self.floor, record_id(0, 1)
        out = Outcome()
        updates: list[list] = []
        taken: set[int] = set()
        new_states: dict[str, Any] = {}
        for name, old in zip(names, stored):
            state = None
            for entry in batch[name]:
                out.entries += 1
                out.records += len(entry.records)
                committed = [r % entry_span < floor or r in marked or r in taken for r in entry.records]  # r's entry
                if not any(committed):
                    try:  # the user's code: whatever it raises, this task stays up (toolkit/deadletter.py)
                        base = state if state is not None else json.loads(old) if old is not None else acc.zero()
                        merged = acc.merge(base, entry.state)
                    except Exception as exc:
                        verdict = self._verdicts.get(id(entry))
                        if verdict is None:
                            verdict = self._verdicts[id(entry)] = self.refused(name, entry, exc)
                        if verdict:  # a dead letter: marked as handled, not applied
                            taken.update(entry.records)
                            out.aside += 1
                        else:
                            out.split.add(entry.source)
                        continue
                    state = merged
                    out.merges += 1
                    taken.update(entry.records)
                    out.applied[entry.origin] = out.applied.get(entry.origin, 0) + len(entry.records)
                elif all(committed):
                    out.dropped += len(entry.records)
                else:
                    out.split.add(entry.source)
            if state is not None:
                updates.append([name, old if old is not None else False, json.dumps(state)])
                new_states[name] = state
                out.changed.append(name)
        return out, updates, taken, new_states

    def _read(self, batch: dict[str, list[Entry]], names: list[str]) -> tuple[set[int], list[str | None]]:
        """The floor, the marks of the batch's records and the stored states of its keys, read at one moment."""
        records = [(r, mark_field(r)) for r in {r for entries in batch.values() for e in entries for r in e.records}]
        fields = list({f for _, (f, _) in records})
        pipe = self.conn.pipeline(transaction=True)
        pipe.get(self.keys.dedup_floor)
        pipe.hmget(self.keys.dedup_seen, fields) if fields else pipe.ping()
        pipe.hmget(self.results_key, names) if names else pipe.ping()
        floor_text, marks, stored = pipe.execute()
        self.floor = int(floor_text or 0)
        mask = {f: int(float(m)) for f, m in zip(fields, marks) if m} if fields else {}
        marked = {r for r, (f, bit) in records if mask.get(f, 0) >> bit & 1}
        return marked, list(stored) if names else []
