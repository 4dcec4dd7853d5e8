"""Putting keysplit into a streamparse ``Topology`` class body: the spec builders and the build-time checks.

Read as streamparse: ``X.spec(inputs=..., par=...)`` returns a component spec, a class attribute names it. The
keysplit parts know what they need from their neighbours (the key field, the grouping's workers, the accumulator's
fields), so every mistake that can be seen before a process starts is refused then, in one line:

    class PageBytes(Topology):                      # streamparse's Topology; keysplit checks it when it loads it
        views = FeedSpout.spec(fields=["time", "page", "bytes"])
        route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg:d=2", par=2)
        partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), par=4)
        total = Aggregate.merge(inputs=partial, top=10, par=2)

A user's own bolt goes behind a router with ``MyBolt.spec(inputs=route.into(), par=4)``: the fields grouping on
the route field that delivers each tuple to the task the grouping chose. Rows travel in batches where keysplit's own
components are at both ends (the feed to a router, a router to ``Aggregate.partial``); a user's bolt always sees one
tuple per row, with the upstream's fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from streamparse import Grouping, Stream
from streamparse import Topology as StreamparseTopology
from streamparse.dsl.bolt import ShellBoltSpec
from streamparse.dsl.component import ComponentSpec
from streamparse.dsl.spout import ShellSpoutSpec
from streamparse.thrift import GlobalStreamId

from keysplit.errors import KeysplitError
from keysplit.groupings import build_grouping, parse_grouping
from keysplit.specs import parse_spec
from keysplit.toolkit.accumulators import Accumulator, check_accumulator, check_shipped
from keysplit.toolkit.contract import (
    FEED_CONFIG,
    PARTIAL_FIELDS,
    PARTIALS_STREAM,
    RECORD_FIELD,
    REPLAY_FIELD,
    RESERVED_FIELDS,
    ROUTE_FIELD,
    ROUTER_CONFIG,
    ROWS_FIELDS,
    ROWS_STREAM,
)


class TopologyBuildError(KeysplitError):
    """A toolkit topology that cannot run, found while its class is built: one line naming the component."""


#: Groupings that keep every key on one task; every other one may split a key's state across tasks.
WHOLE_KEY_GROUPINGS = ("kg",)


def splits_keys(grouping: str) -> bool:
    """Whether a grouping may send one key to several tasks (PKG, the Choices, DKG, FISH, salting, shuffle, and
    Gedik's functions, whose rebuilds move keys), so that a key's partial states need merging."""
    return parse_spec(grouping)[0] not in WHOLE_KEY_GROUPINGS


def _json_config(config: Mapping[str, Any] | None, extra: Mapping[str, Any]) -> dict[str, Any]:
    out = {**(config or {}), **extra}
    try:
        json.dumps(out)
    except (TypeError, ValueError) as exc:
        raise TopologyBuildError(f"component configuration must be JSON: {exc}") from None
    return out


def _ticks(period: float, what: str) -> int:
    if isinstance(period, bool) or not isinstance(period, (int, float)) or not 0 < period <= 3600:
        raise TopologyBuildError(f"{what}: period must be a number of seconds in (0, 3600], got {period!r}")
    return max(1, round(period))  # Storm's tick frequency is whole seconds


class _Spec:
    """What the toolkit's specs add to streamparse's: the builder's facts, for the checks of their neighbours."""

    toolkit_kind = ""


def rows_a_tuple(batch: int | None, delivery: str, default: int) -> int:
    """Rows a feed spout or a router sends in one tuple at most: ``batch`` when the spec gives it, else ``default``
    under exactly-once and 1 under at-least-once, where a failure replays every row of its tuple and the merge would
    count twice the rows that had gone through (and a dead letter would take its neighbours with it).

    >>> rows_a_tuple(None, "exactly-once", 100), rows_a_tuple(None, "at-least-once", 100), rows_a_tuple(8, "x", 100)
    (100, 1, 8)
    """
    if batch is not None:
        return batch
    return default if delivery == "exactly-once" else 1


class FeedSpoutSpec(_Spec, ShellSpoutSpec):
    toolkit_kind = "feed"

    def __init__(self, component_cls, *, fields: list[str], batch: int | None = None, **kwargs) -> None:
        super().__init__(component_cls, command="streamparse_run",
                         script=f"{component_cls.__module__}.{component_cls.__name__}", **kwargs)
        self.row_fields = fields
        self.batch = batch

    def rows_input(self) -> tuple[GlobalStreamId, Any]:
        """The stream a KeyRouter listed in ``inputs=[feed]`` subscribes to: the rows in batches (unless the spec
        says ``batch=1``), dealt on the route field as the simulator deals records to its sources."""
        return self[ROWS_STREAM if self.batch != 1 else "default"], Grouping.fields(ROUTE_FIELD)


class KeyRouterSpec(_Spec, ShellBoltSpec):
    toolkit_kind = "router"

    def __init__(self, component_cls, *, key: str, grouping: str, to: str | None, workers: int | None,
                 passed: list[str], batch: int | None = None, split: str | None = None, **kwargs) -> None:
        super().__init__(component_cls, command="streamparse_run",
                         script=f"{component_cls.__module__}.{component_cls.__name__}", **kwargs)
        self.key, self.grouping, self.to, self.workers, self.passed = key, grouping, to, workers, passed
        self.batch, self.split = batch, split

    def into(self) -> dict:
        """``inputs=`` for a user's bolt behind this router: the fields grouping on the route field, which delivers
        each tuple, one a row, to the task the grouping chose."""
        return {self["default"]: Grouping.fields(ROUTE_FIELD)}

    def into_partial(self) -> dict:
        """``inputs=`` for the ``Aggregate.partial`` behind this router: its rows in batches (``batch`` > 1) or one
        tuple a row, delivered as :meth:`into` does."""
        return {self["default"]: Grouping.fields(ROUTE_FIELD), self[ROWS_STREAM]: Grouping.fields(ROUTE_FIELD)}


class PartialSpec(_Spec, ShellBoltSpec):
    toolkit_kind = "partial"

    def __init__(self, component_cls, *, router: KeyRouterSpec, accumulator: Accumulator, **kwargs) -> None:
        super().__init__(component_cls, command="streamparse_run",
                         script=f"{component_cls.__module__}.{component_cls.__name__}", **kwargs)
        self.router, self.accumulator = router, accumulator

    def into(self) -> dict:
        return {self[PARTIALS_STREAM]: Grouping.fields(ROUTE_FIELD)}


class MergeSpec(_Spec, ShellBoltSpec):
    toolkit_kind = "merge"

    def __init__(self, component_cls, *, partial: PartialSpec, top: int, **kwargs) -> None:
        super().__init__(component_cls, command="streamparse_run",
                         script=f"{component_cls.__module__}.{component_cls.__name__}", **kwargs)
        self.partial, self.top = partial, top


def _router_inputs(inputs: Any, where: str) -> tuple[list[str], dict]:
    """A router's inputs: the fields every input stream declares (they must agree: a feed's batches count as the
    fields of its rows), and the inputs as streamparse takes them (keysplit's feed spout dealt on its route field,
    as the simulator deals records to sources, in batches when it batches)."""
    if isinstance(inputs, ComponentSpec):
        inputs = [inputs]
    streams: dict = {}
    if isinstance(inputs, Mapping):
        streams = dict(inputs)
    elif isinstance(inputs, (list, tuple)):
        for item in inputs:
            if isinstance(item, FeedSpoutSpec):
                stream_id, grouping = item.rows_input()
                streams[stream_id] = grouping
            elif isinstance(item, ComponentSpec):
                streams[item["default"]] = Grouping.SHUFFLE
            elif isinstance(item, GlobalStreamId):
                streams[item] = Grouping.SHUFFLE
            else:
                raise TopologyBuildError(f"{where}: inputs must be component specs or their streams, got {item!r}")
    else:
        raise TopologyBuildError(f"{where}: inputs must be a spec, a list of specs or a dict of stream -> grouping")
    if not streams:
        raise TopologyBuildError(f"{where}: needs at least one input")
    declared: list[str] | None = None
    for stream_id in streams:
        spec = stream_id.componentId if isinstance(stream_id, GlobalStreamId) else stream_id
        if not isinstance(spec, ComponentSpec):
            raise TopologyBuildError(f"{where}: name inputs by their spec objects (not by name), so that their fields "
                                     "can be checked")
        stream = stream_id.streamId if isinstance(stream_id, GlobalStreamId) else "default"
        if isinstance(spec, FeedSpoutSpec) and stream == ROWS_STREAM:
            stream = "default"  # a batch of rows: the router reads each row by the fields of the feed's rows
        info = spec.outputs.get(stream)
        if info is None:
            raise TopologyBuildError(f"{where}: its input {spec.name or spec.component_cls.__name__} declares no "
                                     f"stream {stream!r}")
        fields = list(info.output_fields)
        if declared is not None and fields != declared:
            raise TopologyBuildError(f"{where}: its input streams declare different fields ({declared} and {fields})")
        declared = fields
    return declared or [], streams


def feed_spout_spec(component: type, *, fields: list[str], batch: int | None, name: str | None, par: int,
                    config: Mapping[str, Any] | None) -> FeedSpoutSpec:
    """:meth:`keysplit.toolkit.FeedSpout.spec`, checked here, where every spec is built."""
    where = f"FeedSpout {name or ''}".strip()
    if not fields or not all(isinstance(f, str) and f for f in fields) or len(set(fields)) != len(fields):
        raise TopologyBuildError(f"{where}: fields must be distinct non-empty column names, got {fields!r}")
    clash = [f for f in fields if f in RESERVED_FIELDS]
    if clash:
        raise TopologyBuildError(f"{where}: fields {clash} are keysplit's own; rename those columns")
    _check_batch(batch, where)
    return FeedSpoutSpec(component, fields=list(fields), batch=batch, name=name, par=par,
                         config=_json_config(config, {FEED_CONFIG: {"fields": list(fields), "batch": batch}}),
                         outputs=[Stream(fields=[*fields, RECORD_FIELD, REPLAY_FIELD, ROUTE_FIELD]),
                                  Stream(fields=list(ROWS_FIELDS), name=ROWS_STREAM)])


def _check_batch(batch: Any, where: str) -> None:
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 100_000):
        raise TopologyBuildError(f"{where}: batch must be an integer in [1, 100000] (1: one tuple per row) or None "
                                 f"(the default: batches under exactly-once), got {batch!r}")


