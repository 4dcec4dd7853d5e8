"""``keysplit run wordcount`` as a library: validate, load the feed into Redis, run the topology on the local
runner until every line is acked, and collect the run's measurements (stored in Redis under the run id).

The steps are separate functions so a cluster deployment can reuse them: :func:`load_feed` fills the feed a
``sparse submit``-ted topology reads, and :func:`collect` summarises a finished run from Redis alone.

A run's whole life on the local runner (start, :func:`drive`, resume) with the one error policy that ends it
(:func:`_stop`) and the Redis checks that policy asks, read top to bottom in one place.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from keysplit.errors import KeysplitError
from keysplit.fingerprint import StreamFingerprint
from keysplit.groupings import grouping_class
from keysplit.home import keysplit_home, private_dir
from keysplit.outputs import remove_stale
from keysplit.redis_client import client, fresh_connections, redact
from keysplit.runs.collect import collect, mark_totals, spout_metrics, stored_run
from keysplit.runs.faults import Injector, parse_kill
from keysplit.runs.prepare import Prepared, RunTimeout, file_state, load_feed
from keysplit.runs.progress import DEFAULT_STARTUP_TIMEOUT, RunProgress, report_run, startup_conf, watch_start
from keysplit.runs.records import claim, mark_interrupted, reserve, set_state
from keysplit.runs.redis_server import forgets_on_restart, managed_server, persistence_problem
from keysplit.specs import parse_spec
from keysplit.storm import exactly_once
from keysplit.storm.components import SPOUT
from keysplit.storm.feed import feed_done
from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import PASSWORD_ENV, RunSettings, split_password, with_password
from keysplit.storm.topology import wordcount_topology
from keysplit.stream import source_of

log = logging.getLogger("keysplit.run")


def start_run(
    conn: redis.Redis, prepared: Prepared, redis_url: str, *,
    progress: RunProgress | None = None, deadline: float | None = None,
) -> tuple[RunSettings, RunKeys, dict[str, Any]]:
    """Reserve the run id, load the feed and register the run in Redis (its record and config); returns the
    settings the topology must be given, the run's keys and the summary fields known before it runs."""
    opts = prepared.options
    url, password = split_password(redis_url)  # the password reaches components through their environment
    settings = RunSettings.from_conf({"keysplit.redis_url": url,
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
        def deal(index: int, first_key: str) -> int:
            return source_of(index, first_key, settings.sources, settings.split)

        fingerprint = StreamFingerprint()  # of the records loaded: a file changed since cannot lend its own
        before = file_state(prepared.dataset)
        lines, words = load_feed(conn, keys, prepared.dataset, with_frequencies=needs_pass, progress=load_progress,
                                 deadline=deadline, deal=deal, fingerprint=fingerprint)
        if file_state(prepared.dataset) != before:
            log.warning("%s changed while run %s loaded it: the run counts the %d lines it read, and records their "
                        "fingerprint (a replay of the file as it is now will not compare with it)",
                        getattr(prepared.dataset, "path", prepared.dataset.spec), settings.run_id, lines)
        base = {
            "run_id": settings.run_id,
            "topology": "wordcount",
            "grouping": prepared.grouping,
            "dataset": prepared.dataset.spec,
            "dataset_sha256": fingerprint.hexdigest(),
            "messages": words,
            "lines": lines,
            "workers": settings.workers,
            "split": settings.split,
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
            "batch": settings.batch,
            "batch_ms": settings.batch_ms,
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


def run_wordcount(
    prepared: Prepared,
    conn: redis.Redis,
    redis_url: str,
    *,
    progress: RunProgress | None = None,
    log_dir: str | os.PathLike | None = None,
    python: str = sys.executable,
) -> dict[str, Any]:
    """Run the topology on the local runner until every line is acked; store and return the summary.

    ``progress(phase, done, total, **detail)`` is called while loading, starting and running (runs/progress.py).
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
    except redis.ResponseError as exc:
        line = persistence_problem(exc, _data_folder(client(redis_url, reconnect=False), redis_url), redis_url)
        if line is None:
            raise
        run_id = prepared.settings.run_id
        if not fresh_connections(conn).exists(RunKeys(run_id).record):  # refused before the run was recorded
            raise KeysplitError(line) from None
        raise KeysplitError(f"{line}; run {run_id} stopped while loading its feed and cannot be resumed: then delete "
                            f"it with `keysplit runs delete {run_id}`") from None
    return drive(conn, settings, keys, base, DriveOptions(
        deadline, opts.max_pending, opts.message_timeout, storm_env=opts.storm_env,
        worker_processes=opts.worker_processes, password=split_password(redis_url)[1], injector=injector,
        progress=progress, log_dir=log_dir, python=python, startup_timeout=opts.startup_timeout))


def resume_run(
    conn: redis.Redis, run_id: str, redis_url: str, *, timeout: float,
    progress: RunProgress | None = None, python: str = sys.executable,
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
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
    taken = claim(conn, keys, ("interrupted", "loaded"))  # atomic: two --resume at once never both run it
    if taken is not None:
        owner = f" (process {taken['owner']})" if taken.get("owner") and taken["state"] == "running" else ""
        raise KeysplitError(f"run {run_id} is {taken['state']}{owner}: another command resumed it first; only an "
                            "interrupted or loaded run can be resumed")
    url, password = split_password(redis_url)  # the password reaches components through their environment
    # a run loaded before exactly-once delivery existed has no line numbers in its feed: it stays at least once
    settings = RunSettings.from_conf({"keysplit.delivery": "at-least-once", **config, "keysplit.redis_url": url,
                                      "keysplit.redis_password_env": PASSWORD_ENV if password else ""})
    base = {"delivery": settings.delivery, "batch": settings.batch, "batch_ms": settings.batch_ms,  # what it runs with
            **{k: v for k, v in config.items() if not k.startswith("keysplit.")}}
    resumes = int(record.get("resumes", 0)) + 1
    return drive(conn, settings, keys, base, DriveOptions(
        time.monotonic() + timeout, int(config["max_pending"]), int(config["message_timeout_secs"]),
        storm_env=config.get("storm_env", "local"), worker_processes=int(config.get("worker_processes", 1)),
        password=password, progress=progress, python=python, resumes=resumes, startup_timeout=startup_timeout))


def _data_folder(conn: redis.Redis, url: str) -> str | None:
    """The data folder of the server at ``url``: the managed server's, else what ``CONFIG GET dir`` says (None
    when the server does not allow it)."""
    managed = managed_server(url)
    if managed is not None:
        return managed.directory
    try:
        return conn.config_get("dir").get("dir") or None
    except (redis.RedisError, OSError):
        return None


class CannotPersist(KeysplitError):
    """The Redis server refuses writes because it cannot persist them (MISCONF: a full disk)."""


class _QuietWhenRedisIsGone(logging.Filter):
    """Drops the runner's warnings and the tasks' forwarded errors once the Redis server stops answering, or
    refuses writes (a full disk): every task then dies with a traceback (kept in its log), and the run ends with
    one line saying Redis went away or where the disk is full."""

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
            self.gone = _redis_gone(self.conn) or _write_refusal(self.conn, "") is not None
        return not self.gone


@dataclass(frozen=True)
class DriveOptions:
    """How :func:`drive` runs a word-count run on the local runner: the Storm settings the run was started with,
    and what this process adds (the Redis password, fault injection, progress, logs, the tasks' Python)."""

    deadline: float  # monotonic time at which --timeout passes
    max_pending: int
    message_timeout: int
    storm_env: str = "local"
    worker_processes: int = 1
    password: str = ""  # the Redis password: the tasks get it through their environment
    injector: Injector | None = None
    progress: RunProgress | None = None
    log_dir: str | os.PathLike | None = None
    python: str = sys.executable
    resumes: int = 0  # this is the run's n-th --resume
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT  # a starting task silent this long hangs (local/liveness.py)


@dataclass(frozen=True)
class _Stop:
    """What an exception that stopped a running run does: the reason its record keeps (interrupted, so `--resume`
    continues it; None: nothing is written, Redis cannot take it), and the one line the user reads instead of the
    exception (None: the exception itself goes up)."""

    reason: str | None
    line: str | None = None
    fresh: bool = True  # write through fresh connections (an interruption may have left a reply unread)


def _stop(exc: BaseException, run_id: str, log_dir: Path, watch: _QuietWhenRedisIsGone, url: str) -> _Stop:
    """The run's one error policy: what ``exc`` makes of it (see :class:`_Stop`). Lost Redis connections and a
    server that refuses writes (a full disk) are told apart by asking the server (``watch.conn``, at ``url``)."""
    from keysplit.local import TopologyError

    quick = watch.conn
    resume = f"continue it with `keysplit run wordcount --resume {run_id}`"
    if isinstance(exc, RunTimeout):
        return _Stop(f"--timeout: {exc}", f"run {run_id} did not finish within --timeout ({exc}); logs in {log_dir}; "
                     f"{resume}", fresh=False)
    if isinstance(exc, CannotPersist):  # refused too, most likely: then the record reads interrupted once we exit
        return _Stop(str(exc), f"{exc}; run {run_id} stopped: then {resume}")
    if isinstance(exc, TopologyError):  # a task that cannot start, hangs or keeps dying: it says what to fix,
        emptied = _restarted_empty(quick, run_id, url)  # unless it died of a server that restarted empty (NOGROUP)
        if emptied:
            return _Stop(None, f"run {run_id} stopped: {emptied} (task logs in {log_dir})")
        return _Stop(_reason(exc, "while running"), f"{exc}; run {run_id} stopped: then {resume}")
    if isinstance(exc, redis.RedisError):
        problem = persistence_problem(exc, _data_folder(quick, url), url) or _write_refusal(quick, url)
        if problem:
            return _Stop(problem, f"{problem}; run {run_id} stopped: then {resume}", fresh=False)
        emptied = _restarted_empty(quick, run_id, url)
        if emptied:
            return _Stop(None, f"run {run_id} stopped: {emptied} (task logs in {log_dir})")
        return _Stop(f"lost its Redis connection: {exc}",
                     f"run {run_id} lost its Redis connection: {exc} (task logs in {log_dir})", fresh=False)
    if isinstance(exc, Exception):
        problem = _write_refusal(quick, url)
        if problem:
            return _Stop(None, f"{problem}; run {run_id} stopped: then {resume}")
        if watch.gone or _redis_gone(quick):
            return _Stop(None, f"run {run_id} lost its Redis server (task logs in {log_dir})")
    return _Stop(_reason(exc, "while running"))


def _storm_conf(topology: Any, options: DriveOptions) -> dict[str, Any]:
    """The conf `sparse submit -e ENV -o ...` would send (config.json in the working directory, when there is one)."""
    from keysplit.local.submission import read_env, submit_conf

    env_config = read_env("config.json", options.storm_env) if os.path.exists("config.json") else None
    return submit_conf(topology, "wordcount", {
        "topology.max.spout.pending": options.max_pending, "topology.message.timeout.secs": options.message_timeout,
        "topology.workers": options.worker_processes, **startup_conf(options.startup_timeout)}, env_config=env_config)


def drive(conn: redis.Redis, settings: RunSettings, keys: RunKeys, base: dict[str, Any],
          options: DriveOptions) -> dict[str, Any]:
    """The local runner's part: start the tasks, wait until the feed is done, collect the summary."""
    from keysplit.local import LocalCluster
    from keysplit.local.submission import build_resources

    lines = base["lines"]
    started = time.time()
    topology = wordcount_topology(settings)
    remaining = options.deadline - time.monotonic()
    conf = _storm_conf(topology, options)
    password, progress, resumes = options.password, options.progress, options.resumes
    worker_env = {PASSWORD_ENV: password} if password else {}
    log_dir = Path(options.log_dir) if options.log_dir else private_dir(keysplit_home() / "logs") / settings.run_id
    warned = [False]
    injector = options.injector or Injector([])
    exactly = settings.exactly_once
    dedup_peak = [0]  # bytes, sampled every poll (the peak count of marks is exact: exactly_once.peak_marks)
    full_url = with_password(settings.redis_url, password) if password else settings.redis_url
    quick = client(full_url, reconnect=False)
    quiet = _QuietWhenRedisIsGone(quick)
    # on the handlers, so that it also sees the task loggers below keysplit.local (logger filters do not)
    handlers = logging.getLogger().handlers
    set_state(conn, keys, "running", **({"resumes": resumes} if resumes else {}))
    pinged = [time.monotonic()]

    def finished() -> bool:
        if injector.restart_redis_if_due():
            return False  # Redis is down (--kill redis): nothing to ask it
        if time.monotonic() - pinged[0] > 1.0:  # a server that refuses writes (a full disk) stops the run now:
            pinged[0] = time.monotonic()  # every task would crash at its next write, again and again
            problem = _write_refusal(quick, full_url)
            if problem:
                raise CannotPersist(problem)
        metrics = spout_metrics(conn, keys, settings.spouts)
        acked = metrics["acked"]
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
                        options.message_timeout, " (the totals stay exact; the run is slower)" if exactly else
                        ", so the totals will be at least, not exact")
        report_run(progress, metrics, lines)
        if exactly:
            dedup_peak[0] = max(dedup_peak[0], exactly_once.memory(conn, keys)[0])
        return False

    old_umask = os.umask(0o077)  # task logs (.stderr, .log) hold the dataset's words: 0600, like dump.rdb
    for handler in handlers:
        handler.addFilter(quiet)
    try:
        if remaining <= 0:
            raise RunTimeout("the feed was loaded, no task started")
        # named by this process, so that the next run removes what a kill -9 of this one leaves behind
        for prefix in ("keysplit-resources-", "keysplit-local-"):
            remove_stale(tempfile.gettempdir(), prefix)
        with tempfile.TemporaryDirectory(prefix=f"keysplit-resources-{os.getpid()}-") as tmp, \
                LocalCluster(topology, conf, cwd=os.getcwd(), python=options.python, log_dir=str(log_dir),
                             env=worker_env, resources=str(build_resources(os.path.join(tmp, "resources"))),
                             on_starting=watch_start(options.deadline, progress, injector.fire_at_start)) as cluster:
            if not cluster.run_until(finished, max(0.0, options.deadline - time.monotonic()), poll=0.2):
                acked = spout_metrics(conn, keys, settings.spouts)["acked"]
                raise RunTimeout(f"{acked} of {lines} lines acked")
            cluster.quiesce(timeout=5.0)  # let the bolts answer what they were given; then count what is unacked
            stats = cluster.stats()
            run_summary = cluster.summary()
            cluster.shutdown()
    except BaseException as exc:  # one policy (_stop): the record says interrupted, the user reads one line
        stop = _stop(exc, settings.run_id, log_dir, quiet, full_url)
        if stop.reason is not None:
            mark_interrupted(fresh_connections(conn) if stop.fresh else conn, keys, stop.reason)
        if stop.line is None:
            raise
        raise KeysplitError(stop.line) from None
    finally:
        os.umask(old_umask)
        for handler in handlers:
            handler.removeFilter(quiet)
    emptied = _restarted_empty(conn, settings.run_id, full_url)
    if emptied:  # the feed looked done because it was gone with everything else: no summary of nothing
        raise KeysplitError(f"run {settings.run_id} stopped: {emptied} (task logs in {log_dir})")
    summary = collect(conn, keys, settings, base)
    spout_stats = stats.get(SPOUT, {}) if isinstance(stats, dict) else {}
    mark_totals(summary, timed_out=int(spout_stats.get("timed_out", 0)))
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
    conn.set(keys.summary, json.dumps(summary))
    set_state(conn, keys, "finished", finished=time.time())
    # the feed and the per-worker key sets are large and fully summarised: drop them, keep counts and metrics
    conn.delete(keys.feed, keys.frequencies, *[keys.keys(i) for i in range(settings.counter_tasks)])
    return summary


def _restarted_empty(conn: redis.Redis, run_id: str, url: str) -> str | None:
    """The cause, when the run's own record is gone from a server that answers: it restarted empty (a server that
    keeps nothing on disk) or lost its data otherwise (FLUSHALL, a replica resynced): "no such key" is the symptom,
    not the cause. None when the record is there or the server does not answer."""
    try:
        if conn.exists(RunKeys(run_id).record):
            return None
        uptime = int(conn.info("server").get("uptime_in_seconds", -1))
    except (redis.RedisError, OSError, ValueError):
        return None
    forgets = forgets_on_restart(conn)
    when = f"it restarted empty or was flushed (up {uptime} s)" if uptime >= 0 else "it lost its data"
    return (f"Redis at {redact(url)} no longer holds the run's keys: {when}"
            + (f" and {forgets}" if forgets else "") + ", so the run's feed, marks and record are gone and it cannot "
            "be resumed; turn persistence on (CONFIG SET appendonly yes) and run it again")


def _redis_gone(conn: redis.Redis) -> bool:
    """Whether the server no longer answers; one that answers with an error (MISCONF on a full disk, LOADING)
    is still there."""
    try:
        conn.ping()
        return False
    except (redis.BusyLoadingError, redis.ResponseError):
        return False
    except (redis.RedisError, OSError):
        return True


def _write_refusal(conn: redis.Redis, url: str) -> str | None:
    """The one line for a server that refuses writes it cannot persist (PING answers MISCONF), else None."""
    try:
        conn.ping()
    except redis.ResponseError as exc:
        return persistence_problem(exc, _data_folder(conn, url), url)
    except (redis.RedisError, OSError):
        return None
    return None


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
