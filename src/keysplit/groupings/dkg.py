"""Dynamic Key Grouping (Dalabasmaz & Can): PKG-like splitting over consecutive workers that scales out for
hot keys (paper §4, Algorithms 1-6).

Every key has a *key item* (§4.1.1): occurrence count, last time seen, last time its scaling was checked, and
its spreading width N_m. Its candidate workers are consecutive (Eq. 5): ``base = hash(key) mod W`` and
``base, base+1, ..., base+N_m-1`` (mod W), N_m = ``choices`` (2) by default. A message goes to the candidate
with the lowest load, where load is this source's local share of the messages it sent, in percent
(local load estimation, as PKG).

Key spaces (§4.1.2, Fig. 6): of ``expected_keys`` (100), Old holds 10% and Teenage 40%; Baby (50%) is
unbounded. A new key starts in Baby. Every ``promote_teenage`` (15) s of event time Baby's top items are
promoted to Teenage, every ``promote_old`` (60) s Teenage's to Old, with Algorithm 3's swap rule: the
source's items from the top down meet the destination's from the bottom up, and they swap until the
destination's item has strictly more occurrences; empty destination slots count as 0 occurrences.

Scaling (Algorithms 4-6): L_i = 100/W (Eq. 3), L_s = L_i + sqrt(L_i) (Eq. 4). At most once per
``check_interval`` (60) s per key, a key is checked:

- scale out when warmed up (more than ``warmup`` = 15 s since the first message), its least loaded candidate
  is at or above L_s, and it is in Old space: the next consecutive worker ``base + N_m`` joins (and gets this
  message) if its load is lower than that minimum. N_m never exceeds ``floor(100/L_s) + 1`` (Table 1:
  W=5 -> 5, 10 -> 8, 20 -> 14, 50 -> 30, 100 -> 51), nor W;
- scale down when N_m > 2 (``choices``) and at least 2 candidates are below L_s: the last worker leaves, and the message
  goes to the least loaded of the rest (Algorithm 4's recursive call, which cannot check again).

A key is checked only when scaling could apply to it (it is in Old space, or its N_m is above 2); the first
such message after warm-up checks it, then at most once per interval.

Algorithm 1's "truncate BS to discard quite new items" is read as: only the top ``|Teenage|`` Baby items are
candidates at a cycle (the newest keys are the least frequent ones).

Bounded memory (the paper keeps Baby unbounded): at each Baby cycle (tick t = start + 15k), the key items of
Baby-space keys last seen before t - ``baby_ttl`` (default 60 s, one Old cycle) are dropped; when
``baby_ttl`` is not a multiple of ``promote_teenage`` a key is dropped up to one Baby cycle later. A stream
with millions of distinct keys then holds only the key items of the keys seen in the last ``baby_ttl`` (+15)
seconds, e.g. what 600,000 messages bring at 10,000 messages/s, plus at most 50 Teenage/Old items. A dropped
key that comes back starts over in Baby with a count of 1; a key hot enough to matter (a few percent of the
load) is seen every second and never dropped. ``baby_ttl=none`` keeps every key item, as the paper does.
The cost of a Baby cycle is proportional to the keys it drops or may promote, not to the size of Baby.

>>> from keysplit.groupings import build_grouping
>>> [g] = build_grouping("dkg", workers=5)
>>> g.candidates("hot")  # consecutive workers from hash(key) mod W
[0, 1]
>>> [g.choose("hot", 0.0) for _ in range(4)]
[0, 1, 0, 1]
>>> g.max_width, g.key_items["hot"][0]  # Table 1 for W=5; the key item's count
(5, 4)
"""

from __future__ import annotations

import math
from typing import ClassVar

import mmh3

from keysplit.errors import SpecError
from keysplit.groupings.base import BaseGrouping
from keysplit.hashing import BASE_SEED
from keysplit.specs import Param, optional_float

# Key item fields (a list per key: the hot path indexes it).
COUNT, LAST_SEEN, LAST_CHECK, WIDTH, SPACE = range(5)
BABY, TEENAGE, OLD = 0, 1, 2
SPACE_NAMES = {BABY: "baby", TEENAGE: "teenage", OLD: "old"}


def ideal_load(workers: int) -> float:
    """L_i = 100/m, the even share of each worker in percent (Eq. 3)."""
    return 100.0 / workers


def scale_threshold(workers: int) -> float:
    """L_s = L_i + sqrt(L_i), the load at which a hot key scales out (Eq. 4)."""
    li = ideal_load(workers)
    return li + math.sqrt(li)


