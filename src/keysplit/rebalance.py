"""How much key state moves when a worker joins or leaves mid-stream (FISH §5 and Fig. 17).

Two measures, both deterministic:

- :func:`mapping_moves`, the static one: for every distinct key, does its owner change when W becomes W'?
  On a consistent-hash ring (``HashRing``, ``vnodes`` per worker) only the arcs next to the joining or
  leaving worker's points change owner, about |W'-W|/max(W, W') of the keys; with ``hash mod W`` (key
  grouping, and PKG's choices) a key keeps its worker only when ``h mod W == h mod W'``, so almost all move.
- :func:`rebalance_run`, the dynamic one: route a dataset with a grouping, change the worker count just
  before message ``at`` and keep routing. A key's *state* lives on every worker that received it. A key
  seen before the change *moves* when, after the change, it is sent to a worker that held none of its
  state before (that state must be migrated or rebuilt); ``new_state`` counts those (key, worker) pairs.
  Key splitting spreads hot keys over new workers even without a change, so the same run without the
  change is measured too (``control_*``): the difference is what the change itself cost.

A grouping with a ``resize(workers)`` hook (FISH) is resized in place; any other grouping is built afresh
for the new worker count, which is what a Storm rebalance does to a ``CustomStreamGrouping`` (its tasks
restart and ``prepare`` it with the new target tasks; routing state such as local loads starts over).
Removing workers removes the highest indices (``W'..W-1``), as the simulator's ``--resize`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass

import mmh3

from keysplit.datasets import Dataset
from keysplit.errors import SpecError
from keysplit.groupings import BaseGrouping, build_grouping
from keysplit.groupings.base import Resizable
from keysplit.hashing import BASE_SEED, HashRing
from keysplit.stream import DEFAULT_RATE, SPLITS, event_time, source_of


def mapping_moves(keys: Iterable[str], before: int, after: int, vnodes: int = 64) -> dict:
    """Share of ``keys`` whose owner changes from ``before`` to ``after`` workers, ring versus mod W.

    >>> m = mapping_moves([f"k{i}" for i in range(10000)], 10, 11)
    >>> m["ring"] < 0.15 < 0.85 < m["mod"]
    True
    """
    ring_before = HashRing(range(before), vnodes=vnodes)
    ring_after = HashRing(range(after), vnodes=vnodes)
    n = ring_moved = mod_moved = 0
    for key in keys:
        n += 1
        ring_moved += ring_before.lookup(key) != ring_after.lookup(key)
        h = mmh3.hash(key, BASE_SEED, False)
        mod_moved += h % before != h % after
    return {"keys": n, "ring": ring_moved / n if n else 0.0, "mod": mod_moved / n if n else 0.0,
            "ideal": abs(after - before) / max(before, after)}


@dataclass
class RebalanceResult:
    grouping: str
    workers: int
    to: int
    at: int
    messages: int
    keys_before: int  # distinct keys routed before the change
    keys_both: int  # of those, the keys routed again after it
    moved_keys: int  # keys of keys_both sent after the change to a worker without their state
    state_before: int  # (key, worker) state entries of the keys_both keys before the change
    new_state: int  # (key, worker) entries created after the change for the keys_both keys
    dist_cost: float  # memory at the end: sum of distinct keys per worker / distinct keys
    control_moved_keys: int  # the same measures on the run without a change
    control_new_state: int
    control_dist_cost: float

    @property
    def moved_share(self) -> float:
        return self.moved_keys / self.keys_both if self.keys_both else 0.0

    @property
    def new_state_share(self) -> float:
        return self.new_state / self.state_before if self.state_before else 0.0

    @property
    def control_moved_share(self) -> float:
        return self.control_moved_keys / self.keys_both if self.keys_both else 0.0

    @property
    def control_new_state_share(self) -> float:
        return self.control_new_state / self.state_before if self.state_before else 0.0

    def summary(self) -> dict:
        out = asdict(self)
        out.update(moved_share=self.moved_share, new_state_share=self.new_state_share,
                   control_moved_share=self.control_moved_share,
                   control_new_state_share=self.control_new_state_share)
        return out


def _change(groupings: list[BaseGrouping], spec: str, workers: int) -> None:
    """Apply the worker change: ``resize`` in place, or a fresh grouping per source (what a Storm rebalance
    does to a plain grouping: its tasks restart and ``prepare`` it with the new target tasks)."""
    resizable = [g for g in groupings if isinstance(g, Resizable)]
    if len(resizable) == len(groupings):
        for g in resizable:
            g.resize(workers)
    else:
        groupings[:] = build_grouping(spec, workers, len(groupings))


def _run(dataset: Dataset, spec: str, workers: int, to: int, at: int, sources: int, rate: float,
         split: str) -> tuple[dict[str, int], dict[str, int], int, float]:
    """Route the stream, changing W to ``to`` before message ``at``; per-key worker bitmasks before/after."""
    groupings = build_grouping(spec, workers, sources)
    before: dict[str, int] = {}
    after: dict[str, int] = {}
    seen = before
    seq = 0
    for index, (ts, keys) in enumerate(dataset.records()):
        if not keys:
            continue
        s = source_of(index, keys[0], sources, split)
        for key in keys:
            if seq == at:
                if to != workers:
                    _change(groupings, spec, to)
                seen = after
            w = groupings[s].choose(key, event_time(ts, seq, rate))
            seen[key] = seen.get(key, 0) | (1 << w)
            seq += 1
    # dist_cost: every (key, worker) pair that ever held state, over the distinct keys.
    holders: dict[str, int] = dict(before)
    for key, mask in after.items():
        holders[key] = holders.get(key, 0) | mask
    cost = sum(mask.bit_count() for mask in holders.values()) / len(holders) if holders else 0.0
    return before, after, seq, cost


def rebalance_run(
    dataset: Dataset,
    spec: str,
    workers: int,
    to: int,
    at: int | None = None,
    sources: int = 1,
    *,
    rate: float = DEFAULT_RATE,
    split: str = "shuffle",
) -> RebalanceResult:
    """Measure the key state that moves when W becomes ``to`` just before message ``at`` (default: the
    middle of the stream), against the same run without the change."""
    if workers < 1 or to < 1:
        raise SpecError(f"worker counts must be at least 1, got {workers} and {to}")
    if split not in SPLITS:
        raise SpecError(f"unknown split {split!r}; valid: {', '.join(SPLITS)}")
    if at is None:
        at = sum(len(k) for _, k in dataset.records()) // 2
    if at < 1:
        raise SpecError(f"the change must come after at least one message, got at={at}")
    before, after, m, cost = _run(dataset, spec, workers, to, at, sources, rate, split)
    if at >= m:
        raise SpecError(f"the change at message {at} is past the end of the stream ({m} messages)")
    c_before, c_after, _, c_cost = _run(dataset, spec, workers, workers, at, sources, rate, split)
    both = [k for k in after if k in before]
    moved = new = state = c_moved = c_new = 0
    for k in both:
        fresh = after[k] & ~before[k]
        moved += fresh != 0
        new += fresh.bit_count()
        state += before[k].bit_count()
        c_fresh = c_after[k] & ~c_before[k]
        c_moved += c_fresh != 0
        c_new += c_fresh.bit_count()
    return RebalanceResult(
        grouping=build_grouping(spec, workers, 1)[0].describe(), workers=workers, to=to, at=at, messages=m,
        keys_before=len(before), keys_both=len(both), moved_keys=moved, state_before=state, new_state=new,
        dist_cost=cost, control_moved_keys=c_moved, control_new_state=c_new, control_dist_cost=c_cost,
    )
