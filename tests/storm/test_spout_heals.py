"""The spout heals (storm/feed.py): after a lost reply, a dropped connection or a Redis restart, however it falls,
every line is read, acked and completed, and the run ends exact with no ``--resume``.

First on the pieces (a real Redis, a spout's feed with its own clock): lines a lost ``XREADGROUP`` reply left in
the spout's pending list while its buffer holds the next line; the acknowledgement script run twice and on a
restarted server; lines XACKed and never completed (what a keysplit before the one script could leave). Then the
topology for real, its components talking to Redis through a proxy (tests/redis_proxy.py) that drops one reply,
cuts a connection or restarts the server when a chosen command arrives.
"""

from __future__ import annotations

import hashlib

import pytest
from redis_proxy import RedisProxy

from keysplit.datasets import encode_record
from keysplit.runs import redis_server
from keysplit.runs.collect import read_counts
from keysplit.runs.prepare import RunOptions, prepare_run
from keysplit.runs.wordcount import run_wordcount
from keysplit.storm import exactly_once
from keysplit.storm.exactly_once import Dedup
from keysplit.storm.feed import ACK, FEED_GROUP, HEAL_SECS, PENDING_REREAD_SECS, StreamFeed, create_group
from keysplit.storm.keys import RunKeys
from tests.storm.test_wordcount_topology import exact_counts, write_text


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    path = tmp_path_factory.mktemp("heal-home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KEYSPLIT_HOME", str(path))
        yield path
        redis_server.stop_server(path, force=True)


@pytest.fixture(scope="module")
def server(home):
    return redis_server.start_server(home)


@pytest.fixture
def conn(server):
    return redis_server.connect(server.url)


def restart_redis(home) -> None:
    """kill -9 the managed Redis and start it again (same socket, same password), as ``--kill redis`` does."""
    server = redis_server.running_server(home)
    redis_server.kill_server(server)
    redis_server.restart_server(server)


def _major_version(conn) -> int:
    """The major version of the server ``conn`` talks to (what a premise of one Redis version checks first)."""
    return int(conn.info("server")["redis_version"].split(".")[0])


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _feed(conn, keys: RunKeys, lines: int) -> None:
    for i in range(lines):
        conn.xadd(keys.feed, {"r": encode_record((None, ["x", "y"])), "n": i, "s": i})
    create_group(conn, keys)


def _spout(conn, keys, clock, **kw) -> StreamFeed:
    return StreamFeed(conn, keys, "spout-0", ack_flush_secs=0.0, dedup=Dedup(conn, keys), clock=clock, **kw)


# -- the pieces ------------------------------------------------------------------------------------------------

def test_lines_a_lost_read_left_pending_are_sent_while_the_window_holds_the_buffer(conn):
    keys, clock = RunKeys("heal-lost-read"), Clock()
    _feed(conn, keys, 8)
    feed = _spout(conn, keys, clock, window=2, batch=2)
    assert feed.next()[2] == 0 and feed.next()[2] == 1
    conn.xreadgroup(FEED_GROUP, "spout-0", {keys.feed: ">"}, count=2)  # lines 2, 3: a reply that never arrived
    first = feed.next()  # line 4: beyond floor 0 + window 2 is held back in the buffer
    assert first is None and [item[2] for item in feed.buffer] == [4, 5]
    for entry_id in list(feed.in_flight):
        feed.ack(entry_id)
    feed.flush_acks()
    assert feed.floor == 2 and feed.next() is None  # lines 2 and 3 hold the floor; the buffer holds line 4
    clock.now += PENDING_REREAD_SECS
    assert [feed.next()[2], feed.next()[2]] == [2, 3]  # taken back from the pending list, ahead of the buffer
    for entry_id in list(feed.in_flight):
        feed.ack(entry_id)
    feed.flush_acks()
    assert feed.floor == 4 and [feed.next()[2], feed.next()[2]] == [4, 5]


