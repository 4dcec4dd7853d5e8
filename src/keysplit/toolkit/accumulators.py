"""Accumulators: the two-stage keyed aggregation a split key needs, in the idiom users already know.

A grouping that splits a key (PKG, D-/W-Choices, DKG, FISH, salting, shuffle) leaves partial state for that key on
several tasks, so a second stage merges it. The contract is Spark's ``aggregateByKey(zero, seqOp, combOp)`` and
Flink's ``AggregateFunction`` (createAccumulator / add / merge / getResult):

- ``zero()``: the state of a key that has seen nothing;
- ``add(state, record)``: the state after one more record (a mapping of field name to value);
- ``merge(a, b)``: the state of both sub-streams (associative and commutative: partial states arrive in any order);
- ``result(state)``: what the user reads (a JSON value; a number when the merge ranks keys with ``top=``).

States are JSON values, because they travel between processes as text (Storm's Kryo refuses lists and dicts as
tuple values between workers) and are stored in Redis. An accumulator is rebuilt in every worker process from its
class path and its ``params`` (:meth:`Accumulator.describe`), so it must be a class importable from the topology's
code, never a lambda.

>>> s = Sum("bytes")
>>> a = s.add(s.add(s.zero(), {"bytes": "10"}), {"bytes": "5"})
>>> b = s.add(s.zero(), {"bytes": "7"})
>>> s.result(s.merge(a, b))
22
>>> load_accumulator(s.describe()).result(a)
15
"""

from __future__ import annotations

import heapq
import importlib
import math
from collections.abc import Mapping
from typing import Any, ClassVar

from keysplit.errors import KeysplitError
from keysplit.sketches.spacesaving import SpaceSaving

Record = Mapping[str, Any]


class AccumulatorError(KeysplitError):
    """An accumulator cannot be built, or a record's value cannot be added (the record's tuple is failed)."""


class Accumulator:
    """Base class of every accumulator: keeps the JSON-able ``params`` that rebuild it in a worker process.

    Subclasses implement ``zero``, ``add`` and ``result``, and ``merge`` unless the accumulator cannot be merged
    (then it can sit only behind a grouping that never splits a key, and without a merge stage); ``fields`` names
    the record fields ``add`` reads, so a topology that does not declare them is refused when it is built.
    """

    #: Record fields ``add`` reads (checked against the upstream's declared fields when the topology is built).
    fields: tuple[str, ...] = ()
    #: Whether the result is a number that ``top=`` can rank keys by.
    ranks: ClassVar[bool] = True

    def __init__(self, **params: Any) -> None:
        self.params = params

    def zero(self) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def add(self, state: Any, record: Record) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:  # pragma: no cover - a subclass without merge keeps this one
        raise NotImplementedError(f"{type(self).__name__} has no merge")

    def result(self, state: Any) -> Any:
        return state

    @property
    def mergeable(self) -> bool:
        """Whether the class implements ``merge``."""
        return type(self).merge is not Accumulator.merge

    def one(self, record: Record) -> Any:
        """The state of a single record: its contribution, which exactly-once commits keep per record."""
        return self.add(self.zero(), record)

    def describe(self) -> dict[str, Any]:
        """``{"class": "module:Name", "params": {...}}``: what :func:`load_accumulator` rebuilds it from."""
        cls = type(self)
        return {"class": f"{cls.__module__}:{cls.__qualname__}", "params": dict(self.params)}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


def number(value: Any, field: str) -> int | float:
    """A record's numeric value: an int or float as it came, or a decimal text (CSV and JSON feeds carry text).

    >>> number("12", "bytes"), number("1.5", "bytes"), number(3, "bytes")
    (12, 1.5, 3)
    """
    if isinstance(value, bool) or value is None:
        raise AccumulatorError(f"field {field!r} holds {value!r}, not a number")
    if isinstance(value, (int, float)):
        out = value
    else:
        text = str(value).strip()
        try:
            out = int(text)
        except ValueError:
            try:
                out = float(text)
            except ValueError:
                raise AccumulatorError(f"field {field!r} holds {value!r}, not a number") from None
    if isinstance(out, float) and not math.isfinite(out):
        raise AccumulatorError(f"field {field!r} holds {value!r}, not a finite number")
    return out


