"""The Grouping protocol (docs/design/index.md) and the small base class most groupings share.

A grouping instance lives at one source (an upstream task). ``prepare`` tells it how many workers and
sources there are and which source it is; ``choose`` returns the worker index for one message and
records the decision in the source's local state (local load estimation, PKG §3.2). Nothing reads a clock:
``now`` is event time in seconds, supplied by the caller.

Optional hooks, plain numbers in and out so Storm can feed them from Redis and the simulator from its model:

- ``probe_interval`` (seconds or None) and ``set_loads(loads)``: periodic probing of the true loads;
- ``needs_full_pass`` and ``fit(frequencies)``: offline algorithms that see the whole dataset first;
- ``set_capacities(capacities)``: per-worker service rates (tuples per second);
- ``resize(workers)``: the worker count changed mid-stream;
- ``stats()``: a dict of the grouping's own statistics (``grouping_stats`` in the simulator's and the
  topology's summaries);
- ``set_role(role)``, ``state_version``, ``export_state()`` and ``import_state(state)``: groupings whose sources
  share state in process (``build`` hands them one object) when the sources are separate processes (the Storm
  routers): the ``"leader"`` (source 0) keeps the state up to date and exports it as JSON-able data whenever
  ``state_version`` grows; a ``"follower"`` never changes it and routes with the last state it imported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from keysplit.errors import SpecError
from keysplit.specs import Param


@runtime_checkable
class Grouping(Protocol):
    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None: ...

    def choose(self, key: str, now: float) -> int: ...


class BaseGrouping:
    """Common plumbing: the parameter table, ``prepare`` bookkeeping and the local load vector.

    Subclasses set ``name``, ``summary`` and ``PARAMS`` and implement ``choose``. ``build`` creates one
    prepared instance per source; override it to share state between sources (a global oracle).
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, Param]] = {}
    probe_interval: float | None = None
    needs_full_pass: ClassVar[bool] = False

    def __init__(self, **params: Any) -> None:
        self.params = params
        self.workers = 0
        self.source = 0
        self.sources = 1
        self.local_loads: list[int] = []

    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None:
        if workers < 1:
            raise SpecError(f"{self.name}: the number of workers must be at least 1, got {workers}")
        if sources < 1:
            raise SpecError(f"{self.name}: the number of sources must be at least 1, got {sources}")
        if not 0 <= source < sources:
            raise SpecError(f"{self.name}: source {source} is outside [0, {sources})")
        self.workers = workers
        self.source = source
        self.sources = sources
        self.local_loads = [0] * workers
        self.validate()

    def validate(self) -> None:
        """Checks that need the worker count (d > W); raise SpecError."""

    def choose(self, key: str, now: float) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def build(cls, params: Mapping[str, Any], workers: int, sources: int) -> list[BaseGrouping]:
        """One prepared instance per source."""
        out = []
        for s in range(sources):
            g = cls(**params)
            g.prepare(workers, s, sources)
            out.append(g)
        return out

    def describe(self) -> str:
        """The canonical spec string of this instance: its name and the parameters that differ from defaults."""
        shown = {k: v for k, v in self.params.items() if k not in self.PARAMS or v != self.PARAMS[k].default}
        return self.name + (":" + ",".join(f"{k}={spec_value(v)}" for k, v in shown.items()) if shown else "")


def spec_value(value: object) -> str:
    """A parameter value as a spec writes it (``distinct=false``, not Python's ``False``)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def least_loaded(candidates: Sequence[int], loads: Sequence[float]) -> int:
    """The candidate with the smallest load; ties go to the earliest candidate (deterministic)."""
    best = candidates[0]
    best_load = loads[best]
    for c in candidates[1:]:
        if loads[c] < best_load:
            best, best_load = c, loads[c]
    return best
