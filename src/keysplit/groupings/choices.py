"""D-Choices and W-Choices (Nasir, De Francisci Morales, Kourtellis, Serafini, ICDE 2016): PKG for the tail,
more choices for the head.

Each source runs a SpaceSaving sketch (``capacity`` counters, default 100) over the keys it routes. A key is
in the head H when its estimated frequency in this source's sub-stream, ``count / n``, exceeds ``theta``
(default ``1/(5W)``). Tail keys use PKG's two hash choices H_1(k), H_2(k) with the source's local load
(exactly :class:`~keysplit.groupings.pkg.PartialKeyGrouping`'s ``d=2`` rule, same hashes). Head keys get more:

- ``wchoices``: any of the W workers, the least loaded by the local estimate;
- ``dchoices``: the least loaded of the first d hash choices H_1(k) .. H_d(k), with d the smallest value in
  [2, W] for which the paper's expected-imbalance conditions hold (:func:`choose_d`). d is one number per
  source, recomputed only when the head set changes.

The sketch's size decides what "head" can mean. SpaceSaving with c counters overestimates a count by at most
n/c, so it can only tell keys above theta from the tail when c >= 1/theta. With the default 100 counters and
theta = 1/(5W) that holds up to W = 20; beyond it the least counter exceeds theta*n, every key that enters the
sketch is "hot", and W-Choices spreads nearly every key over all W workers: shuffle grouping's balance and
memory. That is the FISH paper's motivating W-C100 ("similar to SG", its Fig. 3). ``capacity=auto`` sizes
the sketch to the threshold, c = ceil(1/theta), which is the reading behind FISH's main comparison (Fig. 10,
11), where W-C's memory stays close to key grouping's.

Decisions where the paper is silent (docs/groupings/choices.md):

- The head is tracked incrementally: after each update the routed key's own membership (count > theta*n) is
  compared with the stored head set; when it differs (a key joined or left) the whole head set, p_H, p_1,
  |H| and d are recomputed from the sketch (O(capacity)). A head key whose frequency decayed without being
  seen again leaves at the next recomputation, which is harmless: it routes nothing meanwhile.
- ``round(p1*W)`` rounds half up, as the authors' Java (``Math.round``), not Python's banker's rounding.
- ``distinct`` (default true, as ``pkg``): a key's hash choices, the tail's two and a head key's d, are
  different workers (:func:`keysplit.hashing.distinct_choices`); ``distinct=false`` keeps the paper's
  independent hashes. d is still chosen by the paper's bound, which assumes independent choices, so with
  distinct choices it is, if anything, one choice generous.
- When d reaches W, a head key may go to every worker (as the authors' reference implementation does), so
  D-Choices meets W-Choices at extreme skew; below W the d choices are independent hashes and may coincide,
  which the bound accounts for with the (1 - b^d) terms.
"""

from __future__ import annotations

import math
from typing import ClassVar

import mmh3

from keysplit.errors import SpecError
from keysplit.groupings.base import BaseGrouping
from keysplit.hashing import BASE_SEED, candidates, second_choice
from keysplit.sketches.spacesaving import SpaceSaving
from keysplit.specs import Param, boolean, int_or_auto, optional_float

#: The tail's choices: PKG's two.
TAIL_CHOICES = 2


def choose_d(p1: float, p_head: float, head_size: int, workers: int, eps: float = 1e-4) -> int:
    """The number of choices for head keys (D-Choices, ICDE 2016, the expected-imbalance conditions).

    With ``b = (W-1)/W``, start at ``round(p1*W)`` (clamped to [2, W]) and increase d while either

    - ``pH + (1-pH) * (1 - b^(|H|d))^2 > 1 - b^(|H|d) + eps``  (the head's workers can absorb the head), or
    - ``p1 + (pH-p1) * (1-b^d)^d + (1-pH) * (1-b^d)^2 > 1 - b^d + eps``  (the top key's d workers can absorb it)

    holds; the answer is clamped to [2, W].

    >>> choose_d(p1=0.05, p_head=0.2, head_size=5, workers=10)
    2
    >>> [choose_d(p1, p1, 1, 50) for p1 in (0.1, 0.2, 0.4)]
    [6, 15, 50]
    """
    if workers <= TAIL_CHOICES:
        return workers
    b = (workers - 1) / workers
    d = min(max(int(p1 * workers + 0.5), TAIL_CHOICES), workers)
    p_tail = 1.0 - p_head
    while d < workers:
        x = b ** (head_size * d)
        y = 1.0 - b**d
        head_fits = p_head + p_tail * (1.0 - x) ** 2 <= 1.0 - x + eps
        top_fits = p1 + (p_head - p1) * y**d + p_tail * y * y <= y + eps
        if head_fits and top_fits:
            break
        d += 1
    return d