@pytest.mark.every_redis
def test_the_acknowledgement_runs_whole_again_on_a_restarted_server(conn, home):
    keys, clock = RunKeys("heal-ack-again"), Clock()
    _feed(conn, keys, 4)
    feed = _spout(conn, keys, clock, window=100, metrics_key=keys.spout(0))
    sent = [feed.next() for _ in range(4)]
    for item in sent[:2]:
        feed.ack(item[0])
    ids, completed = list(feed.ack_buffer), list(feed.completed)
    feed.flush_acks()
    assert feed.floor == 2
    # the same acknowledgement again (a retry after a lost reply) changes nothing
    feed.ack_buffer, feed.completed = ids, completed
    feed.flush_acks()
    assert exactly_once.floor(conn, keys) == 2 and conn.xpending(keys.feed, FEED_GROUP)["pending"] == 2
    restart_redis(home)
    # Redis 6 writes SCRIPT LOAD into its append-only file, so its restarted server still holds the script; Redis 7
    # propagates scripts by their effects only, so its cache starts empty. keysplit must cope with both: empty the
    # cache, so that the client loads ACK again (NOSCRIPT) on either
    sha = conn.register_script(ACK).sha
    assert conn.script_exists(sha)[0] == (_major_version(conn) < 7)
    conn.script_flush()
    for item in sent[2:]:
        feed.ack(item[0])
    feed.flush_acks()
    assert exactly_once.floor(conn, keys) == 4 and conn.xpending(keys.feed, FEED_GROUP)["pending"] == 0
    assert conn.hget(keys.spout(0), "acked") == "4"


def test_lines_xacked_and_never_completed_are_healed_when_the_floor_stalls(conn):
    keys, clock = RunKeys("heal-stalled"), Clock()
    _feed(conn, keys, 10)
    feed = _spout(conn, keys, clock, window=4)
    sent = [feed.next() for _ in range(5)]
    assert sent[4] is None
    # what a keysplit before the one script could leave after a Redis restart: lines 0-2 XACKed, never completed
    conn.xack(keys.feed, FEED_GROUP, *(item[0] for item in sent[:3]))
    for item in sent[:3]:
        feed.in_flight.pop(item[0])
    assert feed.next() is None and feed.healed == 0
    clock.now += HEAL_SECS
    item = feed.next()  # the floor stalled: lines 0-2 are healed, line 3 is still out
    assert feed.healed == 3 and exactly_once.floor(conn, keys) == 3 and item[2] == 4
    feed.ack(sent[3][0])
    feed.ack(item[0])
    feed.flush_acks()
    assert feed.floor == 5 and feed.heal_floor() == 0  # nothing XACKed and incomplete is left


# -- the topology, through a proxy that breaks one command -------------------------------------------------------

@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("heal-data") / "lines.txt"
    write_text(path, 1500, seed=7)
    return path


ACK_SHA = hashlib.sha1(ACK.encode()).hexdigest().encode()


def _is_ack(args: list[bytes]) -> bool:
    return args[1] == ACK_SHA


def _fresh_read(args: list[bytes]) -> bool:
    return args[-1] == b">"


@pytest.mark.parametrize("command, action, after", [
    ("XREADGROUP", "drop_reply", 1),  # 38.2: entries delivered, the spout never told
    ("XREADGROUP", "reset", 2),
    ("EVALSHA", "restart", 3),  # 38.1: the acknowledgement runs, Redis restarts before its reply
    ("EVALSHA", "drop_reply", 2),
])
def test_a_broken_command_leaves_the_run_exact_and_finished(home, server, text, command, action, after):
    proxy = RedisProxy(server.url)
    try:
        def restart() -> None:
            restart_redis(home)

        proxy.arm(command, action, after=after, match=_fresh_read if command == "XREADGROUP" else _is_ack,
                  restart=restart if action == "restart" else None)
        # a small max pending: its exactly-once window (4 x 50 = 200 lines) is far below the 1,500 lines, so lines
        # that hold the floor hold the whole run
        prepared = prepare_run(RunOptions("pkg", f"text:{text}", sources=2, workers=2, aggregators=1, max_pending=50,
                                      message_timeout=30, timeout=240))
        conn = redis_server.connect(server.url)
        summary = run_wordcount(prepared, conn, proxy.url)
    finally:
        proxy.close()
    assert proxy.fired == 1
    exact = exact_counts(text)
    keys = RunKeys(summary["run_id"])
    assert read_counts(conn, keys) == dict(exact)
    assert summary["totals"] == "exact" and summary["counted"] == summary["messages"] == sum(exact.values())
    assert summary["complete_lines"] == summary["lines"] == 1500
    assert conn.hget(keys.record, "state") == "finished"
    if (command, action) == ("XREADGROUP", "drop_reply"):  # the lines of the lost reply went out as replays
        assert summary["replayed"] > 0
