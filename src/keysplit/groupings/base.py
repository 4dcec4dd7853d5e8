"""The Grouping protocol (docs/design/index.md) and the small base class most groupings share.

A grouping instance lives at one source (an upstream task). ``prepare`` tells it how many workers and
sources there are and which source it is; ``choose`` returns the worker index for one message and
records the decision in the source's local state (local load estimation, PKG §3.2). Nothing reads a clock:
``now`` is event time in seconds, supplied by the caller.

Optional hooks, plain numbers in and out so Storm can feed them from Redis and the simulator from its model, each
a small protocol below that a host tests with ``isinstance`` (they are ``runtime_checkable``):

- :class:`Candidates`, ``candidates(key)``: the workers a key may go to now, Storm's PKG "assignment creator"
  (deterministic, computed by every source alone); ``choose`` is then the "target selector" among them;
- :class:`Probing`, ``attach_probe(probe)`` and ``set_loads(loads)`` with ``probe_interval`` (seconds or None):
  periodic probing of the true loads;
- :class:`Offline`, ``fit(frequencies)`` with ``needs_full_pass``: offline algorithms that see the whole dataset
  first;
- :class:`Capacities`, ``set_capacities(capacities)``: per-worker service rates (tuples per second);
- :class:`Resizable`, ``resize(workers)``: the worker count changed mid-stream;
- :class:`Reporting`, ``stats()``: a dict of the grouping's own statistics (``grouping_stats`` in the simulator's
  and the topology's summaries);
- :class:`SharedState`, ``set_role(role)``, ``state_version``, ``export_state()``, ``import_state(state)``,
  ``epoch`` and ``epoch_of(now)``: groupings whose sources share state in process (``build`` hands them one object)
  when the sources are separate processes (the Storm routers): the ``"leader"`` (source 0) keeps the state up to
  date and exports it as JSON-able data whenever ``state_version`` grows, each state naming the first period of
  event time it applies to (``since``), and its progress (``epoch``: the latest period it routed a message in);
  a ``"follower"`` never changes it: its host installs, for a message of period ``epoch_of(now)`` = k, the latest
  state with ``since`` <= k once the leader's ``epoch`` has reached k, so its decisions are the in-process ones.

``tests/groupings/test_grouping_battery.py`` runs every registered grouping through the protocol and the hooks it has.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from keysplit.errors import SpecError
from keysplit.specs import Param


@runtime_checkable
class Grouping(Protocol):
    def prepare(self, workers: int, source: int = 0, sources: int = 1) -> None: ...

    def choose(self, key: str, now: float) -> int: ...


@runtime_checkable
class Candidates(Protocol):
    """The workers ``key`` may go to now (the first is key grouping's choice where the family hashes)."""

    def candidates(self, key: str) -> list[int]: ...


@runtime_checkable
class Probing(Protocol):
    """Periodic probing of the true loads (PKG's L P_T): the host gives a probe, the grouping calls it every
    ``probe_interval`` seconds of event time and resets its local loads from what it returns."""

    probe_interval: float | None

    def attach_probe(self, probe: Callable[[], Sequence[int]]) -> None: ...

    def set_loads(self, loads: Sequence[float]) -> None: ...


@runtime_checkable
class Offline(Protocol):
    """An offline algorithm: ``fit`` sees the key frequencies of the whole dataset before the first message."""

    def fit(self, frequencies: Mapping[str, int]) -> None: ...


@runtime_checkable
class Capacities(Protocol):
    """Per-worker service rates in tuples per second, from the host's model or configuration."""

    def set_capacities(self, capacities: Sequence[float]) -> None: ...


@runtime_checkable
class Resizable(Protocol):
    """The worker count changes mid-stream, in place (else a host builds fresh instances, as a rebalance does)."""

    def resize(self, workers: int) -> None: ...


@runtime_checkable
class Reporting(Protocol):
    """The grouping's own statistics, JSON-able (``grouping_stats`` in the summaries)."""

    def stats(self) -> dict: ...


@runtime_checkable
class SharedState(Protocol):
    """State that the sources share in process, exported by a leader and imported by followers when the sources
    are separate processes (the module docstring)."""

    @property
    def state_version(self) -> int: ...

    def set_role(self, role: str | None) -> None: ...

    def export_state(self) -> dict: ...

    def import_state(self, state: Mapping[str, Any]) -> None: ...

    @property
    def epoch(self) -> int: ...

    def epoch_of(self, now: float) -> int: ...


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
