"""``keysplit run wordcount`` as a library: validate, load the feed into Redis, run the topology on the local
runner until every line is acked, and collect the run's measurements (stored in Redis under the run id).

The steps are separate functions so a cluster deployment can reuse them: :func:`load_feed` fills the feed a
``sparse submit``-ted topology reads, and :func:`collect` summarises a finished run from Redis alone.
"""

from __future__ import annotations

import json
import logging
import os
import re
import resource
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from keysplit.datasets import Dataset, encode_record, open_dataset, require_records
from keysplit.errors import KeysplitError
from keysplit.groupings import check_grouping, grouping_class
from keysplit.latency import LatencyHistogram
from keysplit.metrics import dist_cost, imbalance_fraction, load_stddev
from keysplit.outputs import atomic_file
from keysplit.redis_server import client, fresh_connections, keysplit_home, managed_server, private_dir
from keysplit.specs import parse_spec
from keysplit.storm import exactly_once
from keysplit.storm.bolts import AGGREGATOR, COUNTER, ROUTER, SPOUT, TOPK
from keysplit.storm.faults import Injector, check_kills, parse_kill
from keysplit.storm.feed import create_group, feed_done
from keysplit.storm.keys import RunKeys
from keysplit.storm.records import check_run_id, mark_interrupted, read_record, reserve, set_state
from keysplit.storm.settings import PASSWORD_ENV, WordCountSettings, split_password, with_password
from keysplit.storm.topology import wordcount_topology

#: Records per pipelined XADD batch when loading the feed.
LOAD_BATCH = 2000
#: Resident memory of one task process (a Python interpreter with streamparse and redis loaded), measured
#: at 25-35 MB; the size check counts this much per task.
TASK_MEMORY_MB = 32
#: File descriptors the runner holds per task (its stdin and stdout pipes, its log file).
TASK_FDS = 3

log = logging.getLogger("keysplit.run")


@dataclass
class RunOptions:
    """What ``keysplit run wordcount`` was asked for."""

    grouping: str
    dataset: str
    sources: int = 5
    workers: int = 10
    counter_tasks: int | None = None  # counter parallelism; defaults to W
    aggregators: int = 2
    spouts: int = 1
    cpu_delay_ms: float = 0.0
    flush_secs: float = 1.0
    max_pending: int = 1000
    message_timeout: int = 30
    top_k: int = 10
    timeout: float = 600.0
    run_id: str | None = None
    kills: tuple[str, ...] = ()  # fault injection: COMPONENT[:INDEX]@FRACTION (storm/faults.py)
    delivery: str = "exactly-once"  # or at-least-once: storm/exactly_once.py
    route: str = "fields"  # keysplit.route: fields (every Storm release) or direct (Storm < 2.6)
    storm_env: str = "local"  # the config.json env whose options and log settings the components receive
    worker_processes: int = 1  # topology.workers
    rate: float | None = None  # open loop: words/s the spouts emit (max pending still caps); None: closed loop


@dataclass
class Prepared:
    """A validated run: the dataset opened, the grouping's canonical spec, the settings for the topology."""

    options: RunOptions
    dataset: Dataset
    grouping: str
    settings: WordCountSettings


def new_run_id(grouping: str) -> str:
    """``<UTC time>-<grouping name>-<6 hex>``, e.g. ``20260101T120000-pkg-1a2b3c``."""
    name = re.sub(r"[^a-z0-9]+", "", parse_spec(grouping)[0]) or "run"
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{name}-{secrets.token_hex(3)}"