def key_router_spec(component: type, *, inputs: Any, key: str, grouping: str, to: str | None, time: str | None,
                    workers: int | None, batch: int | None, batch_ms: float, name: str | None, par: int,
                    config: Mapping[str, Any] | None, split: str | None = None) -> KeyRouterSpec:
    """:meth:`keysplit.toolkit.KeyRouter.spec`, checked here, where every spec is built."""
    where = f"KeyRouter {name or ''}".strip()
    fields, streams = _router_inputs(inputs, where)
    missing = [f for f in (key, time) if f is not None and f not in fields]
    if missing:
        raise TopologyBuildError(f"{where}: its input declares no field {missing[0]!r} (fields: "
                                 f"{', '.join(fields) or 'none'})")
    _check_grouping_spec(grouping, where)
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise TopologyBuildError(f"{where}: workers must be a positive integer, got {workers!r}")
    _check_batch(batch, where)
    if split is not None and (not isinstance(split, str) or not split):
        raise TopologyBuildError(f"{where}: split must be the text between two keys of the key field (a line's "
                                 f"words: split=' '), got {split!r}")
    if isinstance(batch_ms, bool) or not isinstance(batch_ms, (int, float)) or not 0 < batch_ms <= 60_000:
        raise TopologyBuildError(f"{where}: batch_ms must be a number of milliseconds in (0, 60000], got "
                                 f"{batch_ms!r}")
    passed = [f for f in fields if f != ROUTE_FIELD]
    # fields: how a row of a batch from a feed reads (the router's rows stream input carries no field names)
    cfg = {"key": key, "grouping": grouping, "to": to, "time": time, "workers": workers, "batch": batch,
           "batch_ms": float(batch_ms), "fields": fields, "split": split}
    # the rows stream, batches of rows, goes to an Aggregate.partial only (check_topology); a user's bolt subscribes
    # to the default stream, one tuple a row, and a router that no task takes batches from sends none
    outputs = [Stream(fields=[*passed, ROUTE_FIELD]), Stream(fields=list(ROWS_FIELDS), name=ROWS_STREAM)]
    return KeyRouterSpec(component, key=key, grouping=grouping, to=to, workers=workers, passed=passed,
                         batch=batch, split=split, name=name, par=par, inputs=streams,
                         config=_json_config(config, {ROUTER_CONFIG: cfg, "topology.tick.tuple.freq.secs": 1}),
                         outputs=outputs)


