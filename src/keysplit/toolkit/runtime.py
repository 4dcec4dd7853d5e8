"""What every toolkit component reads when it starts: the run's settings and Redis, its place among its
component's tasks, and the topology's wiring as the multi-lang handshake's ``context`` states it (Storm's
``TopologyContext.toJSONString``: ``task->component``, ``stream->target->grouping``, ``source->stream->fields``;
apache/storm ``storm-client/src/jvm/org/apache/storm/task/TopologyContext.java``, and Storm's multi-lang protocol page).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keysplit.errors import KeysplitError
from keysplit.redis_client import client
from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import RunSettings
from keysplit.storm.streams import component_tasks


class ToolkitError(KeysplitError):
    """A toolkit component cannot start: what is wrong with its wiring or configuration, in one line."""


def run_settings(conf: Mapping[str, Any]) -> RunSettings:
    """The run's ``keysplit.*`` settings a toolkit component shares with the word count: run id, Redis URL and
    password source, delivery, stats period."""
    return RunSettings.from_conf(conf)


def connect(conf: Mapping[str, Any], context: Mapping | None = None, component: str = "", task_id: Any = None
            ) -> tuple[RunSettings, RunKeys, Any]:
    """The settings, the run's keys and a Redis client, or None when the topology has no ``keysplit.redis_url``
    (then nothing is recorded, and what needs Redis is refused by the component that needs it). Given the task's
    ``context``, ``component`` and ``task_id``, this process start is counted (``RunKeys.starts``): on a cluster the
    starts beyond one per task are the restarts ``--collect`` reports, the runner's own counters being absent."""
    settings = run_settings(conf)
    conn = client(settings.redis_connect_url()) if settings.redis_url else None
    keys = RunKeys(settings.run_id)
    if conn is not None and context is not None:
        conn.hincrby(keys.starts, f"{component}:{task_index(context, component, task_id)[0]}", 1)
    return settings, keys, conn


def task_index(context: Mapping, component: str, task_id: Any) -> tuple[int, int]:
    """``(index, count)``: this task's place among its component's sorted task ids."""
    tasks = component_tasks(context, component)
    return tasks.index(int(task_id)), len(tasks)


def subscribers(context: Mapping, stream: str) -> dict[str, dict]:
    """The components subscribed to this component's ``stream``, each with its grouping as the context gives
    it (``{"type": "FIELDS", "fields": [...]}``, ``{"type": "SHUFFLE"}``, ...)."""
    return dict(context.get("stream->target->grouping", {}).get(stream, {}))


def fields_subscriber(context: Mapping, stream: str, field: str, me: str) -> str:
    """The one component that subscribes to ``stream`` of component ``me`` with a fields grouping on ``field``."""
    found = [name for name, g in subscribers(context, stream).items()
             if str(g.get("type", "")).upper() == "FIELDS" and list(g.get("fields") or []) == [field]]
    if len(found) != 1:
        raise ToolkitError(f"{me}: expected one component subscribed to its {stream!r} stream with a fields grouping "
                           f"on {field!r} (inputs=<spec>.into()), found {found or 'none'}")
    return found[0]


def input_fields(context: Mapping) -> dict[tuple[str, str], list[str]]:
    """``(source component, stream) -> declared fields`` of every stream this task subscribes to."""
    out = {}
    for source, streams in context.get("source->stream->fields", {}).items():
        for stream, fields in streams.items():
            out[(source, stream)] = list(fields)
    return out