def _theta_ok(v: float | None) -> bool:
    return v is None or 0 < v <= 1


def _capacity_ok(v: int | str) -> bool:
    return v == "auto" or v >= 1


def sketch_capacity(capacity: int | str, theta: float) -> int:
    """The SpaceSaving counters: ``capacity``, or for ``auto`` the fewest that resolve theta, ceil(1/theta).

    >>> sketch_capacity(100, 1 / 160), sketch_capacity("auto", 1 / 160), sketch_capacity("auto", 0.3)
    (100, 160, 4)
    """
    if capacity == "auto":
        return math.ceil(1.0 / theta - 1e-9)  # 1/(1/160) is 160.00000000000003 in floating point
    return int(capacity)


class _HeadTailGrouping(BaseGrouping):
    """Shared machinery: the per-source sketch, the head set, and PKG's two choices for the tail."""

    PARAMS: ClassVar[dict[str, Param]] = {
        "capacity": Param(int_or_auto, 100, "SpaceSaving counters per source (auto = ceil(1/theta))", _capacity_ok,
                          "at least 1, or auto"),
        "theta": Param(optional_float, None, "head threshold on a key's estimated frequency (none = 1/(5W))",
                       _theta_ok, "a frequency in (0, 1], or none"),
        "distinct": Param(boolean, True, "a key's hash choices are different workers (false: the paper's "
                          "independent hashes)"),
    }

    def __init__(self, capacity: int | str = 100, theta: float | None = None, distinct: bool = True,
                 **extra) -> None:
        super().__init__(capacity=capacity, theta=theta, distinct=distinct, **extra)
        self.distinct = distinct

    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None:
        super().prepare(workers, source, sources)
        theta = self.params["theta"]
        self.theta = theta if theta is not None else 1.0 / (5 * workers)
        self.capacity = sketch_capacity(self.params["capacity"], self.theta)
        self.sketch = SpaceSaving(self.capacity)
        #: keys whose estimated frequency exceeded theta at the last recomputation (H in the paper)
        self.head_keys: set[str] = set()
        self.p_head = 0.0  #: p_H, the head's estimated total probability
        self.p1 = 0.0  #: the top key's estimated probability
        self.head_changes = 0  #: how many times the head set was recomputed

    def refresh_head(self) -> None:
        """Recompute the head set and its statistics from the sketch (the head changed)."""
        n = self.sketch.n
        cut = self.theta * n
        heads = [(k, c) for k, c, _ in self.sketch.items() if c > cut]
        self.head_keys = {k for k, _ in heads}
        self.p_head = sum(c for _, c in heads) / n if n else 0.0
        self.p1 = max((c for _, c, _ in self.sketch.items()), default=0) / n if n else 0.0
        self.head_changes += 1
        self.head_changed()

    def head_changed(self) -> None:
        """Hook for subclasses: the head statistics were just recomputed."""

    def tail_candidates(self, key: str) -> list[int]:
        """H_1(k), H_2(k): PKG's two hash choices."""
        if self.distinct:
            return candidates(key, min(TAIL_CHOICES, self.workers), self.workers, True)
        return candidates(key, TAIL_CHOICES, self.workers, False)

    def head_candidates(self, key: str) -> list[int]:  # pragma: no cover - abstract
        raise NotImplementedError

    def candidates(self, key: str) -> list[int]:
        """The workers ``key`` may go to now: its head choices if it is in the head, else its two tail choices."""
        return self.head_candidates(key) if key in self.head_keys else self.tail_candidates(key)

    def route_head(self, key: str, loads: list[int]) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def choose(self, key: str, now: float) -> int:
        sketch = self.sketch
        count = sketch.update(key)
        is_head = count > self.theta * sketch.n
        if is_head is not (key in self.head_keys):
            self.refresh_head()
        loads = self.local_loads
        if is_head:
            w = self.route_head(key, loads)
        else:
            a = mmh3.hash(key, BASE_SEED, False) % self.workers
            b = second_choice(key, a, self.workers, self.distinct)
            w = b if loads[b] < loads[a] else a
        loads[w] += 1
        return w