def _check_grouping_spec(spec: str, where: str) -> None:
    """A spec a router can run: it parses, and it is not the in-process global oracle."""
    try:
        _, params = parse_grouping(spec)
    except KeysplitError as exc:
        raise TopologyBuildError(str(exc) if str(exc).startswith(where) else f"{where}: {exc}") from None
    if params.get("load") == "global":
        raise TopologyBuildError(f"{where}: {spec}: the global oracle (load=global) shares one load vector between "
                                 "sources in one process; routers are separate processes (use load=local or "
                                 "load=probe)")


class Aggregate:
    """The two-stage keyed aggregation (module :mod:`keysplit.toolkit.aggregate`): ``Aggregate.partial`` behind a
    router, ``Aggregate.merge`` behind the partial."""

    @staticmethod
    def partial(*, inputs: KeyRouterSpec, accumulator: Accumulator, period: float = 1.0, name: str | None = None,
                par: int = 1, config: Mapping[str, Any] | None = None) -> PartialSpec:
        """Partial state per key behind ``inputs`` (a KeyRouter spec), flushed every ``period`` seconds."""
        from keysplit.toolkit.aggregate import PARTIAL_CONFIG, PartialAggregate

        where = f"Aggregate.partial {name or ''}".strip()
        if not isinstance(inputs, KeyRouterSpec):
            raise TopologyBuildError(f"{where}: inputs must be a KeyRouter spec (the partial stage sits behind the "
                                     "grouping that chose its tasks)")
        acc = _checked(accumulator, where)
        missing = [f for f in acc.fields if f not in inputs.passed]
        if missing:
            raise TopologyBuildError(f"{where}: {acc!r} reads field {missing[0]!r}, which the router's input does not "
                                     f"declare (fields: {', '.join(inputs.passed)})")
        if not acc.mergeable:
            why = (f"grouping {inputs.grouping} splits keys across tasks" if splits_keys(inputs.grouping)
                   else "the partial stage flushes every period")
            raise TopologyBuildError(f"{where}: {type(acc).__name__} has no merge, but {why}, so partial states of one "
                                     "key must be merged; implement merge(a, b)")
        tick = _ticks(period, where)
        cfg = {"key": inputs.key, "accumulator": acc.describe(), "period": float(period)}
        return PartialSpec(PartialAggregate, router=inputs, accumulator=acc, name=name, par=par,
                           inputs=inputs.into_partial(),
                           config=_json_config(config, {PARTIAL_CONFIG: cfg, "topology.tick.tuple.freq.secs": tick}),
                           outputs=[Stream(fields=list(PARTIAL_FIELDS), name=PARTIALS_STREAM)])

    @staticmethod
    def merge(*, inputs: PartialSpec, top: int = 0, period: float = 1.0, name: str | None = None, par: int = 1,
              config: Mapping[str, Any] | None = None) -> MergeSpec:
        """Each key's partial states merged, each partial task's flush committed as it arrives (and, every
        ``period`` seconds, at the merge's tick, whatever is left); ``top`` > 0 keeps the ``top`` keys with the
        largest results (in Redis, for the run's summary)."""
        from keysplit.toolkit.aggregate import MERGE_CONFIG, MergeAggregate

        where = f"Aggregate.merge {name or ''}".strip()
        if not isinstance(inputs, PartialSpec):
            raise TopologyBuildError(f"{where}: inputs must be an Aggregate.partial spec")
        if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= 10_000:
            raise TopologyBuildError(f"{where}: top must be an integer in [0, 10000], got {top!r}")
        if top and not inputs.accumulator.ranks:
            raise TopologyBuildError(f"{where}: top={top} ranks keys by their result, and {inputs.accumulator!r}'s "
                                     "result is not a number")
        tick = _ticks(period, where)
        cfg = {"accumulator": inputs.accumulator.describe(), "top": top, "period": float(period)}
        return MergeSpec(MergeAggregate, partial=inputs, top=top, name=name, par=par, inputs=inputs.into(),
                         config=_json_config(config, {MERGE_CONFIG: cfg, "topology.tick.tuple.freq.secs": tick}),
                         outputs=[Stream(fields=["key", "result"])])


