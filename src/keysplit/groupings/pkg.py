"""Partial Key Grouping (Nasir et al., TKDE): key splitting + local load estimation over d hash choices.

Each key has d candidate workers H_1(k) .. H_d(k) (``hashing.choices``); a message goes to the candidate
with the lowest load (§3: P_t(k) = argmin_i {L_i(t) : H_j(k) = i}), so a hot key is split over its
candidates. The load comes from one of three places, the paper's §6 variants:

- ``load=local`` (L): the source counts what it sent itself (§3.2, local load estimation);
- ``load=global`` (G): one load vector shared by all sources, the oracle no real system has;
- ``probe=T`` (L P_T): local, but every T seconds of event time the estimate is reset to the workers'
  true loads, fetched through the probe the host attached (``attach_probe``).

The paper says a probe sets "the local estimate vector to the actual load of the workers". Taken
literally (``probe_scale=total``) every source then sees the same gap and all S of them fill it at once,
overshooting by (S-1) times the gap at each probe: imbalance grows with S. The paper's Fig. 5 shows
probing performing like local estimation, which holds when each source takes its 1/S share of the true
loads (``probe_scale=share``, the default): the sources together correct exactly the observed gap.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import mmh3

from keysplit.errors import SpecError
from keysplit.groupings.base import BaseGrouping, least_loaded
from keysplit.hashing import BASE_SEED, candidates, second_choice
from keysplit.specs import Param, boolean, choice, optional_float


def next_probe_after(next_probe: float, now: float, interval: float) -> float:
    """The first time after ``now`` on the grid ``next_probe + k * interval``.

    A jump rather than a step-by-step walk, so a host whose clock starts at Unix time (a Storm router)
    does not loop 10^8 times on its first tuple; the final steps make it exact whatever the rounding.
    ``keysplit.simulator.fast`` repeats these very operations, so both paths probe at the same instants.

    >>> next_probe_after(0.0, 10.5, 2.0), next_probe_after(1.7e18, 1.7e18, 1.0)  # the second: ns timestamps
    (12.0, 1.7000000000000003e+18)
    """
    if next_probe <= now and interval < float("inf"):
        next_probe += math.floor((now - next_probe) / interval) * interval
    while next_probe <= now:
        stepped = next_probe + interval
        if stepped == next_probe:
            # the interval is below the float resolution at this time (nanosecond timestamps with probe=1):
            # every later representable instant is past a grid point, so the next probe is the next instant
            return math.nextafter(now, math.inf)
        next_probe = stepped
    return next_probe


class PartialKeyGrouping(BaseGrouping):
    """PKG: the least loaded of a key's d hash choices.

With ``distinct=true`` (the default, as Storm's PartialKeyGrouping) the d choices are d different workers
(:func:`keysplit.hashing.distinct_choices`); ``distinct=false`` is the paper's independent hashes, where a
key's choices coincide with probability 1/W and such a key is not split at all.

    >>> from keysplit.groupings import build_grouping
    >>> [g] = build_grouping("pkg", workers=8)
    >>> first, second = g.choose("the", 0.0), g.choose("the", 0.0)
    >>> first != second, len(set(g.candidates("the")))
    (True, 2)
    """

    name = "pkg"
    summary = "partial key grouping: least loaded of d hash choices (key splitting)"
    PARAMS = {
        "d": Param(int, 2, "number of hash choices per key", lambda v: v >= 1, "at least 1"),
        "load": Param(choice("local", "global"), "local", "local estimate per source, or the global oracle"),
        "probe": Param(
            optional_float, None, "seconds between probes of the true loads (local only)",
            lambda v: v is None or v > 0, "a positive number of seconds",
        ),
        "probe_scale": Param(
            choice("share", "total"), "share",
            "a probe sets the estimate to the true loads divided by S (share) or to the true loads (total)",
        ),
        "distinct": Param(boolean, True, "the d choices are d different workers (false: independent hashes, "
                          "the paper's setting, which may coincide)"),
    }

    def __init__(
        self, d: int = 2, load: str = "local", probe: float | None = None, probe_scale: str = "share",
        distinct: bool = True,
    ) -> None:
        super().__init__(d=d, load=load, probe=probe, probe_scale=probe_scale, distinct=distinct)
        self.d = d
        self.distinct = distinct
        self.probe_interval = probe
        self._probe: Callable[[], Sequence[int]] | None = None
        self._next_probe = probe if probe is not None else float("inf")

    def validate(self) -> None:
        if self.d > self.workers:
            raise SpecError(f"pkg: d={self.d} exceeds the number of workers ({self.workers}); use 1 <= d <= W")
        if self.params["load"] == "global" and self.probe_interval is not None:
            raise SpecError("pkg: probe applies to load=local only (the global oracle is always exact)")
        # d == 2 is the paper's default and the hot path: bind a specialised method.
        if self.d == 2:
            self.choose = self._choose2  # type: ignore[method-assign]


    @classmethod
    def build(cls, params: Mapping[str, Any], workers: int, sources: int) -> list[BaseGrouping]:
        instances = super().build(params, workers, sources)
        if params.get("load") == "global":
            shared = instances[0].local_loads
            for g in instances:
                g.local_loads = shared  # G: every source reads and writes the same load vector
        return instances

    def attach_probe(self, probe: Callable[[], Sequence[int]]) -> None:
        """Give the source a way to read the workers' true loads (used when ``probe`` is set)."""
        self._probe = probe

    def set_loads(self, loads: Sequence[float]) -> None:
        """Reset the local estimate from the true ``loads`` (what a probe returns), per ``probe_scale``."""
        scale = 1.0 / self.sources if self.params["probe_scale"] == "share" else 1.0
        self.local_loads[:] = [x * scale for x in loads]

    def _maybe_probe(self, now: float) -> None:
        if self._probe is not None:
            self.set_loads(self._probe())
        self._next_probe = next_probe_after(self._next_probe, now, self.probe_interval or float("inf"))

    def candidates(self, key: str) -> list[int]:
        """H_1(k) .. H_d(k); the first is key grouping's choice."""
        return candidates(key, self.d, self.workers, self.distinct)

    def choose(self, key: str, now: float) -> int:
        if now >= self._next_probe:
            self._maybe_probe(now)
        loads = self.local_loads
        best = least_loaded(self.candidates(key), loads)  # P_t(k): argmin of the local loads, earliest on ties
        loads[best] += 1
        return best

    def _choose2(self, key: str, now: float) -> int:
        if now >= self._next_probe:
            self._maybe_probe(now)
        loads = self.local_loads
        a = mmh3.hash(key, BASE_SEED, False) % self.workers
        b = second_choice(key, a, self.workers, self.distinct)
        w = b if loads[b] < loads[a] else a
        loads[w] += 1
        return w
