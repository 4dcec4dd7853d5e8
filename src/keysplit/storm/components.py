"""The word-count topology's components by name, and what each task records in Redis when it starts."""

from __future__ import annotations

import json

from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import STORM_COST_SETTINGS, RunSettings
from keysplit.storm.streams import component_tasks

#: Component names in the topology (the router needs the counter's to find its task ids).
SPOUT, ROUTER, COUNTER, AGGREGATOR, TOPK = "feed", "router", "counter", "aggregator", "topk"


def received_configuration(conf, context) -> dict:
    """What the topology runs with, as a task sees it: the ``keysplit.*`` settings of its configuration (the
    password's file or variable name aside), Storm's settings the run depends on, and the task counts of the
    context. Every task of a topology receives the same configuration and context."""
    settings = RunSettings.from_conf(conf)
    keep = {k: v for k, v in settings.conf().items()
            if k not in ("keysplit.redis_url", "keysplit.redis_password_file", "keysplit.redis_password_env")}
    tasks = {name: len(component_tasks(context, name)) for name in (SPOUT, ROUTER, COUNTER, AGGREGATOR)}
    return {**keep, "sources": tasks[ROUTER], "counter_tasks": tasks[COUNTER], "aggregators": tasks[AGGREGATOR],
            "spouts": tasks[SPOUT], "max_pending": conf.get("topology.max.spout.pending"),
            "message_timeout_secs": conf.get("topology.message.timeout.secs"),
            "worker_processes": conf.get("topology.workers"),
            "storm": {k: conf[k] for k in STORM_COST_SETTINGS if conf.get(k) is not None}}


def record_start(conn, keys: RunKeys, component: str, index: int, conf=None, context=None) -> None:
    """Count this process start of task ``component[index]``: on a cluster, where the runner's worker and task
    counters do not exist, the starts beyond one per task are what `--collect` can report as restarts. The
    first task to start also records the configuration it received (:func:`received_configuration`), so the
    run's summary says what ran, whatever the run's record said when its feed was loaded."""
    conn.hincrby(keys.starts, f"{component}:{index}", 1)
    if conf is not None:
        conn.set(keys.received, json.dumps(received_configuration(conf, context)), nx=True)