def _checked(accumulator: Any, where: str) -> Accumulator:
    try:
        return check_accumulator(accumulator, where)
    except KeysplitError as exc:
        raise TopologyBuildError(str(exc)) from None


#: The most tasks one topology may have (the sum of its components' ``par``). Each task is a process on the local
#: runner (about 50 MB) and an executor on a cluster, and every task's handshake lists every task, so a runner
#: grows with its square: ``par=100000`` grew one by 100 MB a second before any task started. The machine's own
#: limit (memory, ``ulimit``) is checked when a run loads the topology (runs/prepare.py check_topology_tasks).
MAX_TOPOLOGY_TASKS = 10_000


def check_sizes(specs: Mapping[str, Any]) -> None:
    """Refuse, naming the component, sizes no run can start: more than :data:`MAX_TOPOLOGY_TASKS` tasks, and a
    router whose grouping state (per downstream task and source) would not fit in this machine's memory."""
    from keysplit.sizes import DEFAULT_WORKER_SOURCE_BYTES, WORKER_SOURCE_BYTES, check_memory

    def par(spec: Any) -> int:  # streamparse also takes a dict of per-stage hints
        return spec.par if isinstance(spec.par, int) else max(spec.par.values(), default=1)

    total = sum(par(spec) for spec in specs.values())
    if total > MAX_TOPOLOGY_TASKS:
        biggest = max(specs.values(), key=par)
        raise TopologyBuildError(f"component {biggest.name!r}: par={par(biggest):,} makes {total:,} tasks in the "
                                 f"topology, more than keysplit starts or submits (at most {MAX_TOPOLOGY_TASKS:,}): "
                                 "lower its par")
    for spec in specs.values():
        if not isinstance(spec, KeyRouterSpec):
            continue
        behind = [par(s) for s in specs.values() if any(
            (sid.componentId if isinstance(sid.componentId, str) else sid.componentId.name) == spec.name
            for sid in (s.inputs or {}))]
        workers = spec.workers or max(behind, default=1)
        try:
            name = parse_spec(spec.grouping)[0]
        except KeysplitError:
            continue  # check_topology names the bad spec
        per = WORKER_SOURCE_BYTES.get(name, DEFAULT_WORKER_SOURCE_BYTES)
        try:
            check_memory(float(workers) * par(spec) * per, f"{spec.grouping} in front of {workers:,} tasks from "
                         f"{par(spec):,} sources", "lower the par of the router or of the tasks behind it")
        except KeysplitError as exc:
            raise TopologyBuildError(f"KeyRouter {spec.name}: {exc}") from None