class Count(Accumulator):
    """How many records a key had.

    >>> c = Count(); c.result(c.merge(c.add(c.zero(), {}), c.add(c.add(c.zero(), {}), {})))
    3
    """

    def __init__(self) -> None:
        super().__init__()

    def zero(self) -> int:
        return 0

    def add(self, state: int, record: Record) -> int:
        return state + 1

    def merge(self, a: int, b: int) -> int:
        return a + b


class Sum(Accumulator):
    """The sum of a numeric field (text is parsed: ``"12"`` adds 12). Integer sums are exact in any order;
    float sums depend on the order partial states meet in, as floating-point addition does."""

    def __init__(self, field: str) -> None:
        super().__init__(field=field)
        self.field = field
        self.fields = (field,)

    def zero(self) -> int:
        return 0

    def add(self, state: int | float, record: Record) -> int | float:
        return state + number(record.get(self.field), self.field)

    def merge(self, a: int | float, b: int | float) -> int | float:
        return a + b


class TopK(Accumulator):
    """The ``k`` largest values of a numeric field per key, largest first (a key's biggest responses, say).

    >>> t = TopK("ms", k=2); s = t.zero()
    >>> for v in ("3", "9", "4"):
    ...     s = t.add(s, {"ms": v})
    >>> t.result(t.merge(s, t.add(t.zero(), {"ms": "5"})))
    [9, 5]
    """

    ranks = False

    def __init__(self, field: str, k: int = 10) -> None:
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise AccumulatorError(f"TopK needs k >= 1, got {k!r}")
        super().__init__(field=field, k=k)
        self.field, self.k = field, k
        self.fields = (field,)

    def zero(self) -> list:
        return []

    def add(self, state: list, record: Record) -> list:
        return heapq.nlargest(self.k, [*state, number(record.get(self.field), self.field)])

    def merge(self, a: list, b: list) -> list:
        return heapq.nlargest(self.k, a + b)


