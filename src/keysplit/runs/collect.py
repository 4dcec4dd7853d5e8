"""After a run: its measurements read back from Redis alone (:func:`collect`, :func:`collect_run`), so a run on a
cluster is summarised exactly as a local one, and its exact word counts."""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import redis

from keysplit.errors import KeysplitError
from keysplit.groupings import check_grouping
from keysplit.latency import LatencyHistogram
from keysplit.metrics import dist_cost, imbalance_fraction, load_stddev
from keysplit.outputs import atomic_file
from keysplit.runs.records import check_run_id, read_record, set_state
from keysplit.storm import exactly_once
from keysplit.storm.feed import feed_done
from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import RunSettings

log = logging.getLogger("keysplit.run")


def spout_metrics(conn: redis.Redis, keys: RunKeys, spouts: int) -> dict[str, Any]:
    """The spouts' metrics merged: latency histogram, acked (feed entries), rows_acked (the rows in them: a toolkit
    feed's entry holds one or more), replayed, first emit, last ack, and each spout's adaptive
    window (storm/window.py: the lines it settled at, its lowest, its cuts; -1 unlimited)."""
    histogram = LatencyHistogram()
    windows: list[dict[str, int]] = []
    acked = rows_acked = replayed = timed_out = 0
    first, last = float("inf"), 0.0
    for i in range(spouts):
        m = conn.hgetall(keys.spout(i))
        if not m:
            continue
        histogram.merge(LatencyHistogram.from_json(m["histogram"]))
        acked += int(m["acked"])
        rows_acked += int(m.get("rows_acked", m["acked"]))  # spouts before entries of several rows: one a line
        replayed += int(m["replayed"])
        timed_out += int(m.get("timed_out", 0))  # lines (a spout tuple carries several)
        if "window" in m:  # spouts older than the adaptive window did not write it
            windows.append({k: int(m[k]) for k in ("window", "window_min", "window_cuts")})
        if float(m["first_emit"]):
            first = min(first, float(m["first_emit"]))
        last = max(last, float(m["last_ack"]))
    return {"histogram": histogram, "acked": acked, "rows_acked": rows_acked, "replayed": replayed,
            "timed_out_lines": timed_out, "windows": windows,
            "first_emit": first if first != float("inf") else 0.0, "last_ack": last}