class WChoices(_HeadTailGrouping):
    """W-Choices: head keys go to the least loaded of all W workers, tail keys to PKG's two choices.

    >>> from keysplit.groupings import build_grouping
    >>> [g] = build_grouping("wchoices", workers=4)
    >>> [g.choose("hot", 0.0) for _ in range(6)]  # the only key so far: in the head, spread over all workers
    [0, 1, 2, 3, 0, 1]
    >>> sorted(g.head_keys)
    ['hot']
    """

    name = "wchoices"
    summary = "W-Choices: head keys (SpaceSaving count/n > theta, 1/(5W)) go to the least loaded of all W workers"

    def head_candidates(self, key: str) -> list[int]:
        return list(range(self.workers))

    def route_head(self, key: str, loads: list[int]) -> int:
        return loads.index(min(loads))


class DChoices(_HeadTailGrouping):
    """D-Choices: head keys go to the least loaded of their first d hash choices, tail to PKG's two.

    >>> from keysplit.groupings import build_grouping
    >>> [g] = build_grouping("dchoices", workers=10)
    >>> ws = [g.choose("hot", 0.0) for _ in range(200)]  # p1 = 1: d grows to W, the key may use every worker
    >>> g.d, sorted(set(ws)) == list(range(10))
    (10, True)
    >>> w = g.choose("cold", 0.0)  # 1/201 < theta = 1/50: a tail key, PKG's two choices
    >>> "cold" in g.head_keys, w in g.tail_candidates("cold")
    (False, True)
    """

    name = "dchoices"
    summary = "D-Choices: head keys (SpaceSaving count/n > theta, 1/(5W)) get the least loaded of d hash choices"
    PARAMS: ClassVar[dict[str, Param]] = {
        **_HeadTailGrouping.PARAMS,
        "eps": Param(float, 1e-4, "slack of the imbalance conditions that pick d", lambda v: v >= 0,
                     "at least 0"),
    }

    def __init__(self, capacity: int | str = 100, theta: float | None = None, distinct: bool = True,
                 eps: float = 1e-4) -> None:
        super().__init__(capacity=capacity, theta=theta, distinct=distinct, eps=eps)
        self.eps = eps

    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None:
        super().prepare(workers, source, sources)
        self.d = min(TAIL_CHOICES, workers)  #: choices of a head key (recomputed when the head changes)
        self._head_cache: dict[str, list[int]] = {}

    def validate(self) -> None:
        if self.eps >= 1:
            raise SpecError(f"dchoices: eps={self.eps} makes every d acceptable; use a small slack such as 1e-4")

    def head_changed(self) -> None:
        d = choose_d(self.p1, self.p_head, len(self.head_keys), self.workers, self.eps) if self.head_keys else self.d
        if d != self.d or len(self._head_cache) > 4 * self.capacity:
            self._head_cache = {}
        self.d = d

    def head_candidates(self, key: str) -> list[int]:
        if self.d >= self.workers:
            return list(range(self.workers))
        return candidates(key, self.d, self.workers, self.distinct)

    def route_head(self, key: str, loads: list[int]) -> int:
        if self.d >= self.workers:
            return loads.index(min(loads))
        cands = self._head_cache.get(key)
        if cands is None:
            cands = self._head_cache[key] = self.head_candidates(key)
        return min(cands, key=loads.__getitem__)
