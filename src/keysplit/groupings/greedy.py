"""The PKG paper's baselines that keep key grouping's one-worker-per-key semantics (§6, Q1, Table 2).

Each remembers the worker chosen for a key in a routing table, the per-key state that makes them
impractical in a real DSPE (the paper's argument for key splitting):

- ``potc``: static power of two choices: a new key goes to the less loaded of its 2 hash choices;
- ``ongreedy``: a new key goes to the currently least loaded worker;
- ``offgreedy``: keys sorted by total frequency, then On-Greedy. It needs the whole dataset before the
  first message (``needs_full_pass``), which only the simulator can give it.

Loads are the source's local estimate, as for PKG.
"""

from __future__ import annotations

from collections.abc import Mapping

import mmh3

from keysplit.groupings.base import BaseGrouping, least_loaded
from keysplit.hashing import BASE_SEED, second_choice
from keysplit.specs import Param, boolean


class _TableGrouping(BaseGrouping):
    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None:
        super().prepare(workers, source, sources)
        self.routing_table: dict[str, int] = {}

    def place(self, key: str) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def choose(self, key: str, now: float) -> int:
        w = self.routing_table.get(key)
        if w is None:
            w = self.routing_table[key] = self.place(key)
        self.local_loads[w] += 1
        return w


class PowerOfTwoChoices(_TableGrouping):
    """Static PoTC: a key is fixed, on first sight, to the less loaded of H_1(k), H_2(k)."""

    name = "potc"
    summary = "static power of two choices: first choice per key remembered (no key splitting)"
    PARAMS = {
        "distinct": Param(boolean, True, "the two choices are different workers (false: independent hashes, "
                          "the paper's setting)"),
    }

    def __init__(self, distinct: bool = True) -> None:
        super().__init__(distinct=distinct)
        self.distinct = distinct

    def place(self, key: str) -> int:
        a = mmh3.hash(key, BASE_SEED, False) % self.workers
        b = second_choice(key, a, self.workers, self.distinct) if self.workers > 1 else a
        return b if self.local_loads[b] < self.local_loads[a] else a


class OnlineGreedy(_TableGrouping):
    """On-Greedy: a new key goes to the least loaded worker at that moment and stays there."""

    name = "ongreedy"
    summary = "online greedy: a new key goes to the least loaded worker and stays"

    def place(self, key: str) -> int:
        return least_loaded(range(self.workers), self.local_loads)


class OfflineGreedy(_TableGrouping):
    """Off-Greedy: sees every key's total frequency first, then assigns heaviest first to the least loaded.

    Simulator only: it needs the whole dataset before the first message (an unfair, offline baseline).
    """

    name = "offgreedy"
    summary = "offline greedy (simulator only: sees the whole dataset first), keys by frequency then greedy"
    needs_full_pass = True

    def fit(self, frequencies: Mapping[str, int]) -> None:
        """Build the routing table from the dataset's key frequencies (ties broken by key for determinism)."""
        planned = [0] * self.workers
        table: dict[str, int] = {}
        for key, count in sorted(frequencies.items(), key=lambda kv: (-kv[1], kv[0])):
            w = least_loaded(range(self.workers), planned)
            planned[w] += count
            table[key] = w
        self.routing_table = table

    def place(self, key: str) -> int:
        # A key the full pass did not see (never happens in the simulator): fall back to key grouping.
        return mmh3.hash(key, BASE_SEED, False) % self.workers