def max_width(workers: int) -> int:
    """The most workers a key may spread over: floor(100/L_s) + 1, at most W (Table 1).

    >>> [max_width(w) for w in (5, 10, 20, 50, 100)]
    [5, 8, 14, 30, 51]
    """
    return min(workers, math.floor(100.0 / scale_threshold(workers)) + 1)


def _positive(v: float) -> bool:
    return v > 0


class DynamicKeyGrouping(BaseGrouping):
    """DKG: consecutive candidates, least loaded share wins; hot Old-space keys scale out past 2 workers."""

    name = "dkg"
    summary = ("dynamic key grouping: consecutive workers, hot Old-space keys scale out to floor(100/L_s)+1; "
               "memory bounded by dropping Baby keys unseen for baby_ttl s")
    PARAMS: ClassVar[dict[str, Param]] = {
        "choices": Param(int, 2, "initial consecutive candidates per key", lambda v: v >= 1, "at least 1"),
        "expected_keys": Param(int, 100, "expected distinct keys: Old holds 10%, Teenage 40%", lambda v: v >= 1,
                               "at least 1"),
        "warmup": Param(float, 15.0, "seconds before any scale out (cold start)", lambda v: v >= 0, "at least 0"),
        "promote_teenage": Param(float, 15.0, "seconds between Baby -> Teenage promotions", _positive, "positive"),
        "promote_old": Param(float, 60.0, "seconds between Teenage -> Old promotions", _positive, "positive"),
        "check_interval": Param(float, 60.0, "a key's scaling is checked at most once per this many seconds",
                                lambda v: v >= 0, "at least 0"),
        "baby_ttl": Param(optional_float, 60.0, "Baby key items unseen this many seconds are dropped (none = keep)",
                          lambda v: v is None or v >= 0, "at least 0, or none"),
    }

    def __init__(
        self,
        choices: int = 2,
        expected_keys: int = 100,
        warmup: float = 15.0,
        promote_teenage: float = 15.0,
        promote_old: float = 60.0,
        check_interval: float = 60.0,
        baby_ttl: float | None = 60.0,
    ) -> None:
        super().__init__(choices=choices, expected_keys=expected_keys, warmup=warmup,
                         promote_teenage=promote_teenage, promote_old=promote_old, check_interval=check_interval,
                         baby_ttl=baby_ttl)
        self.choices = choices
        self.old_capacity = max(1, round(expected_keys * 0.1))
        self.teenage_capacity = max(1, round(expected_keys * 0.4))
        self.warmup = warmup
        self.promote_teenage = promote_teenage
        self.promote_old = promote_old
        self.check_interval = check_interval
        self.baby_ttl = baby_ttl

    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None:
        super().prepare(workers, source, sources)
        self.scale_threshold = scale_threshold(workers)  #: L_s, percent
        self.min_width = min(self.choices, workers)  #: N_m of a new key, and the floor of scaling down
        self.max_width = max(self.min_width, max_width(workers))
        #: key -> [count, last seen, last scaling check, width N_m, space]
        self.key_items: dict[str, list] = {}
        self.teenage_space: set[str] = set()
        self.old_space: set[str] = set()
        self.sent = 0  #: messages this source routed (the denominator of the load shares)
        # Bookkeeping that keeps the Baby cycle proportional to what changed, not to the size of Baby:
        # generations of Baby keys by the Baby cycle they were (last) filed in, visited when they expire,
        # and the Baby keys whose count reached the least Teenage count (the only ones Algorithm 3 can move).
        self._generations: dict[int, list[str]] = {}
        self._born: list[str] = []  # the file of the current Baby cycle
        self._rising: dict[str, None] = {}
        self._floor = 0  # the least Teenage count at the last cycle (0 while Teenage has empty slots)
        self.started: float | None = None
        self._next_teenage = self._next_old = self._next_cycle = math.inf
        self.scale_outs = self.scale_downs = self.dropped = 0

    def validate(self) -> None:
        if self.choices > self.workers:
            raise SpecError(f"dkg: choices={self.choices} exceeds the number of workers ({self.workers})")

    # -- candidates and loads ------------------------------------------------------------------------------

    def base(self, key: str) -> int:
        """The first candidate: hash(key) mod W (Eq. 5), key grouping's worker."""
        return mmh3.hash(key, BASE_SEED, False) % self.workers

    def candidates(self, key: str) -> list[int]:
        """``base, base+1, ..., base+N_m-1`` (mod W), N_m the key's current width."""
        item = self.key_items.get(key)
        width = item[WIDTH] if item is not None else self.min_width
        base = self.base(key)
        return [(base + i) % self.workers for i in range(width)]

    def load_share(self, worker: int) -> float:
        """This source's share of its messages that went to ``worker``, in percent."""
        return 100.0 * self.local_loads[worker] / self.sent if self.sent else 0.0

    def space_of(self, key: str) -> str | None:
        """``baby``, ``teenage`` or ``old`` (None for a key without a key item)."""
        item = self.key_items.get(key)
        return None if item is None else SPACE_NAMES[item[SPACE]]

    # -- routing (Algorithm 4) -----------------------------------------------------------------------------

    def choose(self, key: str, now: float) -> int:
        if now >= self._next_cycle:
            self._run_cycles(now)
        elif self.started is None:
            self._start(now)
        item = self.key_items.get(key)
        if item is None:
            item = self.key_items[key] = [1, now, -math.inf, self.min_width, BABY]
            self._born.append(key)
            if self._floor <= 1:
                self._rising[key] = None
        else:
            count = item[COUNT] = item[COUNT] + 1
            item[LAST_SEEN] = now
            if count >= self._floor and item[SPACE] == BABY:
                self._rising[key] = None
        workers = self.workers
        base = mmh3.hash(key, BASE_SEED, False) % workers
        width = item[WIDTH]
        loads = self.local_loads
        # findBestCandidate: the least loaded of the consecutive candidates (ties: the first). Shares of the
        # same total compare like the counts, so the hot path compares counts.
        if width == 2:  # the common case, without the loop
            c = base + 1 if base + 1 < workers else 0
            best = c if loads[c] < loads[base] else base
        else:
            best = base
            low = loads[base]
            for i in range(1, width):
                c = base + i
                if c >= workers:
                    c -= workers
                if loads[c] < low:
                    best, low = c, loads[c]
        if (
            (width > self.min_width or item[SPACE] == OLD)
            and now - item[LAST_CHECK] >= self.check_interval
            and now - self.started > self.warmup
        ):
            item[LAST_CHECK] = now
            best = self._check_scaling(key, item, base, best)
        loads[best] += 1
        self.sent += 1
        return best

    def _check_scaling(self, key: str, item: list, base: int, best: int) -> int:
        """shouldScaleOut / shouldScaleDown (Algorithms 5 and 6) for a key that is due; returns the worker."""
        workers = self.workers
        width = item[WIDTH]
        shares = [self.load_share((base + i) % workers) for i in range(width)]
        threshold = self.scale_threshold
        low = min(shares)  # LLmin
        below = sum(1 for s in shares if s < threshold)  # NLL
        if low >= threshold and item[SPACE] == OLD:  # Algorithm 5 (warm-up checked by the caller)
            if width < self.max_width:
                new = (base + width) % workers
                if self.load_share(new) < low:
                    item[WIDTH] = width + 1
                    self.scale_outs += 1
                    return new
            return best
        if width > self.min_width and below >= 2:  # Algorithm 6, then chooseBestTask again on the narrower set
            item[WIDTH] = width - 1
            self.scale_downs += 1
            keep = [(base + i) % workers for i in range(width - 1)]
            return min(keep, key=self.load_share)
        return best

    # -- key spaces (Algorithms 1-3) -----------------------------------------------------------------------

    def _start(self, now: float) -> None:
        self.started = now
        self._born = self._generations.setdefault(0, [])
        self._next_teenage = now + self.promote_teenage
        self._next_old = now + self.promote_old
        self._next_cycle = min(self._next_teenage, self._next_old)

    def _run_cycles(self, now: float) -> None:
        if self.started is None:
            self._start(now)
            if now < self._next_cycle:
                return
        if now >= self._next_teenage:
            # the cycle's own time: the latest 15 s tick reached (the Key Space Manager's clock)
            skipped = math.floor((now - self._next_teenage) / self.promote_teenage)
            tick = self._next_teenage + skipped * self.promote_teenage
            self.promote_to_teenage(tick)
            self._next_teenage = tick + self.promote_teenage
        if now >= self._next_old:
            skipped = math.floor((now - self._next_old) / self.promote_old)
            self.promote_to_old()
            self._next_old += (skipped + 1) * self.promote_old
        self._next_cycle = min(self._next_teenage, self._next_old)
        self._born = self._generations.setdefault(self._generation(now), [])
        self._update_floor()

    def _generation(self, t: float) -> int:
        """The Baby cycle ``t`` falls in (0 for the first ``promote_teenage`` seconds)."""
        return math.floor((t - self.started) / self.promote_teenage)

    def _update_floor(self) -> None:
        """Keep ``_rising`` a superset of the Baby keys with at least the least Teenage count."""
        items = self.key_items
        teenage = self.teenage_space
        floor = min(items[k][COUNT] for k in teenage) if len(teenage) >= self.teenage_capacity else 0
        if floor < self._floor:  # Old demoted a cold item into Teenage: find the Baby keys now in reach
            self._rising = {k: None for k, it in items.items() if it[SPACE] == BABY and it[COUNT] >= floor}
        else:
            self._rising = {k: None for k in self._rising
                            if (it := items.get(k)) is not None and it[SPACE] == BABY and it[COUNT] >= floor}
        self._floor = floor

    def drop_stale_babies(self, now: float) -> None:
        """Drop the key items of Baby keys not seen for more than ``baby_ttl`` seconds (bounded memory).

        Baby keys are filed by the Baby cycle in which they were last seen (when created, demoted or
        re-filed); a cycle's file is only read once all of it is older than the TTL, and each key in it is
        then dropped if it is stale, or re-filed under the cycle of its last sighting. Each key is visited
        about once per TTL, however large Baby grows.
        """
        if self.baby_ttl is None:
            return
        cutoff = now - self.baby_ttl
        items, generations = self.key_items, self._generations
        expired = [g for g in generations if self.started + (g + 1) * self.promote_teenage <= cutoff]
        for g in sorted(expired):
            for k in generations.pop(g):
                it = items.get(k)
                if it is None or it[SPACE] != BABY:
                    continue  # already dropped, or promoted (re-filed if it is ever demoted)
                if it[LAST_SEEN] < cutoff:
                    del items[k]
                    self._rising.pop(k, None)
                    self.dropped += 1
                else:
                    generations.setdefault(self._generation(it[LAST_SEEN]), []).append(k)

    def promote_to_teenage(self, now: float) -> None:
        """Algorithm 1 at tick ``now``: drop stale Baby items (``baby_ttl``), then promote the top of Baby.

        "Sort BS, truncate BS": only Baby items that Algorithm 3 could promote are ranked, i.e. all of them
        while Teenage has empty slots, else those with at least the least Teenage count (``_rising``); the
        top ``|Teenage|`` of them by count (ties: by key) meet Teenage from its bottom up.
        """
        self.drop_stale_babies(now)
        items = self.key_items
        candidates = [k for k in self._rising if (it := items.get(k)) is not None and it[SPACE] == BABY]
        babies = sorted(candidates, key=lambda k: (-items[k][COUNT], k))[: self.teenage_capacity]
        self._promote(babies, self.teenage_space, self.teenage_capacity, TEENAGE, None)

    def promote_to_old(self) -> None:
        """Algorithm 2: promote the top of Teenage into Old."""
        items = self.key_items
        teenagers = sorted(self.teenage_space, key=lambda k: (-items[k][COUNT], k))
        self._promote(teenagers, self.old_space, self.old_capacity, OLD, self.teenage_space)

    def _promote(self, source: list[str], dest: set[str], capacity: int, dest_space: int,
                 source_set: set[str] | None) -> None:
        """Algorithm 3 (promoteToNextSpace): ``source`` sorted by decreasing count, swapped into ``dest``.

        The destination's items are visited from the least frequent up, empty slots first (0 occurrences);
        a source item moves up unless the destination item has strictly more occurrences.
        """
        items = self.key_items
        bottom_up = sorted(dest, key=lambda k: (items[k][COUNT], k))
        down_space = dest_space - 1
        j = 0
        for f in source:
            fo = items[f][COUNT]
            if len(dest) < capacity:  # an empty slot (0 occurrences): move up
                pass
            else:
                if j >= len(bottom_up):
                    break
                last = bottom_up[j]
                if items[last][COUNT] > fo:
                    break
                j += 1
                dest.discard(last)  # Li goes to the tail of the source space
                items[last][SPACE] = down_space
                if down_space == TEENAGE:
                    self.teenage_space.add(last)
                else:  # back in Baby: file it under its last sighting and keep it a promotion candidate
                    self._generations.setdefault(self._generation(items[last][LAST_SEEN]), []).append(last)
                    self._rising[last] = None
            dest.add(f)  # Fi goes to the head of the destination space
            items[f][SPACE] = dest_space
            if source_set is not None:
                source_set.discard(f)
