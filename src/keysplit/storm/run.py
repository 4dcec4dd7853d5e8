"""``keysplit run wordcount`` as a library: validate, load the feed into Redis, run the topology on the local
runner until every line is acked, and collect the run's measurements (stored in Redis under the run id).

The steps are separate functions so a cluster deployment can reuse them: :func:`load_feed` fills the feed a
``sparse submit``-ted topology reads, and :func:`collect` summarises a finished run from Redis alone.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import sys
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
from keysplit.metrics import dist_cost, imbalance_fraction, load_stddev
from keysplit.redis_server import keysplit_home
from keysplit.specs import parse_spec
from keysplit.storm.bolts import COUNTER
from keysplit.storm.feed import create_group, feed_done
from keysplit.storm.keys import RUNS, RunKeys
from keysplit.storm.latency import LatencyHistogram
from keysplit.storm.settings import WordCountSettings
from keysplit.storm.topology import wordcount_topology

#: Records per pipelined XADD batch when loading the feed.
LOAD_BATCH = 2000


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
    kill_counter_at: float | None = None  # fault injection: kill -9 counter 0 after this fraction is acked
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
    if opts.kill_counter_at is not None and not 0 < opts.kill_counter_at < 1:
        raise KeysplitError(f"--kill-counter-at must be a fraction between 0 and 1, got {opts.kill_counter_at}")
    counter_tasks = opts.counter_tasks or opts.workers
    grouping = check_grouping(opts.grouping, opts.workers, opts.sources)
    if parse_spec(opts.grouping)[1].get("load") == "global":
        raise KeysplitError(f"{opts.grouping}: load=global is the simulator's oracle (one load vector shared by "
                            "all sources); the topology's routers are separate processes, use load=local or probe=T")
    settings = WordCountSettings(
        run_id=opts.run_id or new_run_id(opts.grouping), grouping=opts.grouping, spouts=opts.spouts,
        sources=opts.sources, workers=opts.workers, counter_tasks=counter_tasks, aggregators=opts.aggregators,
        cpu_delay_ms=opts.cpu_delay_ms, flush_secs=opts.flush_secs, top_k=opts.top_k, rate=opts.rate or 0.0,
    )
    dataset = open_dataset(opts.dataset)
    require_records(dataset)
    return Prepared(opts, dataset, grouping, settings)


def load_feed(
    conn: redis.Redis, keys: RunKeys, dataset: Dataset, *, with_frequencies: bool = False,
    progress: Callable[[int], None] | None = None,
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
        pipe.xadd(keys.feed, {"r": encode_record(record), "n": index})
        lines += 1
        words += len(record[1])
        if with_frequencies:
            frequencies.update(record[1])
        if lines % LOAD_BATCH == 0:
            pipe.execute()
            if progress is not None:
                progress(LOAD_BATCH)
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
        "top_k": top,
        "duration_s": duration,
        **({"grouping_stats": json.loads(grouping_stats)} if grouping_stats else {}),
    }


def start_run(
    conn: redis.Redis, prepared: Prepared, redis_url: str, *,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[WordCountSettings, RunKeys, dict[str, Any]]:
    """Load the feed and register the run in Redis (its config and ``keysplit:runs``); returns the settings
    the topology must be given, the run's keys and the summary fields known before it runs."""
    opts = prepared.options
    settings = WordCountSettings.from_conf({"keysplit.redis_url": redis_url}, base=prepared.settings)
    keys = RunKeys(settings.run_id)
    started = time.time()
    needs_pass = grouping_class(parse_spec(prepared.grouping)[0]).needs_full_pass
    loaded = [0]

    def load_progress(n: int) -> None:
        loaded[0] += n
        if progress is not None:
            progress("load", loaded[0], 0)

    lines, words = load_feed(conn, keys, prepared.dataset, with_frequencies=needs_pass, progress=load_progress)
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
        "rate": opts.rate,
        "started": started,
    }
    conn.set(keys.config, json.dumps({**base, **settings.conf(), "keysplit.redis_url": ""}))
    conn.zadd(RUNS, {settings.run_id: started})
    return settings, keys, base


