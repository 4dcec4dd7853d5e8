"""Storm's stream groupings, bound to one emitting task: which consumer tasks get an emitted tuple.

Each emitting task owns one :class:`StreamRouter` per output stream, holding one grouper per subscribing
component, as Storm's ``Task.getOutgoingTasks`` does:

- shuffle (and none / local_or_shuffle): round-robin over a per-emitter shuffled permutation of the
  consumer's tasks, reshuffled after each cycle (even load, like Storm's ``ShuffleGrouping``);
- fields: Storm's own choice, ``floorMod(Arrays.deepHashCode(selected values), tasks)`` over the consumer's
  sorted task ids with Java's ``hashCode`` of each value (:mod:`keysplit.javahash`; apache/storm
  ``daemon/GrouperFactory.java`` ``FieldsGrouper``, ``utils/TupleUtils.java``), so a tuple reaches the same task
  here as on a cluster (the router's ``fields`` route mode relies on it);
- global: the consumer's lowest task id; all: every consumer task;
- direct: the emitter names the task. Storm's two runtime errors are reproduced: a regular emit on a
  stream that some consumer subscribes to with direct grouping ("Cannot do regular emit to direct
  stream"), and a direct emit to a task whose component subscribes without direct grouping ("Cannot
  emitDirect to a task expecting a regular grouping").
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from keysplit.javahash import choose_task_index

from .context import ComponentInfo, GroupingInfo


class RoutingError(Exception):
    """An emit that Storm rejects at run time; the message quotes Storm's own error."""


class ShuffleGrouper:
    """Round-robin over a shuffled permutation of the targets, reshuffled every cycle."""

    __slots__ = ("_i", "_order", "_rng")

    def __init__(self, targets: Sequence[int], seed: int) -> None:
        self._rng = random.Random(seed)
        self._order = list(targets)
        self._rng.shuffle(self._order)
        self._i = 0

    def choose(self, values: list) -> list[int]:
        if self._i == len(self._order):
            self._rng.shuffle(self._order)
            self._i = 0
        task = self._order[self._i]
        self._i += 1
        return [task]


class FieldsGrouper:
    """Storm's ``FieldsGrouper``: Java's deep hash of the selected fields, floor-modulo the sorted targets."""

    __slots__ = ("_idx", "_targets")

    def __init__(self, targets: Sequence[int], indices: Sequence[int]) -> None:
        self._targets = sorted(targets)  # GrouperFactory.mkGrouper sorts the target tasks
        self._idx = list(indices)

    def choose(self, values: list) -> list[int]:
        return [self._targets[choose_task_index([values[i] for i in self._idx], len(self._targets))]]


class FixedGrouper:
    """Global (the lowest task id) or all (every task): the same answer for every tuple."""

    __slots__ = ("_out",)

    def __init__(self, targets: Sequence[int]) -> None:
        self._out = list(targets)

    def choose(self, values: list) -> list[int]:
        return self._out


DIRECT = None  # marker grouper: the emitter chooses the task


class StreamRouter:
    """The subscribers of one output stream of one emitting task."""

    __slots__ = ("component", "consumers", "fields", "n_fields", "regular", "stream", "task_to_component")

    def __init__(self, component: str, stream: str, fields: list[str], consumers: dict[str, object],
                 task_to_component: dict[int, str]) -> None:
        self.component = component
        self.stream = stream
        self.fields = fields
        self.n_fields = len(fields)
        self.consumers = consumers  # consumer component -> grouper (DIRECT for direct grouping)
        self.regular = [g for g in consumers.values() if g is not DIRECT]
        self.task_to_component = task_to_component

    def route(self, values: list) -> list[int]:
        """Targets of a regular emit."""
        if len(self.regular) != len(self.consumers):
            direct = [c for c, g in self.consumers.items() if g is DIRECT]
            raise RoutingError(
                f"Cannot do regular emit to direct stream: {self.component!r} emitted on stream {self.stream!r} "
                f"without a task, but {direct} subscribe(s) to it with direct grouping (emit with direct_task=)")
        if len(self.regular) == 1:
            return self.regular[0].choose(values)  # type: ignore[attr-defined]
        out: list[int] = []
        for grouper in self.regular:
            out.extend(grouper.choose(values))  # type: ignore[attr-defined]
        return out

    def route_direct(self, task: int) -> list[int]:
        """Targets of a direct emit to ``task`` (empty when that task does not subscribe, as in Storm)."""
        consumer = self.task_to_component.get(task)
        if consumer is None or consumer not in self.consumers:
            return []
        if self.consumers[consumer] is not DIRECT:
            raise RoutingError(
                f"Cannot emitDirect to a task expecting a regular grouping: {self.component!r} emitted on "
                f"stream {self.stream!r} directly to task {task} of {consumer!r}, which subscribes to that "
                "stream without direct grouping (declare the stream direct and subscribe with Grouping.DIRECT)")
        return [task]


def make_grouper(grouping: GroupingInfo, targets: list[int], out_fields: list[str], seed: int) -> object:
    """The grouper for one (emitting task, consumer component) pair."""
    kind = grouping.kind
    if kind == "direct":
        return DIRECT
    if kind == "fields":
        return FieldsGrouper(targets, [out_fields.index(f) for f in grouping.fields])
    if kind == "global":
        return FixedGrouper([min(targets)])
    if kind == "all":
        return FixedGrouper(sorted(targets))
    if len(targets) == 1:
        return FixedGrouper(targets)
    return ShuffleGrouper(sorted(targets), seed)


def routers_for_task(components: dict[str, ComponentInfo], comp: ComponentInfo, task_id: int,
                     seed: int) -> dict[str, StreamRouter]:
    """One :class:`StreamRouter` per declared output stream of ``comp``, for its task ``task_id``."""
    task_to_component = {t: c.name for c in components.values() for t in c.task_ids}
    routers: dict[str, StreamRouter] = {}
    for stream, (fields, _direct) in comp.outputs.items():
        consumers: dict[str, object] = {}
        for other in sorted(components):
            grouping = components[other].inputs.get((comp.name, stream))
            if grouping is not None:
                consumers[other] = make_grouper(grouping, components[other].task_ids, fields,
                                                seed * 1_000_003 + task_id * 7919 + len(consumers))
        routers[stream] = StreamRouter(comp.name, stream, fields, consumers, task_to_component)
    return routers