def prepare(opts: RunOptions) -> Prepared:
    """Check everything that can be checked before anything starts; one-line KeysplitErrors."""
    if opts.timeout <= 0:
        raise KeysplitError(f"--timeout must be positive, got {opts.timeout}")
    if opts.max_pending < 1:
        raise KeysplitError(f"--max-pending must be at least 1, got {opts.max_pending}")
    if opts.message_timeout < 1:
        raise KeysplitError(f"--message-timeout must be at least 1 second, got {opts.message_timeout}")
    if opts.rate is not None and not opts.rate > 0:
        raise KeysplitError(f"--rate must be positive, got {opts.rate}")
    kills = [parse_kill(k) for k in opts.kills]
    if opts.run_id is not None:
        check_run_id(opts.run_id)
    counter_tasks = opts.counter_tasks or opts.workers
    check_task_count(opts.spouts + opts.sources + max(counter_tasks, opts.workers) + opts.aggregators + 1)
    grouping = check_grouping(opts.grouping, opts.workers, opts.sources)
    if parse_spec(opts.grouping)[1].get("load") == "global":
        raise KeysplitError(f"{opts.grouping}: load=global is the simulator's oracle (one load vector shared by "
                            "all sources); the topology's routers are separate processes, use load=local or probe=T")
    settings = WordCountSettings(
        run_id=opts.run_id or new_run_id(opts.grouping), grouping=opts.grouping, spouts=opts.spouts,
        sources=opts.sources, workers=opts.workers, counter_tasks=counter_tasks, aggregators=opts.aggregators,
        cpu_delay_ms=opts.cpu_delay_ms, flush_secs=opts.flush_secs, top_k=opts.top_k, route=opts.route,
        rate=opts.rate or 0.0, delivery=opts.delivery,
    )
    check_kills(kills, {SPOUT: opts.spouts, ROUTER: opts.sources, COUNTER: counter_tasks,
                        AGGREGATOR: opts.aggregators, TOPK: 1}, opts.worker_processes)
    if os.path.exists("config.json"):  # the env whose conf the components will get must exist (--env)
        from keysplit.local.submission import read_env

        read_env("config.json", opts.storm_env)
    dataset = open_dataset(opts.dataset)
    require_records(dataset)
    return Prepared(opts, dataset, grouping, settings)


