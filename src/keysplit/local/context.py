"""A streamparse ``Topology`` class read into the plain facts the local runner needs.

streamparse's DSL (``Topology.specs``, one ``ComponentSpec`` per spout/bolt) already holds what Storm's
Nimbus receives as Thrift: for every component its parallelism, its JSON config, its declared output
streams (``StreamInfo(output_fields, direct)``) and its subscriptions (``GlobalStreamId -> Grouping``).
This module turns that into :class:`ComponentInfo` objects, numbers the tasks like Storm (components in
sorted order, ``par`` consecutive task ids each, starting at 1), and builds the ``context`` object of the
multi-lang handshake (Storm's ``Multilang-protocol.md``: ``task->component``, ``taskid``, ``componentid``,
``stream->target->grouping``, ``streams``, ``stream->outputfields``, ``source->stream->grouping``,
``source->stream->fields``).
"""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass, field
from typing import Any

from keysplit.errors import KeysplitError

#: Storm's defaults for the settings the runner honours (``defaults.yaml``); the user's conf overrides them.
STORM_DEFAULTS: dict[str, Any] = {
    "topology.message.timeout.secs": 30,
    "topology.max.spout.pending": None,
    "topology.tick.tuple.freq.secs": None,
    "topology.acker.executors": None,
    "topology.sleep.spout.wait.strategy.time.ms": 1,
    "topology.subprocess.timeout.secs": 30,
    "topology.debug": False,
}


class TopologyError(KeysplitError):
    """The topology cannot run: bad declaration, a component that fails to start, or a Storm runtime error.

    The message is one line; ``detail`` holds supporting text such as the tail of a component's stderr.
    """

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail


@dataclass(frozen=True)
class GroupingInfo:
    """How one consumer subscribes to one stream: ``kind`` is shuffle, fields, global, all, direct or none."""

    kind: str
    fields: tuple[str, ...] = ()

    def to_context(self) -> dict[str, Any]:
        """The grouping as Storm serialises it in the multi-lang context (global is FIELDS with no fields)."""
        if self.kind == "fields":
            return {"type": "FIELDS", "fields": list(self.fields)}
        if self.kind == "global":
            return {"type": "FIELDS", "fields": []}
        return {"type": self.kind.upper()}


@dataclass
class ComponentInfo:
    """One spout or bolt of the topology, with the task ids Storm would give it."""

    name: str
    is_spout: bool
    par: int
    argv: list[str]
    class_path: str
    config: dict[str, Any]
    outputs: dict[str, tuple[list[str], bool]]  # stream -> (output fields, direct)
    inputs: dict[tuple[str, str], GroupingInfo]  # (source component, stream) -> grouping
    task_ids: list[int] = field(default_factory=list)


def grouping_info(grouping: Any, where: str) -> GroupingInfo:
    """Translate a streamparse/Thrift ``Grouping`` into a :class:`GroupingInfo`."""
    if grouping.fields is not None:
        return GroupingInfo("fields", tuple(grouping.fields)) if grouping.fields else GroupingInfo("global")
    for kind in ("shuffle", "all", "direct", "none", "local_or_shuffle"):
        if getattr(grouping, kind, None) is not None:
            return GroupingInfo(kind)
    raise TopologyError(f"{where}: grouping {grouping!r} is not supported by the local runner "
                        "(custom Java groupings need a JVM)")


def component_argv(spec: Any, python: str) -> tuple[list[str], str]:
    """The command line Storm's ShellProcess would run for ``spec``, and the class path it names.

    streamparse's Python components use ``command="streamparse_run", script="module.Class"``; that is
    run as ``python -m streamparse.run module.Class`` with the given interpreter (the same entry point).
    """
    shell = getattr(getattr(spec, "component_object", None), "shell", None)
    if shell is None:
        raise TopologyError(f"component {spec.name!r} is a Java component ({type(spec).__name__}); "
                            "the local runner only runs shell (multi-lang) components")
    command, script = shell.execution_command, shell.script or ""
    if command == "streamparse_run" and script.startswith("__main__."):
        raise TopologyError(f"component {spec.name!r} ({script.split()[0]}) is defined in __main__; a component "
                            "process imports its class by module name, so define it in an importable module")
    if command == "streamparse_run":
        return [python, "-m", "streamparse.run", *shlex.split(script)], script
    return [*shlex.split(command), *shlex.split(script)], f"{command} {script}".strip()


