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
stream fields-grouped on ``route``, with ``route`` chosen by :func:`route_value` so that Storm's own fields
grouping delivers the word to the chosen task.

Event time ``now`` in Storm is the wall clock (DESIGN.md), measured from the router's start
(:meth:`Router.elapsed`) so that it begins near 0 as the simulator's ``sequence / rate`` does: groupings with
periods (PKG's probe interval, FISH's epochs, Gedik's windows) count their periods from 0, and a Unix time
of ~1.8e9 s would make them catch up through hundreds of millions of periods at the first message.

Groupings whose sources share state in process (Gedik's one partitioning function: the ``export_state`` hook
of ``groupings/base.py``) cannot share an object across router processes; given a :class:`GroupingChannel`
(Redis), router 0 is the **leader**: it alone updates the state and publishes it after every change, and the
other routers are **followers** that poll the published version at most every ``poll_secs`` of wall clock and
install a newer state, so a key has one worker at every router up to that lag. The leader also writes its
grouping's ``stats()`` (rebuilds, migration) for the run's summary: after every state change and at most every
``poll_secs`` otherwise.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from keysplit.datasets import decode_record
from keysplit.errors import KeysplitError
from keysplit.groupings import BaseGrouping
from keysplit.groupings.hosting import prepare_groupings
from keysplit.storm.keys import RunKeys

#: How the router addresses the counter task it chose (see the module docstring); the first is the default.
ROUTE_MODES = ("fields", "direct")


def route_value(target_index: int, num_tasks: int) -> int:
    """The ``route`` value that Storm's fields grouping on ``route`` sends to sorted counter task ``target_index``.

    Storm picks ``sorted_tasks[floorMod(Arrays.deepHashCode([route]), num_tasks)]`` (apache/storm
    ``daemon/GrouperFactory.java`` FieldsGrouper, ``utils/TupleUtils.java`` chooseTaskIndex; 1.x's
    ``executor.clj`` ``mk-fields-grouper`` floors the same hash), and ``deepHashCode([v]) = 31 * 1 + v.hashCode()``.
    ``route`` reaches the JVM as JSON: json-simple (Storm < 2.6) parses it as a ``Long``, json-smart (2.6+) as
    an ``Integer``; for ``0 <= v < 2^31`` both ``hashCode``s are ``v`` (``Long``'s is ``(int)(v ^ v >>> 32)`` and
    the high word is 0). So ``v = (target_index - 31) mod num_tasks``, in ``[0, num_tasks)``, gives
    ``floorMod(31 + v, num_tasks) = target_index`` on every release (``tests/test_storm_logic.py`` checks it with
    the local runner's Java hash).

    >>> [route_value(i, 4) for i in range(4)]
    [1, 2, 3, 0]
    """
    if not 0 <= target_index < num_tasks:
        raise ValueError(f"target index {target_index} is not in [0, {num_tasks})")
    return (target_index - 31) % num_tasks


def component_tasks(context: Mapping, component: str) -> list[int]:
    """Task ids of ``component`` in a multi-lang context, sorted.

    >>> component_tasks({"task->component": {"3": "counter", "1": "router", "5": "counter"}}, "counter")
    [3, 5]
    """
    mapping = context.get("task->component", {})
    return sorted(int(task) for task, name in mapping.items() if name == component)


class GroupingChannel:
    """The routers' Redis channel for a grouping's shared state (``export_state``) and its ``stats()``."""

    def __init__(self, conn, keys: RunKeys, poll_secs: float = 1.0) -> None:
        self.conn = conn
        self.keys = keys
        self.poll_secs = poll_secs

    def publish(self, state: dict, stats: dict | None = None) -> None:
        """Store ``state`` (with its ``version``) and, atomically with it, the version followers poll."""
        pipe = self.conn.pipeline(transaction=True)
        pipe.set(self.keys.grouping_state, json.dumps(state))
        pipe.set(self.keys.grouping_version, int(state["version"]))
        if stats is not None:
            pipe.set(self.keys.grouping_stats, json.dumps(stats))
        pipe.execute()

    def version(self) -> int:
        """The published state's version (0 when nothing is published yet): one cheap GET."""
        return int(self.conn.get(self.keys.grouping_version) or 0)

    def state(self) -> dict | None:
        raw = self.conn.get(self.keys.grouping_state)
        return json.loads(raw) if raw else None

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
        if channel is not None and hasattr(g, "export_state"):
            self.role = "leader" if source == 0 else "follower"
            g.set_role(self.role)  # type: ignore[attr-defined]
            published = channel.state()
            if published is not None:  # a restarted router continues from the published state
                g.import_state(published)  # type: ignore[attr-defined]
        self.reports = channel is not None and source == 0 and hasattr(g, "stats")
        self.version = g.state_version if self.role else 0  # type: ignore[attr-defined]
        self.next_sync = 0.0  # monotonic time of the next follower poll / periodic stats write

    def elapsed(self) -> float:
        """Wall-clock seconds since this router started: the ``now`` a Storm router passes to ``choose``."""
        return time.time() - self.t0

    def route(self, encoded_record: str, now: float) -> list[tuple[str, int]]:
        """``(word, target)`` for every word of the record, the target being the counter task id (direct mode)
        or the ``route`` value that reaches it (fields mode); ``now`` is wall-clock time (DESIGN.md)."""
        _, words = decode_record(encoded_record)
        if self.role == "follower":
            self.sync()
        choose, tasks = self.grouping.choose, self.targets
        out = [(w, tasks[choose(w, now)]) for w in words]
        self.routed += len(out)
        if self.reports:
            self.report()
        return out

    def sync(self, force: bool = False) -> bool:
        """Follower: install the leader's state if a newer version is published (at most every
        ``poll_secs`` unless ``force``); True when it installed one."""
        clock = time.monotonic()
        if not force and clock < self.next_sync:
            return False
        self.next_sync = clock + self.channel.poll_secs  # type: ignore[union-attr]
        if self.channel.version() <= self.version:  # type: ignore[union-attr]
            return False
        state = self.channel.state()  # type: ignore[union-attr]
        if state is None or int(state["version"]) <= self.version:
            return False
        self.grouping.import_state(state)  # type: ignore[attr-defined]
        self.version = int(state["version"])
        return True

    def report(self, force: bool = False) -> None:
        """Leader: publish the state when its version grew (with the stats), else write the stats at most
        every ``poll_secs`` unless ``force``."""
        g = self.grouping
        clock = time.monotonic()
        if self.role == "leader" and g.state_version != self.version:  # type: ignore[attr-defined]
            self.channel.publish(g.export_state(), g.stats())  # type: ignore[attr-defined,union-attr]
            self.version = g.state_version  # type: ignore[attr-defined]
        elif force or clock >= self.next_sync:
            self.channel.write_stats(g.stats())  # type: ignore[attr-defined,union-attr]
        else:
            return
        self.next_sync = clock + self.channel.poll_secs  # type: ignore[union-attr]
