"""Dead letters: a row the user's code refuses N times is set aside, named, instead of replayed for ever.

Storm replays a failed tuple tree from its spout, as often as it fails: a row whose value the user's ``add`` cannot
take (a non-numeric value into ``Sum``, a ``ZeroDivisionError`` in a user's accumulator) fails every replay, and a run
never finishes. Stream processors bound it: Kafka Streams' ``DeserializationExceptionHandler`` and Flink's side
outputs set the record aside, Spark's ``badRecordsPath`` writes it out, Storm's own ``KafkaSpout`` gives up after
``maxRetries``. Here a toolkit stage (``Aggregate.partial``, ``Aggregate.merge``) catches any ``Exception`` the
user's accumulator raises on a row, counts the row's attempts in Redis (``stage:NAME:attempts``, so that a replay
into another task, or a task restarted after a crash, counts on), fails the tuple so that the row replays while it
has attempts left, and at the N-th (``keysplit.dead_letter.attempts``, default :data:`DEFAULT_ATTEMPTS`) writes a
**dead letter** and lets the row go: ``keysplit:run:ID:dead_letters``, one field per row, the JSON of its stage, task,
record id, row (its place in the dataset keysplit loaded), key, values (or, in a merge, the contribution it carried) and
the error. Under exactly-once the row's commit mark is set in the same script, so a copy of it still in flight adds
nothing either: the row is neither counted nor lost, it is named. A run with dead letters reports them (``keysplit run``
prints them and exits 1).

A row is known by its record id (keysplit's feed) or, from a user's spout, by the JSON text of its values; a merge
entry that covers several rows is never a dead letter: its tuple is failed, and the rows replay, each alone (the
feed flags replays, toolkit/commit.py), until the one that fails is known.
"""

from __future__ import annotations

import hashlib
import json
import time
import traceback
from typing import Any

from keysplit.storm.exactly_once import SPAN
from keysplit.storm.keys import RunKeys
from keysplit.toolkit.contract import entry_id, record_id, split_record

#: Attempts a row gets before it becomes a dead letter: the first try and two replays. A transient error (a lost
#: connection in a user's code) gets replays; a row that cannot be taken costs three trips of its tree.
DEFAULT_ATTEMPTS = 3
#: The topology configuration key that sets it (``-o keysplit.dead_letter.attempts=5``, or a topology's ``config``).
ATTEMPTS_CONFIG = "keysplit.dead_letter.attempts"

# KEYS: dead letters, seen (commit marks), floor. ARGV: field, letter (JSON), record (-1: none), mark (1: exactly-once).
# The letter is written once (a retried script, or the same row set aside by two tasks, keeps the first); the mark
# (toolkit/commit.py: bit ``position % SPAN`` of field "line:segment"), when asked for, only above the floor (below it
# the row's entry is complete, and the floor's pass deletes marks only there).
WRITE = """
redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2])
local record = tonumber(ARGV[3])
if ARGV[4] == '1' and record >= 0 then
  local line = record % POSITION
  if line >= tonumber(redis.call('GET', KEYS[3]) or '0') then
    local position = math.floor(record / POSITION)
    local segment = math.floor(position / SPAN)
    local field, b = string.format('%d:%d', line, segment), 2 ^ (position - segment * SPAN)
    local m = tonumber(redis.call('HGET', KEYS[2], field) or '0')
    if m % (b + b) < b then redis.call('HSET', KEYS[2], field, string.format('%.0f', m + b)) end
  end
end
return 1
""".replace("POSITION", str(record_id(0, 1))).replace("SPAN", str(SPAN))


def attempts_setting(conf: Any) -> int:
    """The attempts a topology's configuration asks for (at least 1), else :data:`DEFAULT_ATTEMPTS`."""
    value = conf.get(ATTEMPTS_CONFIG) if hasattr(conf, "get") else None
    try:
        n = int(value) if value is not None else DEFAULT_ATTEMPTS
    except (TypeError, ValueError):
        n = DEFAULT_ATTEMPTS
    return max(1, n)


def identity(record: int | None, values: Any) -> str:
    """How a row is known across replays: its record id, or a digest of its values' JSON text."""
    if record is not None:
        return str(record)
    text = json.dumps(values, sort_keys=True, default=str)
    return "v:" + hashlib.sha1(text.encode()).hexdigest()[:16]


def describe(exc: BaseException) -> str:
    """An error in one line: its type, its message and where the user's code raised it."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


class DeadLetters:
    """One stage task's attempts and dead letters (module docstring); without Redis the attempts are the process's and
    the letters only logged."""

    def __init__(self, conn, keys: RunKeys, stage: str, task: int, attempts: int, exactly_once: bool) -> None:
        self.conn, self.keys, self.stage, self.task = conn, keys, stage, task
        self.attempts, self.exactly_once = attempts, exactly_once
        self.attempts_key = keys.stage(stage, "attempts")
        self.local: dict[str, int] = {}
        self.written = 0
        self._write = conn.register_script(WRITE) if conn is not None else None

    def attempt(self, row: str) -> int:
        """Count one more failed attempt of ``row``; how many it has had."""
        if self.conn is None:
            self.local[row] = self.local.get(row, 0) + 1
            return self.local[row]
        return int(self.conn.hincrby(self.attempts_key, row, 1))

    def exhausted(self, row: str) -> bool:
        """One more failed attempt of ``row``: whether it was its last (the row is then set aside)."""
        return self.attempt(row) >= self.attempts

    def write(self, row: str, *, record: int | None, key: Any, values: Any, error: str, attempts: int | None = None
              ) -> dict:
        """Set ``row`` aside: its dead letter, and under exactly-once its commit mark."""
        letter = {"stage": self.stage, "task": self.task, "record": record, "row": self.dataset_row(record), "key": key,
                  "values": values, "error": error, "attempts": attempts or self.attempts, "time": time.time()}
        self.written += 1
        if self._write is not None:
            self._write(keys=[self.keys.dead_letters, self.keys.dedup_seen, self.keys.dedup_floor],
                        args=[f"{self.stage}:{row}", json.dumps(letter, default=str),
                              record if record is not None else -1, 1 if self.exactly_once else 0])
        return letter


    def dataset_row(self, record: int | None) -> int | None:
        """The row's place in the dataset keysplit loaded (None for a row of a user's spout, or a feed that is gone):
        its feed entry keeps the places of its rows (runs/topology_run.py ``load_rows``)."""
        if record is None or self.conn is None:
            return None
        line, position = split_record(record)
        found = self.conn.xrange(self.keys.feed, entry_id(line), entry_id(line))
        if not found or "n" not in found[0][1]:
            return None
        places = json.loads(found[0][1]["n"])
        if isinstance(places, int):  # an entry of one row (a line split into keys: its words share the line's place)
            return places
        return places[position] if position < len(places) else None


def read_dead_letters(conn, keys: RunKeys) -> list[dict]:
    """A run's dead letters, by stage and record (or row digest)."""
    letters = [json.loads(v) for v in conn.hvals(keys.dead_letters)]
    return sorted(letters, key=lambda d: (d.get("stage", ""), d.get("record") if d.get("record") is not None else -1,
                                          str(d.get("key"))))