def read_topology(topology_class: Any, python: str = sys.executable) -> dict[str, ComponentInfo]:
    """Read a streamparse ``Topology`` subclass; validate subscriptions and number the tasks.

    Raises :class:`TopologyError` for a subscription to a component or stream that does not exist, a
    fields grouping on fields the stream does not declare, or a non-integer parallelism.
    """
    specs = getattr(topology_class, "specs", None)
    if not specs:
        raise TopologyError(f"{topology_class!r} is not a streamparse Topology with components")
    components: dict[str, ComponentInfo] = {}
    for spec in specs:
        from streamparse.dsl.spout import JavaSpoutSpec, ShellSpoutSpec

        is_spout = isinstance(spec, (ShellSpoutSpec, JavaSpoutSpec))
        argv, class_path = component_argv(spec, python)
        if not isinstance(spec.par, int) or spec.par < 1:
            raise TopologyError(f"component {spec.name!r}: parallelism must be a positive integer, got {spec.par!r}")
        outputs = {name: (list(info.output_fields or []), bool(info.direct)) for name, info in spec.outputs.items()}
        inputs = {}
        for stream_id, grouping in (spec.inputs or {}).items():
            source = stream_id.componentId if isinstance(stream_id.componentId, str) else stream_id.componentId.name
            where = f"component {spec.name!r} subscribing to {source!r} stream {stream_id.streamId!r}"
            inputs[(source, stream_id.streamId)] = grouping_info(grouping, where)
        config = json.loads(spec.config) if isinstance(spec.config, str) else dict(spec.config or {})
        components[spec.name] = ComponentInfo(spec.name, is_spout, spec.par, argv, class_path, config, outputs, inputs)
    for comp in components.values():
        for (source, stream), grouping in comp.inputs.items():
            if source not in components:
                raise TopologyError(f"component {comp.name!r} subscribes to {source!r}, which does not exist")
            declared = components[source].outputs
            if stream not in declared:
                raise TopologyError(f"component {comp.name!r} subscribes to stream {stream!r} of {source!r}, "
                                    f"which declares only {sorted(declared)}")
            missing = [f for f in grouping.fields if f not in declared[stream][0]]
            if missing:
                raise TopologyError(f"component {comp.name!r} groups {source!r} stream {stream!r} by fields "
                                    f"{missing} that the stream does not declare ({declared[stream][0]})")
    next_task = 1
    for name in sorted(components):
        comp = components[name]
        comp.task_ids = list(range(next_task, next_task + comp.par))
        next_task += comp.par
    return components


def build_context(components: dict[str, ComponentInfo]) -> dict[str, Any]:
    """The part of the multi-lang handshake ``context`` shared by every task (Storm >= 0.10 keys)."""
    task_to_component = {str(t): c.name for c in components.values() for t in c.task_ids}
    return {"task->component": task_to_component}


def task_context(components: dict[str, ComponentInfo], comp: ComponentInfo, task_id: int,
                 shared: dict[str, Any]) -> dict[str, Any]:
    """The handshake ``context`` for one task of ``comp``."""
    targets: dict[str, dict[str, Any]] = {stream: {} for stream in comp.outputs}
    for other in components.values():
        for (source, stream), grouping in other.inputs.items():
            if source == comp.name:
                targets[stream][other.name] = grouping.to_context()
    sources: dict[str, dict[str, Any]] = {}
    source_fields: dict[str, dict[str, list[str]]] = {}
    for (source, stream), grouping in comp.inputs.items():
        sources.setdefault(source, {})[stream] = grouping.to_context()
        source_fields.setdefault(source, {})[stream] = components[source].outputs[stream][0]
    return {
        **shared,
        "taskid": task_id,
        "componentid": comp.name,
        "stream->target->grouping": targets,
        "streams": sorted(comp.outputs),
        "stream->outputfields": {s: f for s, (f, _) in comp.outputs.items()},
        "source->stream->grouping": sources,
        "source->stream->fields": source_fields,
    }


def component_conf(base: dict[str, Any], comp: ComponentInfo) -> dict[str, Any]:
    """Storm's per-executor conf: the topology conf with the component's own ``config`` on top."""
    merged = dict(base)
    merged.update(comp.config)
    return merged
