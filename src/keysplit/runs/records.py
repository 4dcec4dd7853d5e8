"""The persistent record of a word-count run in Redis: its id, its state, and who owns it.

A run id is reserved once, atomically (``ZADD NX`` on ``keysplit:runs``), before anything is loaded, and its
record outlives the feed: a finished run's id is never silently reused (re-running it would add every count a
second time). States:

==============  ==========================================================================================
``loading``     the feed is being written (by ``owner``)
``loaded``      the feed is complete; nothing runs it yet (``--load-only``, waiting for ``sparse submit``)
``running``     the local runner of process ``owner`` drives it
``finished``    every line was acked and the summary stored
``interrupted`` stopped before the end (Ctrl-C, SIGTERM, a timeout, an error), or its owner process died
==============  ==========================================================================================

A ``loading`` or ``running`` record whose owner process no longer exists on this machine reads as
``interrupted`` (a ``kill -9`` leaves no chance to write it).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import time
from typing import Any

import redis

from keysplit.errors import KeysplitError
from keysplit.runs.redis_server import process_alive
from keysplit.storm.keys import RUNS, RunKeys

#: What a run id may contain: it names Redis keys and the run's log folder, so it is a name, never a path.
RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")
STATES = ("loading", "loaded", "running", "finished", "interrupted")


def check_run_id(run_id: str) -> str:
    """``run_id`` if it is a valid name, else a one-line KeysplitError."""
    if not RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
        shown = run_id if len(run_id) <= 60 else run_id[:57] + "..."
        raise KeysplitError(f"bad run id {shown!r}: use 1 to 100 letters, digits, '.', '_' or '-'")
    return run_id


def reserve(conn: redis.Redis, keys: RunKeys, fields: dict[str, Any]) -> None:
    """Claim ``keys.run_id`` for a new run (state ``loading``, owned by this process), or refuse it when the
    id is already taken (by any run, in any state)."""
    started = float(fields.get("started", time.time()))
    if not conn.zadd(RUNS, {keys.run_id: started}, nx=True) or conn.exists(keys.record, keys.feed, keys.config):
        state = effective_state(conn, keys.run_id)
        hint = {"finished": "delete it with `keysplit runs delete {id}` or choose another id",
                "interrupted": "continue it with `keysplit run wordcount --resume {id}`, delete it with "
                               "`keysplit runs delete {id}`, or choose another id"}.get(
            state, "choose another id (see `keysplit runs`)")
        article = "an" if state[0] in "aeiou" else "a"
        raise KeysplitError(f"run id {keys.run_id} is already taken by {article} {state} run; "
                            + hint.format(id=keys.run_id))
    set_state(conn, keys, "loading", **fields)


def set_state(conn: redis.Redis, keys: RunKeys, state: str, **fields: Any) -> None:
    """Record ``state`` (and any extra fields); ``loading`` and ``running`` name this process as owner."""
    record: dict[str, Any] = {"state": state, "updated": time.time(), **fields}
    if state in ("loading", "running"):
        record.update(owner=os.getpid(), host=socket.gethostname())
    conn.hset(keys.record, mapping={k: v if isinstance(v, (int, float, str)) else json.dumps(v)
                                    for k, v in record.items()})


def claim(conn: redis.Redis, keys: RunKeys, states: tuple[str, ...]) -> dict[str, Any] | None:
    """Make this process the run's owner (state ``running``) if its effective state is one of ``states``, in
    one transaction (WATCH on the record): of two commands that try at once (two ``--resume`` of one run),
    exactly one wins. None when claimed, else the record that stood in the way (state ``deleted``: no such run)."""
    while True:
        with conn.pipeline(transaction=True) as pipe:
            try:
                pipe.watch(keys.record)
                record = read_record(pipe, keys.run_id)
                if record is None or record["state"] not in states:
                    pipe.unwatch()
                    return record or {"state": "deleted"}
                pipe.multi()
                pipe.hset(keys.record, mapping={"state": "running", "updated": time.time(), "owner": os.getpid(),
                                                "host": socket.gethostname()})
                pipe.execute()
                return None
            except redis.WatchError:  # someone changed the record meanwhile: look again
                continue


def mark_interrupted(conn: redis.Redis, keys: RunKeys, reason: str) -> None:
    """Best effort (the server may be the thing that went away): the run stopped before its end."""
    with contextlib.suppress(redis.RedisError, OSError):
        if conn.hget(keys.record, "state") in ("loading", "running"):
            set_state(conn, keys, "interrupted", reason=reason)


def read_record(conn: redis.Redis, run_id: str) -> dict[str, Any] | None:
    """The run's record with its effective state; None when no run has this id. Runs stored before records
    existed get a state from what is left of them (a summary: finished; a feed: loaded)."""
    keys = RunKeys(run_id)
    record: dict[str, Any] = conn.hgetall(keys.record)
    started = conn.zscore(RUNS, run_id)
    if not record and started is None and not conn.exists(keys.config, keys.summary):
        return None
    if not record:
        record = {"state": "finished" if conn.exists(keys.summary) else "loaded" if conn.exists(keys.feed)
                  else "interrupted"}
    config = json.loads(conn.get(keys.config) or "{}")
    for field in ("grouping", "dataset", "lines", "messages"):
        if field not in record and field in config:
            record[field] = config[field]
    record["run_id"] = run_id
    record["started"] = float(record.get("started") or started or 0.0)
    for field in ("lines", "messages", "owner"):
        if field in record:
            record[field] = int(record[field])
    for field in ("updated", "finished"):  # times, as "started": numbers in `runs --json`, not strings
        if field in record:
            record[field] = float(record[field])
    if "feed_complete" in record:
        record["feed_complete"] = record["feed_complete"] not in ("", "0")
    record["state"] = _effective(record)
    return record


def effective_state(conn: redis.Redis, run_id: str) -> str | None:
    record = read_record(conn, run_id)
    return None if record is None else record["state"]


def _effective(record: dict[str, Any]) -> str:
    state = record.get("state", "interrupted")
    if state in ("loading", "running") and record.get("host") == socket.gethostname() \
            and not process_alive(int(record.get("owner", 0))):
        return "interrupted"
    return state


def list_runs(conn: redis.Redis) -> list[dict[str, Any]]:
    """Every run in ``keysplit:runs``, oldest first, with its effective state."""
    runs = []
    for run_id, _ in conn.zscan_iter(RUNS):
        record = read_record(conn, run_id)
        if record is not None:
            runs.append(record)
    return sorted(runs, key=lambda r: (r["started"], r["run_id"]))


def delete_run(conn: redis.Redis, run_id: str) -> int:
    """Remove every key of the run and its entry in ``keysplit:runs``; returns the keys deleted."""
    keys = RunKeys(run_id)
    names = list(conn.scan_iter(match=keys.pattern(), count=1000))
    deleted = 0
    for start in range(0, len(names), 500):
        deleted += conn.delete(*names[start:start + 500])
    conn.zrem(RUNS, run_id)
    return deleted