class HeavyHitters(Accumulator):
    """The most frequent values of a field per key, approximately, in bounded memory: a SpaceSaving sketch of
    ``capacity`` counters (Metwally et al. 2005) per key, merged as mergeable summaries (Agarwal et al. 2012:
    counters added, a value missing from one sketch counted at that sketch's minimum). The result is the ``k``
    values with the largest counters, each ``[value, count]``; a count overestimates by at most n / capacity.

    >>> h = HeavyHitters("user", capacity=4, k=2); s = h.zero()
    >>> for u in "aabac":
    ...     s = h.add(s, {"user": u})
    >>> h.result(s)
    [['a', 3], ['b', 1]]
    """

    ranks = False

    def __init__(self, field: str, capacity: int = 100, k: int = 10) -> None:
        for name, value in (("capacity", capacity), ("k", k)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise AccumulatorError(f"HeavyHitters needs {name} >= 1, got {value!r}")
        super().__init__(field=field, capacity=capacity, k=k)
        self.field, self.capacity, self.k = field, capacity, k
        self.fields = (field,)
        self._live: dict[int, tuple[dict, SpaceSaving]] = {}  # id(state) -> (that state, its sketch)

    #: Live sketches of the states ``add`` returned last (at most this many keys): the next ``add`` of such a state
    #: updates its sketch instead of rebuilding it from the JSON state (1.2 ms a row at capacity 100).
    LIVE_SKETCHES = 1024

    def zero(self) -> dict:
        return SpaceSaving(self.capacity).state()

    def add(self, state: dict, record: Record) -> dict:
        """A new state (``state`` itself is left as it was: a partial task may go back to it when a batch is
        refused), computed in O(1) from the live sketch of ``state`` when ``add`` returned it last: only the
        counter that changed is a new item; the other items are shared with ``state``, which no one mutates."""
        live = self._live.pop(id(state), None)
        sketch = live[1] if live is not None and live[0] is state else SpaceSaving.from_state(state)
        value = record.get(self.field)
        key = "" if value is None else str(value)
        sketch.update(key)
        slot = sketch.slot(key)
        items = list(state["items"])
        if slot == len(items):
            items.append(sketch.item(slot))  # type: ignore[arg-type]
        else:
            items[slot] = sketch.item(slot)  # type: ignore[index]
        out = {"capacity": state["capacity"], "n": sketch.n, "items": items}
        if len(self._live) >= self.LIVE_SKETCHES:
            self._live.pop(next(iter(self._live)))  # the oldest: its key rebuilds from JSON when it comes back
        self._live[id(out)] = (out, sketch)  # the state kept with it: its id cannot be reused while cached
        return out

    def merge(self, a: dict, b: dict) -> dict:
        return SpaceSaving.from_state(a).merge(SpaceSaving.from_state(b)).state()

    def result(self, state: dict) -> list:
        return [[value, count] for value, count in SpaceSaving.from_state(state).top(self.k)]


def load_accumulator(described: Mapping[str, Any]) -> Accumulator:
    """The accumulator :meth:`Accumulator.describe` described, built anew (in a worker process)."""
    try:
        path = described["class"]
        params = dict(described.get("params") or {})
    except (KeyError, TypeError):
        raise AccumulatorError(f"not an accumulator description: {described!r}") from None
    module, _, name = str(path).partition(":")
    try:
        cls: Any = importlib.import_module(module)
        for part in name.split("."):
            cls = getattr(cls, part)
    except (ImportError, AttributeError) as exc:
        raise AccumulatorError(f"cannot import accumulator {path}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Accumulator)):
        raise AccumulatorError(f"{path} is not an Accumulator subclass")
    try:
        return cls(**params)
    except TypeError as exc:
        raise AccumulatorError(f"cannot build {path} from {params}: {exc}") from None


def check_accumulator(accumulator: Any, where: str) -> Accumulator:
    """``accumulator`` if worker processes can rebuild it, else one-line AccumulatorError saying what to do."""
    if not isinstance(accumulator, Accumulator):
        raise AccumulatorError(
            f"{where}: accumulator must be an Accumulator (Count(), Sum('field'), TopK, HeavyHitters or a subclass of "
            f"keysplit.toolkit.Accumulator), got {accumulator!r}; a function or lambda cannot reach the worker "
            "processes")
    cls = type(accumulator)
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        raise AccumulatorError(f"{where}: {cls.__qualname__} must be defined at the top level of an importable module "
                               "(your project's src/), so that every worker process can import it")
    rebuilt = load_accumulator(accumulator.describe())
    if rebuilt.describe() != accumulator.describe():
        raise AccumulatorError(f"{where}: {cls.__qualname__} does not keep its constructor arguments in "
                               "self.params (call super().__init__(**arguments)), so workers cannot rebuild it")
    return accumulator


def check_shipped(accumulator: Accumulator, where: str, topology_module: str | None = None, root: Any = None) -> None:
    """Refuse, in one line, an accumulator the workers cannot import although this process can: one defined in the
    topology file itself (a worker imports the components from the project's ``src/``, never the topology file, so
    every partial task would fail to start, over and over), or, given the project ``root``, in a module of the
    project outside ``src/`` (which ``sparse jar`` and ``keysplit jar`` leave out)."""
    import sys
    from pathlib import Path

    cls = type(accumulator)
    if topology_module and cls.__module__ == topology_module:
        raise AccumulatorError(f"{where}: {cls.__qualname__} is defined in the topology file, which the workers do not "
                               "import: move it to a module of your project's src/ and import it from there")
    if root is None:
        return
    module = sys.modules.get(cls.__module__)
    path = getattr(module, "__file__", None)
    if not path:
        return
    path, root = Path(path).resolve(), Path(root).resolve()
    if path.is_relative_to(root) and not path.is_relative_to(root / "src"):
        raise AccumulatorError(f"{where}: {cls.__qualname__} comes from {path.relative_to(root)}, outside the "
                               "project's src/, which is all the workers get: move it into src/")