def collect(conn: redis.Redis, keys: RunKeys, settings: RunSettings, base: dict[str, Any]) -> dict[str, Any]:
    """The run's summary (the ``--json`` object) from what the components wrote to Redis."""
    spouts = spout_metrics(conn, keys, settings.spouts)
    # The loads: the words each counter counted once (exactly-once: whose commit came from it, so that after any
    # crash, replay or --resume they add up to the feed's words); and its work: every word it processed and flushed,
    # replays and flushes lost to a crash included. Work minus load is what the counter redid.
    work_raw = conn.hgetall(keys.loads)
    work = [int(work_raw.get(str(i), 0)) for i in range(settings.counter_tasks)]
    once = conn.hgetall(keys.loads_once) if settings.exactly_once else {}
    loads = [int(once.get(str(i), 0)) for i in range(settings.counter_tasks)] if once else work
    distinct_per_worker = [int(conn.scard(keys.keys(i))) for i in range(settings.counter_tasks)]
    distinct = int(conn.hlen(keys.counts))
    duration = max(spouts["last_ack"] - spouts["first_emit"], 1e-9)
    latency = spouts["histogram"].summary()
    top = json.loads(conn.get(keys.topk) or "[]")
    grouping_stats = conn.get(keys.grouping_stats)  # the leader router's grouping stats(), when it has them
    counted = sum(int(c) for _, c in conn.hscan_iter(keys.counts, count=5000))
    commits = [conn.hgetall(keys.aggregator(i)) for i in range(settings.aggregators)]
    partials = sum(int(c.get("partials", 0)) for c in commits)
    counters = [conn.hmget(keys.counter(i), ("first_tuple", "tuples")) for i in range(settings.counter_tasks)]
    firsts = [float(t) for t, _ in counters if t]
    tuples = sum(int(n or 0) for _, n in counters)  # the counters' input tuples: one a word, or one a batch
    summary = {
        **base,
        "words_per_second": base["messages"] / duration,
        "lines_per_second": base["lines"] / duration,
        "latency_ms": {k: latency[k] for k in ("mean", "p50", "p95", "p99", "max")},
        "loads": loads,
        "work": work,
        "redone": [w - n for w, n in zip(work, loads)] if once else None,
        "timed_out_lines": spouts["timed_out_lines"],
        "dist_cost": dist_cost(distinct_per_worker, distinct),
        "distinct_per_worker": distinct_per_worker,
        "distinct_keys": distinct,
        "final_imbalance_fraction": imbalance_fraction(loads),
        "load_stddev": load_stddev(loads),
        "replayed": spouts["replayed"],
        **window_summary(spouts["windows"]),
        "counted": counted,
        "complete_lines": exactly_once.floor(conn, keys),
        "duplicates_dropped": exactly_once.dropped(conn, keys),
        "top_k": top,
        "duration_s": duration,
        "counter_tuples": tuples,
        "words_per_tuple": sum(loads) / tuples if tuples else None,
        # an aggregator's tick per partial count (merge, commit, acks), microseconds: the model's commit_us
        "aggregator_us": 1e6 * sum(float(c.get("busy_s", 0.0)) for c in commits) / partials if partials else None,
        # from the first emit to the first word reaching a counter (spout, router, the hops between): the model's hop
        "first_hop_ms": 1000 * (min(firsts) - spouts["first_emit"]) if firsts and spouts["first_emit"] else None,
        # where the flushes fell relative to the first emit (the replay's --tick-phase; flushes at phase + k*T): the
        # counters flush at the wall clock's multiples of T (storm/flush_clock.py), the last one at or before it
        "tick_phase_s": -(spouts["first_emit"] % settings.flush_secs),
        **({"grouping_stats": json.loads(grouping_stats)} if grouping_stats else {}),
    }
    busy = [float(conn.hget(keys.counter(i), "busy_s") or 0.0) for i in range(settings.counter_tasks)]
    return {**summary, **what_bound(summary, busy, settings.spouts)}


#: A counter busy this share of the run or more was what bound it (its sleeps and tuples, not waiting for work).
BUSY = 0.85
#: A run at max pending whose rate reached this share of what Little's law lets max pending lines carry was bound by
#: them (a run far below it kept fewer lines out on average: its window was not what held it back).
LITTLE = 0.7
#: Lines timed out, and the message timeout this share of the run or more: the run waited for it (its counters idle).
TIMEOUT_SHARE = 0.2