def collect_run(conn: redis.Redis, run_id: str) -> dict[str, Any]:
    """Summarise a run that ran elsewhere (``sparse submit`` on a cluster) once every line is acked."""
    keys = RunKeys(run_id)
    raw = conn.get(keys.config)
    if raw is None:
        raise KeysplitError(f"no run {run_id!r} in this Redis (load it with --load-only first)")
    config = json.loads(raw)
    settings = WordCountSettings.from_conf(config)
    if not feed_done(conn, keys):
        acked = spout_metrics(conn, keys, settings.spouts)["acked"]
        raise KeysplitError(f"run {run_id} has not finished: {acked} of {config['lines']} lines acked")
    base = {k: v for k, v in config.items() if not k.startswith("keysplit.")}
    summary = collect(conn, keys, settings, base)
    conn.set(keys.summary, json.dumps(summary))
    return summary


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
    """
    from keysplit.local import LocalCluster

    opts = prepared.options
    settings, keys, base = start_run(conn, prepared, redis_url, progress=progress)
    lines = base["lines"]
    started = base["started"]

    topology = wordcount_topology(settings)
    conf = {**topology.config, "topology.name": "wordcount", "topology.max.spout.pending": opts.max_pending,
            "topology.message.timeout.secs": opts.message_timeout}
    log_dir = Path(log_dir) if log_dir else keysplit_home() / "logs" / settings.run_id
    killed = [False]

    def finished() -> bool:
        if feed_done(conn, keys):
            return True
        acked = spout_metrics(conn, keys, settings.spouts)["acked"]
        if progress is not None:
            progress("run", acked, lines)
        if opts.kill_counter_at is not None and not killed[0] and acked >= opts.kill_counter_at * lines:
            cluster.kill_task(COUNTER, 0)
            killed[0] = True
        return False

    try:
        with LocalCluster(topology, conf, cwd=os.getcwd(), python=python, log_dir=str(log_dir)) as cluster:
            cluster.start()
            # wall-clock time of tick 0: the runner sends every tick at started_at + k * T (monotonic clock)
            ticks_at = time.time() - (time.monotonic() - cluster.started_at)
            if not cluster.run_until(finished, opts.timeout, poll=0.2):
                acked = spout_metrics(conn, keys, settings.spouts)["acked"]
                raise KeysplitError(f"run {settings.run_id} did not finish within {opts.timeout:g} s "
                                    f"({acked} of {lines} lines acked); logs in {log_dir}")
            stats = cluster.stats()
            cluster.shutdown()
    except redis.RedisError as exc:
        raise KeysplitError(f"run {settings.run_id} lost its Redis connection: {exc}") from None
    summary = collect(conn, keys, settings, base)
    summary["restarts"] = _restarts(stats)
    summary["killed_counter"] = killed[0]
    summary["wall_s"] = time.time() - started
    # where the flush ticks fell relative to the first emit (the replay's --tick-phase; ticks at phase + k*T)
    summary["tick_phase_s"] = ticks_at - spout_metrics(conn, keys, settings.spouts)["first_emit"]
    conn.set(keys.summary, json.dumps(summary))
    # the feed and the per-worker key sets are large and fully summarised: drop them, keep counts and metrics
    conn.delete(keys.feed, keys.frequencies, *[keys.keys(i) for i in range(settings.counter_tasks)])
    return summary


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
    """``word<TAB>count`` lines, most frequent first (ties by word)."""
    try:
        with open(path, "w", encoding="utf-8") as fh:
            for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
                fh.write(f"{word}\t{count}\n")
    except OSError as exc:
        raise KeysplitError(f"cannot write {path}: {exc.strerror or exc}") from None
