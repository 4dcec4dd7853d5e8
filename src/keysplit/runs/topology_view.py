"""A topology file's run, read as ``keysplit compare`` and ``keysplit calibrate`` read a word-count run.

A toolkit topology's run (:mod:`keysplit.runs.topology_run`) stores its keyed stage (``keyed_stage``: the knobs under
the topology model's names, the dataset as its router reads it and its fingerprint, :func:`keysplit.toolkit.shape.
run_facts`), the router's loads and the merge's committed states in Redis. :func:`view_of` gives the fields a
word-count summary has (``grouping``, ``loads``, ``words_per_second`` -- rows, here --, ``latency_ms``, the knobs,
``dataset_sha256``, ``tick_phase_s``), with ``shape`` ``toolkit`` so that the model follows the toolkit's mechanics;
:func:`run_results` every key's result, as ``result(state)`` of the user's own accumulator, in the replay's form.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from keysplit.errors import KeysplitError
from keysplit.metrics import dist_cost
from keysplit.runs.collect import spout_metrics
from keysplit.storm.keys import RunKeys


def is_topology_run(summary: Any) -> bool:
    """Whether a stored summary is a topology file's run (it has ``routers``) rather than the word count's."""
    return isinstance(summary, dict) and "routers" in summary


def keyed_stage_of(summary: dict) -> dict:
    """The run's keyed stage; a one-line KeysplitError for a run that has none (no FeedSpout -> KeyRouter ->
    Aggregate.partial -> Aggregate.merge, or a run stored before runs recorded it)."""
    stage = summary.get("keyed_stage")
    if not isinstance(stage, dict):
        raise KeysplitError(f"run {summary.get('run_id')} ran {summary.get('topology')}, whose run records no keyed "
                            "stage (FeedSpout -> KeyRouter -> Aggregate.partial -> Aggregate.merge, recorded by "
                            "`keysplit run FILE --dataset ...`); compare and calibrate read such runs")
    return stage


def view_of(conn: redis.Redis, summary: dict) -> dict[str, Any]:
    """The run as the word count's summary names its fields (module docstring)."""
    stage = keyed_stage_of(summary)
    router = summary["routers"].get(stage["router"]) or {}
    partial = summary["partials"].get(stage["partial"]) or {}
    merge = summary["merges"].get(stage["merge"]) or {}
    held = list(partial.get("keys") or [])
    m = spout_metrics(conn, RunKeys(summary["run_id"]), int(stage["spouts"]))
    period = float(stage["flush_secs"])
    view = {
        "run_id": summary["run_id"], "topology": summary.get("topology"), "shape": "toolkit",
        "grouping": router.get("grouping", stage["grouping"]), "dataset": stage["dataset"],
        "dataset_sha256": stage["dataset_sha256"], "split": summary.get("split"),
        "max_pending": summary.get("max_pending"), "message_timeout_secs": summary.get("message_timeout_secs"),
        "worker_processes": summary.get("worker_processes"), "delivery": summary.get("delivery"),
        **{k: stage[k] for k in ("sources", "workers", "aggregators", "spouts", "cpu_delay_ms", "flush_secs", "rate",
                                 "batch", "batch_ms")},
        "messages": summary.get("rows"), "lines": summary.get("rows"),
        "words_per_second": summary.get("rows_per_second"), "latency_ms": summary.get("latency_ms"),
        "duration_s": summary.get("duration_s"), "replayed": summary.get("replayed"),
        "loads": router.get("loads"), "final_imbalance_fraction": router.get("imbalance_fraction"),
        "distinct_per_worker": held, "distinct_keys": merge.get("keys"),
        "dist_cost": dist_cost(held, merge["keys"]) if held and merge.get("keys") else None,
        # the local runner's ticks fall at the wall clock's multiples of the period (as the word count's flushes):
        # where they fell after the first emit, the model's tick phase
        "tick_phase_s": -(m["first_emit"] % period) if m["first_emit"] else 0.0,
        **merge_work(conn, summary["run_id"], stage["merge"]),
    }
    return view


def merge_work(conn: redis.Redis, run_id: str, merge: str) -> dict[str, Any]:
    """What the merge tasks did, summed over them, as they count it (``MergeAggregate.work``, the stage's ``tasks``
    hash): ``merge_entries`` (partial-state entries received), ``merge_records`` (rows they cover) and
    ``merge_busy_s`` (CPU seconds); None each for a run whose merges did not count (calibrate then measures no cost
    per entry)."""
    work = [json.loads(v) for v in conn.hgetall(RunKeys(run_id).stage(merge, "tasks")).values()]
    if not work or not all(isinstance(w, dict) for w in work):
        return {"merge_entries": None, "merge_records": None, "merge_busy_s": None}
    return {"merge_entries": sum(int(w.get("entries") or 0) for w in work),
            "merge_records": sum(int(w.get("records") or 0) for w in work),
            "merge_busy_s": sum(float(w.get("busy_s") or 0.0) for w in work)}


def _accumulator(stage: dict) -> Any:
    """The run's accumulator, with its project's ``src/`` importable (a user's own class lives there)."""
    from keysplit.runs.topology_file import use_project_src
    from keysplit.toolkit.accumulators import load_accumulator

    if stage.get("src"):
        use_project_src(stage["src"])
    return load_accumulator(stage["accumulator"])


def run_results(conn: redis.Redis, summary: dict) -> dict[str, str]:
    """Every key's committed result: the merge's key identity (the key's JSON text) -> ``result(state)`` as JSON
    text, the form of the replay's ``results.parquet``."""
    stage = keyed_stage_of(summary)
    acc = _accumulator(stage)
    stored = conn.hgetall(RunKeys(summary["run_id"]).stage(stage["merge"], "results"))
    return {name: json.dumps(acc.result(json.loads(state))) for name, state in stored.items()}