def what_bound(s: dict[str, Any], busy: list[float], spouts: int = 1) -> dict[str, Any]:
    """What bound the run's throughput, first match: ``rate`` (open loop: the spouts' schedule), ``workers`` (the
    counters were busy: W / D, or ``hot counter`` when one had more words than the rest), ``in-flight cap`` (the
    spouts' window reached max pending, and the run reached :data:`LITTLE` of the rate Little's law lets that many
    lines carry, lines in flight x words a line / latency: short of it, the window did not hold it back),
    ``message timeout`` (lines timed out, and the timeout is a good share of the run: they were replayed only then,
    while the counters waited), ``flush latency``
    (the run took the workers' time and one line's latency, the counters' flush: a longer run amortises it), else
    ``cpu``
    (nothing of the topology bound while the counters waited: the machine's cores, shared by every process).
    ``busy`` is each counter's busy seconds (its CPU delay and tuples)."""
    duration, words, delay = s["duration_s"], s["messages"], s.get("cpu_delay_ms") or 0.0
    loads, rate, latency_s = s.get("loads") or [], s.get("rate") or 0.0, s["latency_ms"]["mean"] / 1000.0
    hot = max(busy) / duration if busy and duration > 0 else 0.0
    if rate and s["words_per_second"] >= 0.9 * rate:
        return {"bound_by": "rate", "bound": f"the open loop's rate, {rate:,.0f} words/s"}
    if hot >= BUSY and loads:
        top = max(range(len(loads)), key=loads.__getitem__)
        limit = words / (loads[top] * delay / 1000.0) if delay and loads[top] else 0.0
        if loads[top] > 1.1 * sum(loads) / len(loads):
            return {"bound_by": "hot counter", "bound": f"the hot counter {top}: {loads[top]:,} of {words:,} words "
                    f"at {delay:g} ms, {limit:,.0f} words/s at most (busy {hot:.0%} of the run)"}
        return {"bound_by": "workers", "bound": f"the workers: W / D = {len(loads) * 1000.0 / delay:,.0f} words/s "
                f"(the busiest counter {hot:.0%} of the run)" if delay else
                f"the workers (the busiest counter {hot:.0%} of the run)"}
    timeout, timed_out = s.get("message_timeout_secs") or 0, s.get("timed_out_lines") or 0
    if timed_out and timeout >= TIMEOUT_SHARE * duration:  # e.g. lines lost with a killed task: replayed only then
        return {"bound_by": "message timeout", "bound": f"the message timeout: {timed_out:,} line(s) were replayed "
                f"only once topology.message.timeout.secs = {timeout:g} s had passed (lost with a killed task, or "
                f"held too long), {min(timeout / duration, 1.0):.0%} of the run's {duration:.1f} s"}
    cap, window = (s.get("max_pending") or 0) * spouts, s.get("window")
    per_line = words / max(s["lines"], 1)
    if cap and window is not None and window >= cap and s["words_per_second"] >= LITTLE * cap * per_line / latency_s:
        return {"bound_by": "in-flight cap", "bound": f"the in-flight cap: {cap:,} lines x {per_line:.1f} words / "
                f"{latency_s:.2f} s = {cap * per_line / latency_s:,.0f} words/s by Little's law (--max-pending "
                f"{s['max_pending']})"}
    work = max(loads) * delay / 1000.0 if loads else 0.0  # the busiest counter's sleeps: the workers' time at least
    if latency_s >= 0.05 * duration and duration <= 1.1 * (work + latency_s):
        return {"bound_by": "flush latency", "bound": f"the flush latency: the run took the workers' {work:.1f} s "
                f"and a line's {latency_s:.2f} s (its counters' flush every {s.get('flush_secs', 1.0):g} s), "
                f"{latency_s / duration:.0%} of its {duration:.1f} s: a longer run amortises it"}
    return {"bound_by": "cpu", "bound": f"the machine's CPU: no counter was busy more than {hot:.0%} of the run, "
            "and no cap or latency of the topology explains it (every process shares the cores)"}


def window_summary(windows: list[dict[str, int]]) -> dict[str, Any]:
    """The summary's fields of the spouts' adaptive windows: per spout, and overall (their sum: the lines the
    spouts together keep in flight; None when one is unlimited)."""
    if not windows:
        return {}
    total = None if any(w["window"] < 0 for w in windows) else sum(w["window"] for w in windows)
    return {"spout_windows": windows, "window": total, "window_cuts": sum(w["window_cuts"] for w in windows)}


