"""The router's logic (the PKG paper's "source"): split a record into words and choose a counter task for
each with the configured grouping, exactly as ``keysplit.simulate.route`` does in process.

The router learns the topology from Storm's multi-lang context: ``task->component`` maps every task id to
its component. Counter task ids sorted ascending are the grouping's workers 0..W-1 (the first W of them
when there are more counter tasks than W); this router's index among the sorted router task ids is its
source index s, so ``build_grouping(spec, W, S)[s]`` is the same instance the simulator would give source s.

Event time ``now`` in Storm is the wall clock (DESIGN.md), measured from the router's start
(:meth:`Router.elapsed`) so that it begins near 0 as the simulator's ``sequence / rate`` does: groupings with
periods (PKG's probe interval, FISH's epochs, Gedik's windows) count their periods from 0, and a Unix time
of ~1.8e9 s would make them catch up through hundreds of millions of periods at the first message.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from keysplit.datasets import decode_record
from keysplit.errors import KeysplitError
from keysplit.groupings import BaseGrouping
from keysplit.simulate import prepare_groupings


def component_tasks(context: Mapping, component: str) -> list[int]:
    """Task ids of ``component`` in a multi-lang context, sorted.

    >>> component_tasks({"task->component": {"3": "counter", "1": "router", "5": "counter"}}, "counter")
    [3, 5]
    """
    mapping = context.get("task->component", {})
    return sorted(int(task) for task, name in mapping.items() if name == component)


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
    ) -> None:
        if workers > len(counter_task_ids):
            raise KeysplitError(f"W={workers} workers is more than the {len(counter_task_ids)} counter tasks")
        self.tasks = list(counter_task_ids[:workers])
        self.grouping: BaseGrouping = prepare_groupings(
            spec, workers, sources, true_loads=probe, capacities=capacities, frequencies=frequencies
        )[source]
        self.routed = 0
        self.t0 = time.time()

    def elapsed(self) -> float:
        """Wall-clock seconds since this router started: the ``now`` a Storm router passes to ``choose``."""
        return time.time() - self.t0

    def route(self, encoded_record: str, now: float) -> list[tuple[str, int]]:
        """``(word, counter task id)`` for every word of the record; ``now`` is wall-clock time (DESIGN.md)."""
        _, words = decode_record(encoded_record)
        choose, tasks = self.grouping.choose, self.tasks
        out = [(w, tasks[choose(w, now)]) for w in words]
        self.routed += len(out)
        return out
