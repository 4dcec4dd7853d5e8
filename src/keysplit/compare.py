"""``keysplit compare``: measured topology runs next to the replay's estimates, grouping by grouping.

A run is read from Redis (``keysplit:run:{id}:summary``, the JSON of ``keysplit run --json``, and
``keysplit:run:{id}:counts``, the final totals); a replay from its directory (``summary.json``,
``timeseries.parquet``, ``counts.parquet``). They must be of the same dataset: the record-stream fingerprints
(``dataset_sha256``) must be equal, or the comparison is refused. For each run the replay entry of the same
grouping (canonical spec) is put beside it: throughput (measured words/s vs the queueing model's sustainable
throughput), latency p50/p99, final imbalance, memory (dist_cost, distinct keys per worker), the loads, and
whether the run's final counts equal the replay's exact counts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from keysplit.errors import KeysplitError, SpecError
from keysplit.groupings import check_grouping

RUN_PREFIX = "keysplit:run:"


# What the comparison reads from summary.json (spark_replay.job writes all of it): section -> (JSON type, keys).
_SUMMARY_SHAPE: dict[str, tuple[type, tuple[str, ...]]] = {
    "dataset": (dict, ("spec", "sha256")),
    "replay": (dict, ("counts",)),
    "runs": (list, ()),
}
_RUN_KEYS = ("grouping", "workers", "sources")
_JSON_NAMES = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}


def _summary_problem(summary: Any) -> str | None:
    """What keeps ``summary`` (parsed JSON) from being a replay summary the comparison can read, or None."""
    if not isinstance(summary, dict):
        return f"it holds {_JSON_NAMES[type(summary)]}, not an object"
    for section, (kind, keys) in _SUMMARY_SHAPE.items():
        if section not in summary:
            return f'no "{section}"'
        if not isinstance(summary[section], kind):
            return f'"{section}" is {_JSON_NAMES[type(summary[section])]}, not {_JSON_NAMES[kind]}'
        missing = [k for k in keys if k not in summary[section]]
        if missing:
            return f'no "{missing[0]}" in "{section}"'
    for n, run in enumerate(summary["runs"]):
        if not isinstance(run, dict):
            return f'"runs" entry {n} is {_JSON_NAMES[type(run)]}, not an object'
        missing = [k for k in _RUN_KEYS if k not in run]
        if missing:
            return f'"runs" entry {n} has no "{missing[0]}"'
    return None


def load_replay(directory: str) -> dict:
    """The replay's ``summary.json`` (with ``dir`` added); a KeysplitError when it is not a replay directory."""
    path = os.path.join(directory, "summary.json")
    try:
        with open(path, encoding="utf-8") as fh:
            summary = json.load(fh)
    except FileNotFoundError:
        raise KeysplitError(f"no replay in {directory}: {path} not found (run `keysplit replay --out DIR` first)") \
            from None
    except UnicodeDecodeError:
        raise KeysplitError(f"{path} is not a keysplit replay summary (not UTF-8 text)") from None
    except json.JSONDecodeError as exc:
        raise KeysplitError(f"{path} is not a keysplit replay summary (not JSON: {exc})") from None
    except OSError as exc:
        raise KeysplitError(f"cannot read the replay summary {path}: {exc.strerror or exc}") from None
    problem = _summary_problem(summary)
    if problem is not None:
        raise KeysplitError(f"{path} is not a keysplit replay summary ({problem})")
    summary["dir"] = directory
    return summary


def load_run(conn: Any, run_id: str) -> tuple[dict, dict[str, Any]]:
    """A run's summary and final counts from Redis; for a topology file's run, its summary as the word count's
    names its fields and every key's result (:mod:`keysplit.runs.topology_view`)."""
    raw = conn.get(f"{RUN_PREFIX}{run_id}:summary")
    if raw is None:
        raise KeysplitError(f"no finished run {run_id!r} in Redis (no {RUN_PREFIX}{run_id}:summary)")
    try:
        summary = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise KeysplitError(f"run {run_id}: the summary in Redis is not JSON ({exc})") from None
    from keysplit.runs.topology_view import is_topology_run, run_results, view_of

    if is_topology_run(summary):  # a topology file's run: its keyed stage, and every key's result
        return view_of(conn, summary), run_results(conn, summary)
    counts = {k if isinstance(k, str) else k.decode(): int(v)
              for k, v in conn.hgetall(f"{RUN_PREFIX}{run_id}:counts").items()}
    return summary, counts


def replay_counts(replay: dict) -> dict[str, int]:
    """The replay's exact counts (the Parquet the executors wrote)."""
    import pyarrow.parquet as pq

    path = replay["replay"]["counts"]
    try:
        table = pq.read_table(path, columns=["key", "count"])
    except (OSError, ValueError) as exc:
        raise KeysplitError(f"cannot read the replay's exact counts {path}: {exc}") from None
    return dict(zip(table.column("key").to_pylist(), table.column("count").to_pylist()))


