"""Gedik's routers in separate processes decide as the simulator's sources, whatever their relative speeds (on
Storm the loads were not ``simulate``'s and not the same twice, the followers installing the leader's rebuilds
whenever their poll came round).

Each router here runs in its own thread with its own Redis channel, as separate processes would, at a pace drawn
from a seed: the leader ahead, the follower ahead, or both in bursts. No assertion depends on the pace: the
decisions must be the simulator's under every one of them.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from keysplit.datasets import open_dataset
from keysplit.groupings.hosting import prepare_groupings, route
from keysplit.runs import redis_server
from keysplit.storm.keys import RunKeys
from keysplit.storm.router import GroupingChannel, Router

SPEC = "gedik:period=1,window=1000"
WORKERS, SOURCES = 4, 2
#: 6,000 page views at 1,000 a second: five period boundaries, each with a rebuild.
DATASET = "pageviews:keys=300,messages=6000,seed=3"
TASKS = [11, 12, 13, 14]


@pytest.fixture(scope="module")
def conn(tmp_path_factory):
    with redis_server.session(home=tmp_path_factory.mktemp("redis-home")) as (client, _):
        yield client


def simulated() -> list[list[int]]:
    """Each source's decisions, in its order, from the in-process hosts' code (``keysplit simulate``'s)."""
    groupings = prepare_groupings(SPEC, WORKERS, SOURCES)
    per_source: list[list[int]] = [[] for _ in range(SOURCES)]
    for _, source, _, worker in route(open_dataset(DATASET), groupings):
        per_source[source].append(worker)
    return per_source


def dealt() -> list[list[tuple[str, float]]]:
    """The rows each router gets: ``(key, time)``, dealt as the feed spout deals them (row i to router i mod S)."""
    rows: list[list[tuple[str, float]]] = [[] for _ in range(SOURCES)]
    for i, (ts, keys) in enumerate(open_dataset(DATASET).records()):
        rows[i % SOURCES].append((keys[0], ts))
    return rows


def run_routers(conn, run: str, pace: random.Random, lagging: int | None, sync_wait: float = 60.0):
    """Every router in its own thread; ``lagging`` (a source, or None for both) pauses now and then, as a router
    behind a busy worker would. Returns each router's decisions and the routers."""
    keys = RunKeys(run)
    routers = [Router(SPEC, WORKERS, s, SOURCES, TASKS, channel=GroupingChannel(conn, keys, poll_secs=0.0),
                      mode="fields", sync_wait=sync_wait) for s in range(SOURCES)]
    assert [r.role for r in routers] == ["leader", "follower"]
    rows = dealt()
    pauses = [[pace.random() < 0.01 and (lagging is None or lagging == s) for _ in rows[s]] for s in range(SOURCES)]
    decisions: list[list[int]] = [[] for _ in range(SOURCES)]
    errors: list[BaseException] = []

    def serve(s: int) -> None:
        try:
            for (key, ts), pause in zip(rows[s], pauses[s]):
                if pause:
                    time.sleep(0.01)
                decisions[s].append(routers[s].choose(key, ts, event_time=True))
        except BaseException as exc:  # re-raised in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(s,)) for s in range(SOURCES)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return decisions, routers


@pytest.mark.parametrize("lagging", [0, 1, None], ids=["leader-behind", "follower-behind", "both-pause"])
def test_routers_in_separate_processes_make_the_simulators_decisions_at_any_pace(conn, lagging):
    expected = simulated()
    decisions, routers = run_routers(conn, f"gedik-pace-{lagging}", random.Random(7), lagging)
    leader, follower = routers
    assert leader.grouping.rebuilds == 5  # the boundaries at 1..5 s
    assert decisions == expected
    assert follower.unsynced == 0 and follower.grouping.rebuilds == 0  # the follower only installed the leader's
    assert [v for _, v, _ in follower.versions] == list(range(6))  # every version, each used for its periods


def test_a_follower_ahead_of_a_silent_leader_waits_at_most_sync_wait_and_counts_what_it_decided_alone(conn):
    """The leader never routes a row of period 1 (the stream ended for it, or it is down): the follower's rows of
    that period wait ``sync_wait``, are decided with the function it has, and are counted as unsynced."""
    keys = RunKeys("gedik-silent-leader")
    channel = GroupingChannel(conn, keys)
    follower = Router(SPEC, WORKERS, 1, SOURCES, TASKS, channel=channel, mode="fields", sync_wait=0.05)
    ring = follower.grouping.function.ring
    before = follower.choose("/page/0", 0.5, event_time=True)  # period 0: the initial function, no wait
    start = time.monotonic()
    after = follower.choose("/page/0", 1.5, event_time=True)
    assert time.monotonic() - start >= 0.05
    assert before == after == ring.lookup("/page/0")
    assert follower.unsynced == 1 and channel.unsynced() == 1
    # the period's next rows do not wait again (each would hold its tuple sync_wait, past the message timeout): with
    # a wait of a minute now, a second wait would show as a minute
    follower.sync_wait = 60.0
    start = time.monotonic()
    follower.choose("/page/2", 1.7, event_time=True)
    assert time.monotonic() - start < 30.0 and follower.unsynced == 2
    # once the leader publishes its progress past period 1, the follower goes on without waiting
    channel.publish(None, epoch=2)
    follower.choose("/page/1", 1.6, event_time=True)
    assert follower.unsynced == 2