def machine_task_limit() -> tuple[int, str]:
    """How many task processes this machine can start, and what limits it (free memory, open files,
    processes)."""
    limits = []
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            info = dict(line.split(":", 1) for line in fh)
        available_mb = int(info["MemAvailable"].split()[0]) // 1024
        limits.append((available_mb // TASK_MEMORY_MB,
                       f"{available_mb / 1024:.1f} GB of memory available at ~{TASK_MEMORY_MB} MB a task"))
    except (OSError, KeyError, ValueError):
        pass
    files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if files != resource.RLIM_INFINITY:
        limits.append(((files - 64) // TASK_FDS, f"ulimit -n {files}, {TASK_FDS} open files a task"))
    procs = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    if procs != resource.RLIM_INFINITY:
        limits.append((procs, f"ulimit -u {procs}"))
    return min(limits) if limits else (1 << 30, "no limit known")


def check_task_count(tasks: int) -> None:
    """Refuse a topology this machine cannot start, before anything is loaded or spawned."""
    limit, why = machine_task_limit()
    if tasks > limit:
        raise KeysplitError(f"this run needs {tasks:,} task processes (spouts + routers + counters + aggregators + "
                            f"top-k); this machine can start about {max(limit, 0):,} ({why}): lower -S, -W, "
                            "--counter-tasks, -A or --spouts")


def load_feed(
    conn: redis.Redis, keys: RunKeys, dataset: Dataset, *, with_frequencies: bool = False,
    progress: Callable[[int], None] | None = None, deadline: float | None = None,
) -> tuple[int, int]:
    """Append every record with at least one key to the run's feed stream (pipelined); returns (lines,
    words). Records without keys are skipped, as the simulator skips them. ``with_frequencies`` also stores
    the exact key counts (for groupings that need a full pass)."""
    if conn.exists(keys.feed):
        raise KeysplitError(f"run {keys.run_id!r} already has a feed in Redis; choose another run id")
    lines = words = 0
    frequencies: Counter = Counter()
    pipe = conn.pipeline(transaction=False)
    for index, record in enumerate(dataset.records()):
        if not record[1]:
            continue
        pipe.xadd(keys.feed, {"r": encode_record(record), "n": index, "s": lines})
        lines += 1
        words += len(record[1])
        if with_frequencies:
            frequencies.update(record[1])
        if lines % LOAD_BATCH == 0:
            pipe.execute()
            if progress is not None:
                progress(LOAD_BATCH)
            if deadline is not None and time.monotonic() > deadline:
                raise RunTimeout(f"{lines:,} lines loaded into the feed")
    pipe.execute()
    if progress is not None:
        progress(lines % LOAD_BATCH)
    if with_frequencies and frequencies:
        for start in range(0, len(frequencies), 10_000):
            chunk = dict(list(frequencies.items())[start:start + 10_000])
            conn.hset(keys.frequencies, mapping=chunk)
    create_group(conn, keys)
    return lines, words


def spout_metrics(conn: redis.Redis, keys: RunKeys, spouts: int) -> dict[str, Any]:
    """The spouts' metrics merged: latency histogram, acked, replayed, first emit, last ack."""
    histogram = LatencyHistogram()
    acked = replayed = 0
    first, last = float("inf"), 0.0
    for i in range(spouts):
        m = conn.hgetall(keys.spout(i))
        if not m:
            continue
        histogram.merge(LatencyHistogram.from_json(m["histogram"]))
        acked += int(m["acked"])
        replayed += int(m["replayed"])
        if float(m["first_emit"]):
            first = min(first, float(m["first_emit"]))
        last = max(last, float(m["last_ack"]))
    return {"histogram": histogram, "acked": acked, "replayed": replayed,
            "first_emit": first if first != float("inf") else 0.0, "last_ack": last}


def collect(conn: redis.Redis, keys: RunKeys, settings: WordCountSettings, base: dict[str, Any]) -> dict[str, Any]:
    """The run's summary (the ``--json`` object) from what the components wrote to Redis."""
    spouts = spout_metrics(conn, keys, settings.spouts)
    loads_raw = conn.hgetall(keys.loads)
    loads = [int(loads_raw.get(str(i), 0)) for i in range(settings.counter_tasks)]
    distinct_per_worker = [int(conn.scard(keys.keys(i))) for i in range(settings.counter_tasks)]
    distinct = int(conn.hlen(keys.counts))
    duration = max(spouts["last_ack"] - spouts["first_emit"], 1e-9)
    latency = spouts["histogram"].summary()
    top = json.loads(conn.get(keys.topk) or "[]")
    grouping_stats = conn.get(keys.grouping_stats)  # the leader router's grouping stats(), when it has them
    counted = sum(int(c) for _, c in conn.hscan_iter(keys.counts, count=5000))
    commits = [conn.hgetall(keys.aggregator(i)) for i in range(settings.aggregators)]
    partials = sum(int(c.get("partials", 0)) for c in commits)
    firsts = [float(t) for t in (conn.hget(keys.counter(i), "first_tuple") for i in range(settings.counter_tasks)) if t]
    return {
        **base,
        "words_per_second": base["messages"] / duration,
        "lines_per_second": base["lines"] / duration,
        "latency_ms": {k: latency[k] for k in ("mean", "p50", "p95", "p99", "max")},
        "loads": loads,
        "dist_cost": dist_cost(distinct_per_worker, distinct),
        "distinct_per_worker": distinct_per_worker,
        "distinct_keys": distinct,
        "final_imbalance_fraction": imbalance_fraction(loads),
        "load_stddev": load_stddev(loads),
        "replayed": spouts["replayed"],
        "counted": counted,
        "complete_lines": exactly_once.floor(conn, keys),
        "duplicates_dropped": exactly_once.dropped(conn, keys),
        "top_k": top,
        "duration_s": duration,
        # an aggregator's tick per partial count (merge, commit, acks), microseconds: the model's commit_us
        "aggregator_us": 1e6 * sum(float(c.get("busy_s", 0.0)) for c in commits) / partials if partials else None,
        # from the first emit to the first word reaching a counter (spout, router, the hops between): the model's hop
        "first_hop_ms": 1000 * (min(firsts) - spouts["first_emit"]) if firsts and spouts["first_emit"] else None,
        **({"grouping_stats": json.loads(grouping_stats)} if grouping_stats else {}),
    }


class RunTimeout(KeysplitError):
    """``--timeout`` passed (set-up included); the message says how far the run got."""


def start_run(
    conn: redis.Redis, prepared: Prepared, redis_url: str, *,
    progress: Callable[[str, int, int], None] | None = None, deadline: float | None = None,
) -> tuple[WordCountSettings, RunKeys, dict[str, Any]]:
    """Reserve the run id, load the feed and register the run in Redis (its record and config); returns the
    settings the topology must be given, the run's keys and the summary fields known before it runs."""
    opts = prepared.options
    url, password = split_password(redis_url)  # the password reaches components through their environment
    settings = WordCountSettings.from_conf({"keysplit.redis_url": url,
                                            "keysplit.redis_password_env": PASSWORD_ENV if password else ""},
                                           base=prepared.settings)
    keys = RunKeys(settings.run_id)
    started = time.time()
    reserve(conn, keys, {"started": started, "grouping": prepared.grouping, "dataset": prepared.dataset.spec})
    needs_pass = grouping_class(parse_spec(prepared.grouping)[0]).needs_full_pass
    loaded = [0]

    def load_progress(n: int) -> None:
        loaded[0] += n
        if progress is not None:
            progress("load", loaded[0], 0)

    try:
        lines, words = load_feed(conn, keys, prepared.dataset, with_frequencies=needs_pass, progress=load_progress,
                                 deadline=deadline)
        base = {
            "run_id": settings.run_id,
            "topology": "wordcount",
            "grouping": prepared.grouping,
            "dataset": prepared.dataset.spec,
            "dataset_sha256": prepared.dataset.sha256(),
            "messages": words,
            "lines": lines,
            "workers": settings.workers,
            "counter_tasks": settings.counter_tasks,
            "sources": settings.sources,
            "aggregators": settings.aggregators,
            "spouts": settings.spouts,
            "cpu_delay_ms": settings.cpu_delay_ms,
            "flush_secs": settings.flush_secs,
            "max_pending": opts.max_pending,
            "message_timeout_secs": opts.message_timeout,
            "storm_env": opts.storm_env,
            "worker_processes": opts.worker_processes,
            "rate": opts.rate,
            "delivery": settings.delivery,
            "started": started,
        }
        conn.set(keys.config, json.dumps({**base, **settings.conf(), "keysplit.redis_url": ""}))
        set_state(conn, keys, "loaded", lines=lines, messages=words, feed_complete=1)
    except BaseException as exc:
        mark_interrupted(fresh_connections(conn), keys, _reason(exc, "while loading the feed"))
        raise
    return settings, keys, base


def _reason(exc: BaseException, where: str) -> str:
    text = str(exc) or type(exc).__name__
    return f"{text} ({where})" if isinstance(exc, KeysplitError) else f"{type(exc).__name__} {where}: {text}"


def stored_run(conn: redis.Redis, run_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The run's record and config; a KeysplitError when there is no such run."""
    check_run_id(run_id)
    record = read_record(conn, run_id)
    if record is None:
        raise KeysplitError(f"no run {run_id!r} in this Redis (see `keysplit runs`)")
    raw = conn.get(RunKeys(run_id).config)
    return record, json.loads(raw) if raw else {}


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
    settings = WordCountSettings.from_conf(config)
    if not feed_done(conn, keys):
        acked = spout_metrics(conn, keys, settings.spouts)["acked"]
        hint = (f"; continue it here with `keysplit run wordcount --resume {run_id}`"
                if record["state"] == "interrupted" else "")
        raise KeysplitError(f"run {run_id} has not finished: {acked} of {config['lines']} lines acked{hint}")
    base = {k: v for k, v in config.items() if not k.startswith("keysplit.")}
    summary = collect(conn, keys, settings, base)
    # task restarts are counted by the components themselves (process starts beyond one per task); which
    # worker went down, which task died first and what was left unacked is in Storm's UI and logs, not in
    # Redis: None says "unknown", never a reassuring 0
    starts = [int(n) for n in conn.hgetall(keys.starts).values()]
    summary.update({"restarts": sum(n - 1 for n in starts) if starts else None, "worker_restarts": None,
                    "task_deaths": None, "unacked_inputs": None})
    _mark_totals(summary, timed_out=None)
    conn.set(keys.summary, json.dumps(summary))
    set_state(conn, keys, "finished", finished=time.time())
    return summary


def _mark_totals(summary: dict[str, Any], timed_out: int | None) -> None:
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


def run_wordcount(
    prepared: Prepared,
    conn: redis.Redis,
    redis_url: str,
    *,
    progress: Callable[[str, int, int], None] | None = None,
    log_dir: str | os.PathLike | None = None,
    python: str = sys.executable,
) -> dict[str, Any]:
    """Run the topology on the local runner until every line is acked; store and return the summary.

    ``progress(phase, done, total)`` is called while loading ("load") and while running ("run").
    ``--timeout`` counts from here: loading the feed and starting the tasks are part of it.
    """
    opts = prepared.options
    deadline = time.monotonic() + opts.timeout
    # refuses --kill redis on a server keysplit did not start, before anything is loaded
    injector = Injector([parse_kill(k) for k in opts.kills], managed_server(redis_url))
    try:
        settings, keys, base = start_run(conn, prepared, redis_url, progress=progress, deadline=deadline)
    except RunTimeout as exc:
        run_id = prepared.settings.run_id
        raise KeysplitError(f"run {run_id} did not finish within --timeout {opts.timeout:g} s ({exc}); a partly "
                            f"loaded run cannot be resumed: delete it with `keysplit runs delete {run_id}`") from None
    return drive(conn, settings, keys, base, deadline=deadline, max_pending=opts.max_pending,
                 message_timeout=opts.message_timeout, injector=injector,
                 progress=progress, log_dir=log_dir, python=python, storm_env=opts.storm_env,
                 worker_processes=opts.worker_processes, password=split_password(redis_url)[1])


def resume_run(
    conn: redis.Redis, run_id: str, redis_url: str, *, timeout: float,
    progress: Callable[[str, int, int], None] | None = None, python: str = sys.executable,
) -> dict[str, Any]:
    """Continue an interrupted (or only loaded) run with the settings it was started with: the spouts
    re-read their pending lines (delivered, never acked) and go on with the rest of the feed."""
    record, config = stored_run(conn, run_id)
    keys = RunKeys(run_id)
    state = record["state"]
    if state not in ("interrupted", "loaded"):
        raise KeysplitError(f"run {run_id} is {state}; only an interrupted or loaded run can be resumed")
    if not config or not record.get("feed_complete") or not conn.exists(keys.feed):
        raise KeysplitError(f"run {run_id} was interrupted before its feed was completely loaded; delete it with "
                            f"`keysplit runs delete {run_id}` and start again")
    url, password = split_password(redis_url)  # the password reaches components through their environment
    # a run loaded before exactly-once delivery existed has no line numbers in its feed: it stays at least once
    settings = WordCountSettings.from_conf({"keysplit.delivery": "at-least-once", **config, "keysplit.redis_url": url,
                                            "keysplit.redis_password_env": PASSWORD_ENV if password else ""})
    base = {"delivery": settings.delivery, **{k: v for k, v in config.items() if not k.startswith("keysplit.")}}
    resumes = int(record.get("resumes", 0)) + 1
    return drive(conn, settings, keys, base, deadline=time.monotonic() + timeout,
                 max_pending=int(config["max_pending"]), message_timeout=int(config["message_timeout_secs"]),
                 progress=progress, python=python, resumes=resumes, storm_env=config.get("storm_env", "local"),
                 worker_processes=int(config.get("worker_processes", 1)), password=password)


class _QuietWhenRedisIsGone(logging.Filter):
    """Drops the runner's warnings and the tasks' forwarded errors once the Redis server stops answering:
    every task then dies with a traceback (kept in its log), and the run ends with one line saying Redis
    went away."""

    def __init__(self, conn: redis.Redis) -> None:
        super().__init__()
        self.conn = conn  # a client that does not retry: the answer is wanted now
        self.gone = False
        self.checked = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or not record.name.startswith("keysplit.local"):
            return True
        if time.monotonic() - self.checked > 1.0:  # a Redis restarted by --kill redis comes back
            self.checked = time.monotonic()
            self.gone = _redis_gone(self.conn)
        return not self.gone


def drive(
    conn: redis.Redis, settings: WordCountSettings, keys: RunKeys, base: dict[str, Any], *, deadline: float,
    max_pending: int, message_timeout: int, injector: Injector | None = None,
    progress: Callable[[str, int, int], None] | None = None, log_dir: str | os.PathLike | None = None,
    python: str = sys.executable, resumes: int = 0, storm_env: str = "local", worker_processes: int = 1,
    password: str = "",
) -> dict[str, Any]:
    """The local runner's part: start the tasks, wait until the feed is done, collect the summary."""
    from keysplit.local import LocalCluster
    from keysplit.local.submission import build_resources, read_env, submit_conf

    lines = base["lines"]
    started = time.time()
    topology = wordcount_topology(settings)
    remaining = deadline - time.monotonic()
    # the conf `sparse submit -e ENV -o ...` would send (config.json in the working directory, when there is one)
    env_config = read_env("config.json", storm_env) if os.path.exists("config.json") else None
    conf = submit_conf(topology, "wordcount", {
        "topology.max.spout.pending": max_pending, "topology.message.timeout.secs": message_timeout,
        "topology.workers": worker_processes,
        # the tasks' start-up counts against --timeout too
        "keysplit.local.startup.timeout.secs": max(1.0, min(60.0, remaining))}, env_config=env_config)
    worker_env = {PASSWORD_ENV: password} if password else {}
    log_dir = Path(log_dir) if log_dir else private_dir(keysplit_home() / "logs") / settings.run_id
    warned = [False]
    injector = injector or Injector([])
    exactly = settings.exactly_once
    dedup_peak = [0]  # bytes, sampled every poll (the peak count of marks is exact: exactly_once.peak_marks)
    quick = client(with_password(settings.redis_url, password) if password else settings.redis_url,
                   reconnect=False)
    quiet = _QuietWhenRedisIsGone(quick)
    # on the handlers, so that it also sees the task loggers below keysplit.local (logger filters do not)
    handlers = logging.getLogger().handlers
    set_state(conn, keys, "running", **({"resumes": resumes} if resumes else {}))

    def finished() -> bool:
        if injector.restart_redis_if_due():
            return False  # Redis is down (--kill redis): nothing to ask it
        acked = spout_metrics(conn, keys, settings.spouts)["acked"]
        injector.fire_due(cluster, acked, lines)  # before the end check: a kill due with the last lines fires
        if injector.recovering(cluster):
            return False
        if feed_done(conn, keys):
            return True
        timed_out = cluster.stats()[SPOUT]["timed_out"]
        if timed_out and not warned[0]:  # say so now: the run may take much longer than it should
            warned[0] = True
            log.warning("run %s: lines are timing out (not acked within topology.message.timeout.secs = %d s) "
                        "and are replayed%s: raise --message-timeout or lower --max-pending", settings.run_id,
                        message_timeout, " (the totals stay exact; the run is slower)" if exactly else
                        ", so the totals will be at least, not exact")
        if progress is not None:
            progress("run", acked, lines)
        if exactly:
            dedup_peak[0] = max(dedup_peak[0], exactly_once.memory(conn, keys)[0])
        return False

    old_umask = os.umask(0o077)  # task logs (.stderr, .log) hold the dataset's words: 0600, like dump.rdb
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        if remaining <= 0:
            raise RunTimeout("the feed was loaded, no task started")
        with tempfile.TemporaryDirectory(prefix="keysplit-resources-") as tmp, \
                LocalCluster(topology, conf, cwd=os.getcwd(), python=python, log_dir=str(log_dir), env=worker_env,
                             resources=str(build_resources(os.path.join(tmp, "resources")))) as cluster:
            cluster.start()
            # wall-clock time of tick 0: the runner sends every tick at started_at + k * T (monotonic clock)
            ticks_at = time.time() - (time.monotonic() - cluster.started_at)
            if not cluster.run_until(finished, max(0.0, deadline - time.monotonic()), poll=0.2):
                acked = spout_metrics(conn, keys, settings.spouts)["acked"]
                raise RunTimeout(f"{acked} of {lines} lines acked")
            cluster.quiesce(timeout=5.0)  # let the bolts answer what they were given; then count what is unacked
            stats = cluster.stats()
            run_summary = cluster.summary()
            cluster.shutdown()
    except RunTimeout as exc:
        mark_interrupted(conn, keys, f"--timeout: {exc}")
        raise KeysplitError(f"run {settings.run_id} did not finish within --timeout ({exc}); logs in {log_dir}; "
                            f"continue it with `keysplit run wordcount --resume {settings.run_id}`") from None
    except redis.RedisError as exc:
        mark_interrupted(conn, keys, f"lost its Redis connection: {exc}")
        raise KeysplitError(f"run {settings.run_id} lost its Redis connection: {exc} (task logs in {log_dir})") \
            from None
    except BaseException as exc:
        if isinstance(exc, Exception) and (quiet.gone or _redis_gone(quick)):
            raise KeysplitError(f"run {settings.run_id} lost its Redis server (task logs in {log_dir})") from None
        mark_interrupted(fresh_connections(conn), keys, _reason(exc, "while running"))
        raise
    finally:
        os.umask(old_umask)
        for handler in handlers:
            handler.removeFilter(quiet)
    summary = collect(conn, keys, settings, base)
    spout_stats = stats.get(SPOUT, {}) if isinstance(stats, dict) else {}
    _mark_totals(summary, timed_out=int(spout_stats.get("timed_out", 0)))
    summary["restarts"] = _restarts(stats)
    summary.update({k: run_summary[k] for k in ("worker_restarts", "task_deaths", "unacked_inputs")})
    summary["worker_processes"] = run_summary["workers"]
    summary["route"] = settings.route
    summary["kills"] = injector.fired
    if exactly:
        summary["dedup_peak_bytes"] = dedup_peak[0]
        summary["dedup_peak_marks"] = exactly_once.peak_marks(conn, keys)
    summary["wall_s"] = time.time() - started
    if resumes:
        summary["resumes"] = resumes
    # where the flush ticks fell relative to the first emit (the replay's --tick-phase; ticks at phase + k*T)
    summary["tick_phase_s"] = ticks_at - spout_metrics(conn, keys, settings.spouts)["first_emit"]
    conn.set(keys.summary, json.dumps(summary))
    set_state(conn, keys, "finished", finished=time.time())
    # the feed and the per-worker key sets are large and fully summarised: drop them, keep counts and metrics
    conn.delete(keys.feed, keys.frequencies, *[keys.keys(i) for i in range(settings.counter_tasks)])
    return summary


def _redis_gone(conn: redis.Redis) -> bool:
    try:
        conn.ping()
        return False
    except (redis.RedisError, OSError):
        return True


def _restarts(stats: Any) -> int:
    """Total task restarts in the runner's stats (tolerant of its exact shape)."""
    total = 0
    if isinstance(stats, dict):
        for value in stats.values():
            if isinstance(value, dict):
                if isinstance(value.get("restarts"), int):
                    total += value["restarts"]
                else:
                    total += _restarts(value)
            elif isinstance(value, list):
                total += sum(_restarts(v) for v in value if isinstance(v, dict))
    return total


def read_counts(conn: redis.Redis, keys: RunKeys) -> dict[str, int]:
    """The run's final totals, word -> count."""
    return {w: int(c) for w, c in conn.hscan_iter(keys.counts, count=5000)}


def write_counts(counts: dict[str, int], path: str) -> None:
    """``word<TAB>count`` lines, most frequent first (ties by word), written atomically: a failure leaves the
    old file (or none), never a partial one."""
    with atomic_file(path, "--counts-out") as fh:
        for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
            fh.write(f"{word}\t{count}\n")