def replay_results(replay: dict) -> dict[str, str]:
    """Every key's result of the replayed topology (``results.parquet``: key and result as JSON text)."""
    import pyarrow.parquet as pq

    path = replay["topology"]["results"]
    try:
        table = pq.read_table(path, columns=["key", "result"])
    except (OSError, ValueError) as exc:
        raise KeysplitError(f"cannot read the replay's results {path}: {exc}") from None
    return dict(zip(table.column("key").to_pylist(), table.column("result").to_pylist()))


def check_same_topology(run: dict, replay: dict) -> None:
    """Refuse a topology file's run beside the word count's replay, and the other way round: results against
    counts would compare nothing."""
    if (run.get("shape") == "toolkit") != ("topology" in replay):
        what = f"a run of {run.get('topology')}" if run.get("shape") == "toolkit" else "a word-count run"
        other = (f"a replay of {replay['topology']['topology']}" if "topology" in replay
                 else "a replay of the word count's groupings")
        fix = "keysplit replay FILE --dataset ..." if run.get("shape") == "toolkit" else "keysplit replay -g ..."
        raise KeysplitError(f"run {run.get('run_id')} is {what} and {replay['dir']} holds {other}; replay it with "
                            f"`{fix}` to compare them")


def canonical(spec: str, workers: int, sources: int) -> str:
    try:
        return check_grouping(spec, workers, sources)
    except SpecError:
        return spec


def check_same_dataset(run: dict, replay: dict) -> None:
    """Refuse a run and a replay of different datasets (their record-stream sha256 differ)."""
    a, b = run.get("dataset_sha256"), replay["dataset"].get("sha256")
    if not a or a != b:
        raise KeysplitError(
            f"run {run.get('run_id')} and the replay in {replay['dir']} are of different datasets: "
            f"{run.get('dataset')} (sha256 {str(a)[:12]}) vs {replay['dataset']['spec']} (sha256 {str(b)[:12]}); "
            "replay the run's dataset to compare them")


def knobs(run: dict, replay: dict) -> list[dict]:
    """The topology's knobs of the run and of the replay side by side (``keysplit.topology_model.KNOBS``),
    each with whether they agree; ``arrivals`` is the run's loop (closed, or open at its rate) against the
    replay's ``--arrivals``."""
    from keysplit.topology_model import KNOBS

    settings = replay["replay"]
    rows = []
    for name, option in KNOBS.items():
        if name == "rate":
            continue
        a, b = run.get(name), settings.get(name)
        same = a is None or b is None or float(a) == float(b)
        rows.append({"knob": name, "option": option, "run": a, "replay": b, "agree": same})
    rate = run.get("rate")
    arrivals = settings.get("arrivals", "lindley")
    want = "closed" if not rate else "open"
    run_side = "closed loop" if not rate else f"open, {rate:g} words/s"
    replay_side = f"{arrivals}" + (f", {settings.get('rate'):g} words/s" if arrivals != "closed" else "")
    agree = arrivals == "lindley" or (arrivals == want and (want == "closed" or float(settings.get("rate")) == rate))
    rows.append({"knob": "arrivals", "option": "--rate / --arrivals", "run": run_side, "replay": replay_side,
                 "agree": agree})
    return rows


def check_same_knobs(run: dict, replay: dict) -> list[dict]:
    """Refuse a run and a replay whose topology knobs differ (the estimate would be of another topology)."""
    rows = knobs(run, replay)
    bad = [r for r in rows if not r["agree"]]
    if bad:
        raise KeysplitError(
            f"run {run.get('run_id')} and the replay in {replay['dir']} model different topologies: "
            + "; ".join(f"{r['option']} {r['run']} vs {r['replay']}" for r in bad)
            + "; replay with the run's knobs to compare them")
    return rows


def ratio(estimate: float | None, measured: float | None) -> float | None:
    """replay / run, or None when either is missing or the run measured 0."""
    if estimate is None or not measured:
        return None
    return float(estimate) / float(measured)


def counts_diff(measured: Mapping[str, int], exact: Mapping[str, int]) -> dict:
    """Whether the run's totals equal the exact counts, and how many words differ, are missing or extra."""
    missing = [w for w in exact if w not in measured]
    extra = [w for w in measured if w not in exact]
    wrong = [w for w in exact if w in measured and measured[w] != exact[w]]
    return {"equal": not (missing or extra or wrong), "missing": len(missing), "extra": len(extra),
            "different": len(wrong), "examples": sorted(missing + extra + wrong)[:5]}