def stored_run(conn: redis.Redis, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's record and config; a KeysplitError when there is no such run."""
    check_run_id(run_id)
    record = read_record(conn, run_id)
    if record is None:
        raise KeysplitError(f"no run {run_id!r} in this Redis (see `keysplit runs`)")
    raw = conn.get(RunKeys(run_id).config)
    config = json.loads(raw) if raw else {}
    refuse_topology_file_run(run_id, config)
    return record, config


def refuse_topology_file_run(run_id: str, stored: dict[str, Any]) -> None:
    """A one-line refusal when ``stored`` (a run's config or summary) belongs to a topology file's run
    (keysplit.runs.topology_run), which the word count's commands cannot read."""
    topology = stored.get("topology", "wordcount") if isinstance(stored, dict) else "wordcount"
    if topology != "wordcount":
        raise KeysplitError(f"run {run_id} ran {topology}, a topology file, not the word count: `keysplit runs show "
                            f"{run_id}` shows it, `keysplit run FILE --collect {run_id}` summarises it")


#: Fields of a run's record -> the key of the components' received configuration that says what ran.
RECEIVED = {"grouping": "keysplit.grouping", "workers": "keysplit.workers", "split": "keysplit.split",
            "cpu_delay_ms": "keysplit.cpu_delay_ms", "flush_secs": "keysplit.flush_secs",
            "delivery": "keysplit.delivery", "rate": "keysplit.rate", "sources": "sources",
            "counter_tasks": "counter_tasks", "aggregators": "aggregators", "spouts": "spouts",
            "max_pending": "max_pending", "message_timeout_secs": "message_timeout_secs",
            "worker_processes": "worker_processes", "batch": "keysplit.batch", "batch_ms": "keysplit.batch_ms"}


def what_ran(config: dict[str, Any], received: dict[str, Any]) -> tuple[dict[str, Any], dict[str, list]]:
    """The run's config with what the components received (``storm/components.py`` ``received_configuration``) in
    place of what was recorded when the feed was loaded, and the fields that differed: ``{field: [recorded,
    received]}``. A ``sparse submit -o keysplit.cpu_delay_ms=...`` that disagrees with ``--load-only``'s options
    thus changes the summary, never the other way round.

    >>> cfg = {"cpu_delay_ms": 0.0, "keysplit.cpu_delay_ms": 0.0, "sources": 5, "rate": None, "grouping": "kg"}
    >>> ran, diff = what_ran(cfg, {"keysplit.cpu_delay_ms": 0.4, "sources": 5, "keysplit.rate": 0.0,
    ...                            "keysplit.grouping": "kg"})
    >>> ran["cpu_delay_ms"], ran["keysplit.cpu_delay_ms"], diff
    (0.4, 0.4, {'cpu_delay_ms': [0.0, 0.4]})
    """
    ran = dict(config)
    for key, value in received.items():
        if key.startswith("keysplit.") and key != "keysplit.run_id":
            ran[key] = value
    if received.get("storm"):  # Storm's settings of the costs between components (topology_model.storm_terms)
        ran["storm"] = received["storm"]
    differs: dict[str, list] = {}
    for field, key in RECEIVED.items():
        value = received.get(key)
        if value is None:
            continue
        if field == "rate":
            value = value or None  # 0 is the closed loop, recorded as None
        elif field == "grouping":
            value = canonical_grouping(value, received.get("keysplit.workers", 2), received.get("sources", 1))
        if field in config and config[field] != value:
            differs[field] = [config[field], value]
        ran[field] = value
    return ran, differs


def canonical_grouping(spec: str, workers: int, sources: int) -> str:
    """``spec`` as the run's record writes it (every parameter spelled out); the spec itself if it is invalid."""
    try:
        return check_grouping(spec, int(workers), int(sources))
    except KeysplitError:
        return spec


def restarts_note(conn: redis.Redis, keys: RunKeys) -> str:
    """``; restarting: router:0 started 14 times, ...`` for the tasks that started more than once (a task that
    crash-loops on a cluster shows here, from the components' own start records), else ``""``."""
    starts = {task: int(n) for task, n in conn.hgetall(keys.starts).items() if int(n) > 1}
    if not starts:
        return ""
    worst = sorted(starts.items(), key=lambda item: (-item[1], item[0]))
    listed = ", ".join(f"{task} started {n} times" for task, n in worst[:6])
    more = f" and {len(worst) - 6} more tasks" if len(worst) > 6 else ""
    return (f"; tasks restarting: {listed}{more} (read that component's errors in Storm's UI or worker logs; "
            "a crash at start-up repeats at every restart)")


def collect_run(conn: redis.Redis, run_id: str) -> dict[str, Any]:
    """Summarise a run that ran elsewhere (``sparse submit`` on a cluster) once every line is acked; a run
    already finished (here or by an earlier ``--collect``) gives its stored summary."""
    record, config = stored_run(conn, run_id)
    keys = RunKeys(run_id)
    stored = conn.get(keys.summary)
    if record["state"] == "finished" and stored:
        return json.loads(stored)
    if record["state"] == "running":
        raise KeysplitError(f"run {run_id} is running on this machine (pid {record.get('owner')}); "
                            "it writes its summary when it ends")
    if not config or not record.get("feed_complete", "1" if conn.exists(keys.feed) else ""):
        raise KeysplitError(f"run {run_id} is {record['state']} and its feed was never completely loaded; "
                            f"delete it with `keysplit runs delete {run_id}`")
    if not conn.exists(keys.feed):
        raise KeysplitError(f"run {run_id} is {record['state']} and has no feed left to collect")
    settings = RunSettings.from_conf(config)
    if not feed_done(conn, keys):
        acked = spout_metrics(conn, keys, settings.spouts)["acked"]
        hint = (f"; continue it here with `keysplit run wordcount --resume {run_id}`"
                if record["state"] == "interrupted" else "")
        raise KeysplitError(f"run {run_id} has not finished: {acked} of {config['lines']} lines acked"
                            f"{restarts_note(conn, keys)}{hint}")
    received = conn.get(keys.received)
    differs: dict[str, list] = {}
    if received:
        config, differs = what_ran(config, json.loads(received))
        for field, (recorded, ran) in differs.items():
            log.warning("run %s: the topology ran with %s = %s, not the %s its record had; the summary says what ran",
                        run_id, field, ran, recorded)
        conn.set(keys.config, json.dumps(config))
        settings = RunSettings.from_conf(config)
    base = {k: v for k, v in config.items() if not k.startswith("keysplit.")}
    summary = collect(conn, keys, settings, base)
    summary["configuration"] = "as the components received it" if received else "as recorded (no component started)"
    if differs:
        summary["record_differed"] = differs
    # task restarts are counted by the components themselves (process starts beyond one per task); which
    # worker went down, which task died first and what was left unacked is in Storm's UI and logs, not in
    # Redis: None says "unknown", never a reassuring 0
    starts = [int(n) for n in conn.hgetall(keys.starts).values()]
    summary.update({"restarts": sum(n - 1 for n in starts) if starts else None, "worker_restarts": None,
                    "task_deaths": None, "unacked_inputs": None})
    mark_totals(summary, timed_out=None)
    conn.set(keys.summary, json.dumps(summary))
    set_state(conn, keys, "finished", finished=time.time())
    return summary


#: Fields every stored run summary has (what ``runs show`` and ``calibrate`` read first).
SUMMARY_FIELDS = ("run_id", "grouping", "dataset", "lines", "messages", "sources", "workers")
#: ... and those of a topology file's run (keysplit.runs.topology_run), whose summary has ``routers``.
FILE_SUMMARY_FIELDS = ("run_id", "topology", "rows", "routers", "partials", "merges")


def damaged_summary(run_id: str) -> KeysplitError:
    return KeysplitError(f"the summary stored for run {run_id} is damaged (not a run summary keysplit wrote); delete "
                         f"the run with `keysplit runs delete {run_id}`")


def stored_summary(text: str, run_id: str) -> dict[str, Any]:
    """A run's stored summary (its JSON text); a one-line KeysplitError for a value that is not one (damaged, or
    written by something else), never a traceback."""
    try:
        summary = json.loads(text)
    except ValueError:
        raise damaged_summary(run_id) from None
    fields = FILE_SUMMARY_FIELDS if isinstance(summary, dict) and "routers" in summary else SUMMARY_FIELDS
    if not isinstance(summary, dict) or any(field not in summary for field in fields):
        raise damaged_summary(run_id)
    return summary


def mark_totals(summary: dict[str, Any], timed_out: int | None) -> None:
    """Whether the totals are exact. Exactly-once delivery counts each word once, replays or not; the summary
    still checks that the totals add up to the words fed, and says ``mismatch`` (with a warning) if they do not.
    At least once, a replayed line may have been counted (in part) before it was replayed, so after any replay
    each total is only known to be at least right."""
    if summary.get("delivery", "at-least-once") == "exactly-once":
        summary["totals"] = "exact" if summary["counted"] == summary["messages"] else "mismatch"
        if summary["totals"] == "mismatch":
            log.warning("run %s: exactly-once totals add up to %d words, but the feed has %d", summary["run_id"],
                        summary["counted"], summary["messages"])
    else:
        summary["totals"] = "exact" if summary["replayed"] == 0 else "at-least"
    if timed_out is not None:
        summary["timed_out"] = timed_out


def read_counts(conn: redis.Redis, keys: RunKeys) -> dict[str, int]:
    """The run's final totals, word -> count."""
    return {w: int(c) for w, c in conn.hscan_iter(keys.counts, count=5000)}


def write_counts(counts: dict[str, int], path: str) -> None:
    """``word<TAB>count`` lines, most frequent first (ties by word), written atomically: a failure leaves the
    old file (or none), never a partial one."""
    with atomic_file(path, "--counts-out") as fh:
        for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            fh.write(f"{word}\t{count}\n")