def check_topology(topology: Any) -> None:
    """Refuse, in one line naming the component, what only the whole topology shows: sizes no run can start
    (:func:`check_sizes`), a router whose downstream does not exist or is not subscribed on the route field, more
    choices than downstream tasks (``pkg:d=5`` in front of 4 tasks), a partial without its merge, or two
    exactly-once merges on one feed."""
    specs = {spec.name: spec for spec in getattr(topology, "specs", [])}
    check_sizes(specs)
    subscribers: dict[tuple[str, str], list[tuple[str, Any]]] = {}
    for spec in specs.values():
        for stream_id, grouping in (spec.inputs or {}).items():
            source = stream_id.componentId if isinstance(stream_id.componentId, str) else stream_id.componentId.name
            subscribers.setdefault((source, stream_id.streamId), []).append((spec.name, grouping))

    def routed(source: str, stream: str) -> list[str]:
        return [name for name, g in subscribers.get((source, stream), []) if list(g.fields or []) == [ROUTE_FIELD]]

    merges = []
    for spec in specs.values():
        if isinstance(spec, FeedSpoutSpec):
            batched = [name for name, _ in subscribers.get((spec.name, ROWS_STREAM), [])]
            single = [name for name, _ in subscribers.get((spec.name, "default"), [])]
            strangers = [name for name in batched if not isinstance(specs[name], KeyRouterSpec)]
            if strangers:
                raise TopologyBuildError(f"FeedSpout {spec.name}: its {ROWS_STREAM!r} stream carries rows in batches, "
                                         f"which only a KeyRouter unpacks, and {strangers[0]!r} is not one; subscribe "
                                         f"it with inputs=[{spec.name}] (one tuple a row)")
            if batched and single:
                raise TopologyBuildError(f"FeedSpout {spec.name}: {batched[0]!r} takes its rows in batches and "
                                         f"{single[0]!r} one tuple a row, and a feed sends each row once: give the "
                                         "spout batch=1 (every subscriber one tuple a row)")
        elif isinstance(spec, KeyRouterSpec):
            where = f"KeyRouter {spec.name}"
            strangers = [name for name, _ in subscribers.get((spec.name, ROWS_STREAM), [])
                         if not isinstance(specs[name], PartialSpec)]
            if strangers:
                raise TopologyBuildError(f"{where}: its {ROWS_STREAM!r} stream packs rows into tuples that only "
                                         f"Aggregate.partial unpacks, and {strangers[0]!r} is not one; subscribe it "
                                         f"with inputs={spec.name}.into() (one tuple a row)")
            behind = routed(spec.name, "default")
            if spec.to is not None:
                if spec.to not in specs:
                    raise TopologyBuildError(f"{where}: its downstream component {spec.to!r} does not exist "
                                             f"(components: {', '.join(sorted(specs))})")
                if spec.to not in behind:
                    raise TopologyBuildError(f"{where}: {spec.to!r} must subscribe with inputs={spec.name}.into() "
                                             f"(a fields grouping on {ROUTE_FIELD!r})")
                target = spec.to
            elif len(behind) != 1:
                raise TopologyBuildError(f"{where}: expected one component behind it subscribed with "
                                         f"inputs={spec.name}.into(), found {behind or 'none'}")
            else:
                target = behind[0]
            tasks = specs[target].par
            workers = spec.workers or tasks
            if not isinstance(tasks, int) or workers > tasks:
                raise TopologyBuildError(f"{where}: workers={workers} is more than the {tasks} tasks of {target!r}")
            try:
                build_grouping(spec.grouping, workers, spec.par)
            except KeysplitError as exc:
                raise TopologyBuildError(f"{where} in front of {workers} tasks of {target!r}: {exc}") from None
        elif isinstance(spec, PartialSpec):
            try:  # what the workers cannot import is refused now, not by every partial task at its start
                check_shipped(spec.accumulator, f"Aggregate.partial {spec.name}", getattr(topology, "__module__", None))
            except KeysplitError as exc:
                raise TopologyBuildError(str(exc)) from None
            behind = routed(spec.name, PARTIALS_STREAM)
            if len(behind) != 1 or not isinstance(specs[behind[0]], MergeSpec):
                raise TopologyBuildError(f"Aggregate.partial {spec.name}: needs exactly one Aggregate.merge behind it "
                                         f"(found {behind or 'none'})")
        elif isinstance(spec, MergeSpec):
            merges.append(spec.name)
    delivery = (getattr(topology, "config", None) or {}).get("keysplit.delivery", "exactly-once")
    if len(merges) > 1 and delivery == "exactly-once":
        raise TopologyBuildError(f"merge stages {', '.join(sorted(merges))}: an exactly-once merge marks each feed "
                                 "record once, so a topology has one (or set config keysplit.delivery=at-least-once)")


#: streamparse's own ``Topology``, re-exported: the class a user subclasses must be the one streamparse's loader
#: skips (``streamparse.util.get_topology_from_file`` deploys the first ``TopologyType`` in the module that is not
#: ``streamparse.Topology``), so that ``sparse submit`` deploys the user's class and never a base class of ours.
#: Whole-topology checks (:func:`check_topology`) run when keysplit loads the file (``keysplit run``, ``submit``,
#: ``replay``); each spec builder checks its own arguments in the class body.
Topology = StreamparseTopology