def compare_one(run: dict, counts: Mapping[str, int], replay: dict, exact: Mapping[str, int]) -> dict:
    """One row: the run and the replay entry of its grouping, side by side."""
    check_same_dataset(run, replay)
    workers = int(run.get("workers") or len(run.get("loads") or []) or 1)
    sources = int(run.get("sources") or 1)
    want = canonical(run["grouping"], workers, sources)
    entries = {r["grouping"]: r for r in replay["runs"]}
    est = entries.get(want) or entries.get(run["grouping"])
    if est is None:
        raise KeysplitError(f"the replay in {replay['dir']} has no grouping {want!r} (it has: "
                            f"{', '.join(entries)}); replay it with --groupings {want}")
    latency = run.get("latency_ms") or {}
    knob_rows = check_same_knobs(run, replay)
    notes = []
    for name, a, b in (("workers", workers, est["workers"]), ("sources", sources, est["sources"])):
        if a is not None and b is not None and float(a) != float(b):
            notes.append(f"{name} differ: run {a}, replay {b}")
    missing = [r["knob"] for r in knob_rows if r["replay"] is None and r["run"] is not None]
    if missing:
        notes.append(f"the replay does not record {', '.join(missing)} (made before they were knobs)")
    if est.get("model", "lindley") == "lindley":
        notes.append("the replay's estimate is the open-loop D/D/1 queue per worker (--arrivals lindley): no max "
                     "pending, flush or overheads, so its latencies are lower bounds")
    diff = counts_diff(counts, exact)
    if run.get("shape") == "toolkit":
        notes.append("results: every key's result of the user's accumulator, against the replay's "
                     "(Spark's combineByKey over the same key identity)")
    return {
        "grouping": est["grouping"],
        "run_id": run.get("run_id"),
        "dataset_sha256": run.get("dataset_sha256"),
        "throughput": {"run_words_per_second": run.get("words_per_second"),
                       "replay_estimate": est.get("throughput_estimate")},
        "latency_p50_ms": {"run": latency.get("p50"), "replay": est.get("latency_p50_ms")},
        "latency_p99_ms": {"run": latency.get("p99"), "replay": est.get("latency_p99_ms")},
        "ratio": {"throughput": ratio(est.get("throughput_estimate"), run.get("words_per_second")),
                  "latency_p50_ms": ratio(est.get("latency_p50_ms"), latency.get("p50")),
                  "latency_p99_ms": ratio(est.get("latency_p99_ms"), latency.get("p99"))},
        "knobs": knob_rows,
        "model": est.get("model", "lindley"),
        "final_imbalance_fraction": {"run": run.get("final_imbalance_fraction"),
                                     "replay": est.get("final_imbalance_fraction")},
        "dist_cost": {"run": run.get("dist_cost"), "replay": est.get("dist_cost")},
        "distinct_per_worker": {"run": run.get("distinct_per_worker"), "replay": est.get("distinct_per_worker")},
        "loads": {"run": run.get("loads"), "replay": est.get("loads")},
        "loads_equal": run.get("loads") == est.get("loads"),
        "counts_equal": diff["equal"],
        "counts_diff": diff,
        "compared": "results" if run.get("shape") == "toolkit" else "counts",
        "replayed_tuples": run.get("replayed"),
        "notes": notes,
    }


#: The run id that names the newest finished run (``--run latest``), as git's HEAD names the newest commit.
LATEST = "latest"


def resolve_runs(conn: Any, run_ids: Sequence[str]) -> list[str]:
    """``run_ids`` with ``latest`` replaced by the id of the newest finished run (a one-line KeysplitError when
    there is none); a run actually named ``latest`` is itself."""
    from keysplit.runs.records import list_runs

    if LATEST not in run_ids or conn.exists(f"{RUN_PREFIX}{LATEST}:summary"):
        return list(run_ids)
    finished = [r["run_id"] for r in list_runs(conn) if r.get("state") == "finished"]
    if not finished:
        raise KeysplitError("--run latest: no finished run is stored (see `keysplit runs`)")
    return [finished[-1] if r == LATEST else r for r in run_ids]


def compare(conn: Any, run_ids: Sequence[str], replay_dir: str) -> dict:
    """The comparison of every run with the replay (the content of ``comparison.json``)."""
    replay = load_replay(replay_dir)
    run_ids = resolve_runs(conn, run_ids)
    loaded = [load_run(conn, r) for r in run_ids]
    for run, _ in loaded:  # refuse before reading the counts
        check_same_topology(run, replay)
        check_same_dataset(run, replay)
        check_same_knobs(run, replay)
    exact = replay_results(replay) if "topology" in replay else replay_counts(replay)
    rows = [compare_one(run, counts, replay, exact) for run, counts in loaded]
    return {"replay": os.path.abspath(replay_dir), "dataset": replay["dataset"], "rows": rows,
            "calibration": calibration_of(replay)}


def calibration_of(replay: dict) -> str | None:
    """Which calibration the replay's model used: a profile's name (``keysplit calibrate``), else its file, else
    None (uncalibrated: every overhead 0)."""
    o = replay["replay"].get("overheads") or {}
    return o.get("profile") or o.get("source") or None


def write(result: dict, out: str) -> str:
    """``out/comparison.json``, written whole or not at all."""
    from keysplit.outputs import atomic_file

    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "comparison.json")
    with atomic_file(path, "--out") as fh:
        json.dump(result, fh, indent=2)
        fh.write("\n")
    return path
