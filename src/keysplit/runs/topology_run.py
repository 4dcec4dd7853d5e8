"""``keysplit run path/to/topology.py``: any streamparse topology on the local runner, no JVM needed.

What ``sparse run`` does with Storm's local mode, done with keysplit's local runner (Storm's multi-lang protocol
spoken to the real components, one process per task): the topology file is imported as ``sparse`` imports it, its
components run from a copy of the project's ``src/`` (what ``sparse jar`` puts in the jar), with the configuration
``sparse submit -e ENV`` would send. A topology that reads keysplit's feed (:class:`keysplit.toolkit.FeedSpout`) runs
until every row of ``--dataset`` is acked; any other runs for ``--duration`` seconds. Either way the run is stored in
Redis under its id with a summary: the loads of every keyed stage (what each router sent each downstream task), the
keys each partial task held, the merged top-k, the spout's throughput and latency, restarts and kills.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from keysplit.datasets import Dataset
from keysplit.datasets.base import KEY_SEPARATOR, Record
from keysplit.datasets.readers import CsvDataset
from keysplit.errors import KeysplitError
from keysplit.groupings import grouping_class
from keysplit.home import keysplit_home, private_dir
from keysplit.metrics import imbalance_fraction
from keysplit.runs.collect import spout_metrics
from keysplit.runs.faults import Injector, check_kills, parse_kill
from keysplit.runs.prepare import DEFAULT_STARTUP_TIMEOUT, ENTRY_ID, RunTimeout, check_topology_tasks, fill_feed
from keysplit.runs.progress import RunProgress, report_run, startup_conf, watch_start
from keysplit.runs.records import mark_interrupted, reserve, set_state
from keysplit.runs.redis_server import managed_server
from keysplit.runs.topology_file import LoadedTopology
from keysplit.specs import parse_spec
from keysplit.storm.feed import feed_done
from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import PASSWORD_ENV, split_password
from keysplit.storm.window import DEFAULT_MAX_PENDING
from keysplit.stream import source_of
from keysplit.toolkit.contract import DEFAULT_ENTRY_ROWS, ENTRY_ROWS_MAX, ROUTE_FIELD, entry_id
from keysplit.toolkit.deadletter import read_dead_letters
from keysplit.toolkit.ranking import top_results
from keysplit.toolkit.shape import run_facts
from keysplit.toolkit.specs import FeedSpoutSpec, KeyRouterSpec, MergeSpec, PartialSpec, rows_a_tuple

log = logging.getLogger("keysplit.run")


@dataclass
class TopologyRunOptions:
    dataset: Dataset | None = None
    split: str = "shuffle"
    duration: float | None = None
    until_idle: float | None = None  # no feed: stop once every spout tree is complete and no spout emitted this long
    max_pending: int = DEFAULT_MAX_PENDING
    message_timeout: int = 30
    worker_processes: int = 1
    delivery: str = "exactly-once"
    timeout: float = 600.0
    kills: tuple[str, ...] = ()
    storm_env: str = "local"
    run_id: str | None = None
    options: dict[str, Any] = field(default_factory=dict)  # more -o style settings for every component
    results_out: str | None = None  # write every merge's results here (write_results) once the run is done
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT  # a starting task silent this long hangs (local/liveness.py)


def check_options(loaded: LoadedTopology, opts: TopologyRunOptions, *, local: bool = True
                  ) -> tuple[FeedSpoutSpec | None, Any]:
    """Everything that needs no server: the dataset against the feed spout, the kills against the components.
    ``local``: the run is this machine's (not ``--load-only`` for a cluster), so it must know when it is done.
    Returns the feed spout and the router it deals rows to (or None)."""
    feeds = loaded.specs_of(FeedSpoutSpec)
    feed = feeds[0] if feeds else None
    if feed is None:
        if opts.dataset is not None:
            raise KeysplitError(f"--dataset is for a topology that reads keysplit's feed, and {loaded.name} has no "
                                "FeedSpout (keysplit.toolkit.FeedSpout)")
        if local and not opts.duration and not opts.until_idle:
            raise KeysplitError(f"{loaded.name} reads no keysplit feed, so nothing says when it is done: give "
                                "--until-idle SECS (your spouts are finite) or --duration SECS")
    else:
        if opts.dataset is None:
            raise KeysplitError(f"{loaded.name} reads keysplit's feed ({feed.name}): give --dataset "
                                "csv:FILE,key=COLUMN")
        columns = dataset_columns(opts.dataset)
        missing = [f for f in feed.row_fields if f not in columns]
        if missing:
            raise KeysplitError(f"--dataset {opts.dataset.spec} has no column {missing[0]!r}, which {feed.name} emits "
                                f"(columns: {', '.join(columns)})")
    router = _dealt_router(loaded, feed)
    if router is not None and opts.dataset is not None:
        key = opts.dataset.key_column if isinstance(opts.dataset, CsvDataset) else KEYS_COLUMN
        if router.key != key:
            raise KeysplitError(f"--dataset keys records by {key!r} but {router.name} routes by {router.key!r}: "
                                + (f"give key={router.key} so the dataset's records are the router's keys"
                                   if isinstance(opts.dataset, CsvDataset) else
                                   f"route by {KEYS_COLUMN!r}, the column of a record's keys"))
    check_topology_tasks(loaded.parallelism)  # what this machine can start: before any server or process
    kinds = tuple(loaded.parallelism)
    kills = [parse_kill(k, kinds) for k in opts.kills]
    fraction = next((k for k in kills if feed is None and 0 <= k.fraction < 1), None)
    if fraction is not None:
        raise KeysplitError(f"--kill {fraction.target}@{fraction.fraction:g}: {loaded.name} reads no feed, so no "
                            "total of rows to take a share of; give @N, a number of tuple trees its spouts had "
                            f"acked (e.g. {fraction.target}@100), or @start")
    check_kills(kills, loaded.parallelism, opts.worker_processes)
    return feed, router


def _dealt_router(loaded: LoadedTopology, feed: FeedSpoutSpec | None) -> KeyRouterSpec | None:
    """The router that subscribes to the feed with a fields grouping on the route field: the feed deals rows to its
    tasks as the simulator deals records to its sources."""
    if feed is None:
        return None
    for spec in loaded.specs_of(KeyRouterSpec):
        for stream_id, grouping in spec.inputs.items():
            source = stream_id.componentId if isinstance(stream_id.componentId, str) else stream_id.componentId.name
            if source == feed.name and list(grouping.fields or []) == [ROUTE_FIELD]:
                return spec
    return None


#: The columns a FeedSpout reads from a dataset that is not a CSV file (a text file's lines, a generator's records):
#: the record's time (empty when it has none) and its keys, between tabs (one key, or a line's words:
#: ``KeyRouter.spec(key="keys", split="\t")`` routes each).
TIME_COLUMN, KEYS_COLUMN = "time", "keys"


def dataset_columns(dataset: Dataset) -> list[str]:
    """The columns a FeedSpout can emit from ``dataset``: a CSV file's own, else :data:`TIME_COLUMN` and
    :data:`KEYS_COLUMN`."""
    return list(dataset.columns) if isinstance(dataset, CsvDataset) else [TIME_COLUMN, KEYS_COLUMN]


def dataset_rows(dataset: Dataset) -> Iterator[tuple[Record, dict[str, str]]]:
    """Each record of ``dataset`` with its row by column (:func:`dataset_columns`), as a FeedSpout emits it."""
    if isinstance(dataset, CsvDataset):
        yield from dataset.rows()
        return
    for record in dataset.records():
        ts, record_keys = record
        yield record, {TIME_COLUMN: "" if ts is None else repr(ts), KEYS_COLUMN: KEY_SEPARATOR.join(record_keys)}


def load_rows(conn: redis.Redis, keys: RunKeys, dataset: Dataset, *, sources: int, split: str,
              with_frequencies: bool, entry_rows: int = 1, progress: Callable[[int], None] | None = None,
              deadline: float | None = None) -> tuple[int, int]:
    """Append every row with a key to the run's feed, up to ``entry_rows`` rows of one router in an entry (a line of
    them, as a line of the word count holds words): each row's columns as a JSON object (the key column as the
    record's key: cleaned as every reader cleans it), the entry's sequence number and the router its rows are dealt
    to (each row's, as the simulator deals records to its sources: a router reads its rows in the dataset's order);
    returns the rows, the entries and the keys (a text line's words: one each, a CSV row's: one)."""
    frequencies: Counter = Counter()
    size = max(1, min(entry_rows, ENTRY_ROWS_MAX))

    def packed(line: int, source: int, pack: list[dict], indices: list[int]) -> dict:
        # "n": the rows' places in the dataset, which name a dead letter's row (toolkit/deadletter.py)
        return {ENTRY_ID: entry_id(line), "r": json.dumps(pack, separators=(",", ":")), "n": json.dumps(indices),
                "s": line, "d": source}
    rows, messages = [0], [0]

    def entries() -> Iterator[dict]:
        held: dict[int, list[dict]] = {}  # router -> its rows not yet in an entry
        line = 0
        for index, (record, row) in enumerate(dataset_rows(dataset)):
            key = record[1][0]
            if with_frequencies:
                frequencies.update(record[1])
            rows[0] += 1
            messages[0] += len(record[1])
            source = source_of(index, key, sources, split)
            if size == 1:  # one row an entry: the row itself (records are the rows' sequence numbers)
                yield {ENTRY_ID: entry_id(line), "r": json.dumps(row, separators=(",", ":")), "n": index, "s": line,
                       "d": source}
                line += 1
                continue
            pack = held.setdefault(source, ([], []))
            pack[0].append(row)
            pack[1].append(index)
            if len(pack[0]) == size:
                yield packed(line, source, *held.pop(source))
                line += 1
        for source, pack in held.items():
            yield packed(line, source, *pack)
            line += 1

    told = [0]

    def rows_loaded(_entries: int) -> None:  # progress in rows, whatever an entry holds
        if progress is not None:
            progress(rows[0] - told[0])
            told[0] = rows[0]

    entries_loaded = fill_feed(conn, keys, entries(), frequencies, progress=rows_loaded, deadline=deadline)
    return rows[0], entries_loaded, messages[0]


def entry_rows(feed: FeedSpoutSpec, router: KeyRouterSpec | None, delivery: str) -> int:
    """Rows a feed entry holds: :data:`~keysplit.toolkit.contract.DEFAULT_ENTRY_ROWS` (at most the feed's batch) when
    the feed sends a router batches under exactly-once, else one. An entry's rows complete and replay together, so
    its rows must travel in one tuple, and under at-least-once a replay would count its other rows twice
    (toolkit/spout.py)."""
    if router is None or feed.batch == 1 or delivery != "exactly-once" or router.split is not None:
        return 1  # a router that splits a row into keys gives them places of their own (toolkit/router.py)
    return min(DEFAULT_ENTRY_ROWS, rows_a_tuple(feed.batch, delivery, DEFAULT_ENTRY_ROWS))


def new_run_id(name: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{name.lower()[:40]}-{secrets.token_hex(3)}"


def load_run(loaded: LoadedTopology, opts: TopologyRunOptions, conn: redis.Redis, *,
             progress: RunProgress | None = None,
             deadline: float | None = None, local: bool = True) -> tuple[RunKeys, dict[str, Any]]:
    """Reserve a run id, load the feed (if the topology reads one) and record the run: what ``--load-only`` does
    before ``sparse submit`` (``local`` False). Returns the run's keys and the summary fields known before it runs."""
    feed, router = check_options(loaded, opts, local=local)
    run_id = opts.run_id or new_run_id(loaded.name)
    keys = RunKeys(run_id)
    started = time.time()
    reserve(conn, keys, {"started": started, "grouping": _groupings(loaded),
                         "dataset": opts.dataset.spec if opts.dataset else ""})
    rows = entries = messages = 0
    try:
        if feed is not None:
            needs_pass = any(grouping_class(parse_spec(r.grouping)[0]).needs_full_pass
                             for r in loaded.specs_of(KeyRouterSpec))
            loaded_rows = [0]

            def load_progress(n: int) -> None:
                loaded_rows[0] += n
                if progress is not None:
                    progress("load", loaded_rows[0], 0)

            rows, entries, messages = load_rows(conn, keys, opts.dataset,  # type: ignore[arg-type]
                                      sources=router.par if router else 1, split=opts.split,
                                      with_frequencies=needs_pass, entry_rows=entry_rows(feed, router, opts.delivery),
                                      progress=load_progress, deadline=deadline)
        base = {"run_id": run_id, "topology": f"{loaded.path.name}:{loaded.name}", "topology_path": str(loaded.path),
                "dataset":
                opts.dataset.spec if opts.dataset else None, "rows": rows,
                # what the merges apply once each: the rows, or the keys of a router that splits rows into keys
                "applied_rows": messages if router is not None and router.split is not None else rows,
                # exactly-once needs the feed's record ids; a topology of its own spouts gets Storm's acking
                "delivery": opts.delivery if feed is not None else "at-least-once",
                "worker_processes": opts.worker_processes, "max_pending": opts.max_pending,
                "message_timeout_secs": opts.message_timeout, "split": opts.split, "started": started,
                "components": loaded.parallelism, **run_facts(loaded.cls, opts.dataset, loaded.root)}
        conn.set(keys.config, json.dumps(base))
        set_state(conn, keys, "loaded", lines=entries, messages=rows, feed_complete=1)
    except BaseException as exc:
        mark_interrupted(conn, keys, f"{type(exc).__name__} while loading the feed: {exc}")
        raise
    return keys, base


def run_topology(loaded: LoadedTopology, opts: TopologyRunOptions, conn: redis.Redis, redis_url: str, *,
                 progress: RunProgress | None = None, log_dir: str | os.PathLike | None = None,
                 python: str = sys.executable) -> dict[str, Any]:
    """Load the feed (if the topology reads one), run the topology until it is done, store and return the summary."""
    from keysplit.local import LocalCluster
    from keysplit.local.submission import build_resources, read_env, submit_conf

    feed, router = check_options(loaded, opts)
    deadline = time.monotonic() + opts.timeout
    injector = Injector([parse_kill(k, tuple(loaded.parallelism)) for k in opts.kills], managed_server(redis_url))
    keys, base = load_run(loaded, opts, conn, progress=progress, deadline=deadline)
    run_id, rows = keys.run_id, base["rows"]
    url, password = split_password(redis_url)
    env_config = _local_env(loaded.root / "config.json", opts.storm_env, read_env)
    # the conf `sparse submit -e ENV -o ...` would send
    conf = submit_conf(loaded.cls, loaded.name, {
        **opts.options,
        "topology.max.spout.pending": opts.max_pending, "topology.message.timeout.secs": opts.message_timeout,
        "topology.workers": opts.worker_processes, "keysplit.run_id": run_id, "keysplit.redis_url": url,
        "keysplit.redis_password_env": PASSWORD_ENV if password else "", "keysplit.delivery": opts.delivery,
        **startup_conf(opts.startup_timeout)}, env_config=env_config)
    log_dir = Path(log_dir) if log_dir else private_dir(keysplit_home() / "logs") / run_id
    set_state(conn, keys, "running")
    end = None if feed is not None or not opts.duration else time.monotonic() + opts.duration
    spouts = [s.name for s in loaded.cls.specs if s.name in loaded.spout_names]
    quiet = {"emitted": -1, "since": time.monotonic()}

    def idle() -> bool:
        """Every spout task up, every spout tree complete, and no spout emitted for --until-idle seconds: since its
        last emit, and since the last spout came up. A spout whose worker is restarting, or whose initialize()
        has not returned, has not had the period to emit in: a run never ends "idle" while one is down."""
        up = cluster.spouts_up_since()
        stats = cluster.stats()
        emitted = sum(stats[s]["emitted"] for s in spouts)
        if up is None or emitted != quiet["emitted"] or any(stats[s]["pending"] for s in spouts):
            quiet.update(emitted=emitted, since=time.monotonic())
            return False
        since = max(quiet["since"], up)
        return emitted > 0 and time.monotonic() - since >= opts.until_idle  # type: ignore[operator]

    def finished() -> bool:
        if injector.restart_redis_if_due():
            return False
        if feed is None:  # kills fire at a count of the spouts' trees acked (check_options refuses fractions)
            injector.fire_due(cluster, sum(cluster.stats()[s]["acked"] for s in spouts), None)
            if injector.recovering(cluster):
                return False
            return time.monotonic() >= end if end is not None else idle()
        metrics = spout_metrics(conn, keys, feed.par)
        injector.fire_due(cluster, metrics["rows_acked"], rows)
        if injector.recovering(cluster):
            return False
        report_run(progress, metrics, rows)
        return feed_done(conn, keys)

    old_umask = os.umask(0o077)  # task logs hold the dataset's rows: 0600
    try:
        src = loaded.root / "src"
        left_out: list[tuple[str, str]] = []
        with tempfile.TemporaryDirectory(prefix=f"keysplit-resources-{os.getpid()}-") as tmp, \
                LocalCluster(loaded.cls, conf, cwd=str(loaded.root), python=python, log_dir=str(log_dir),
                             env={PASSWORD_ENV: password} if password else {},
                             resources=str(build_resources(os.path.join(tmp, "resources"),
                                                           src if src.is_dir() else None, left_out=left_out)),
                             on_starting=watch_start(deadline, progress, injector.fire_at_start)) as cluster:
            for path, why in left_out:  # what the jar would leave out too (local/source_tree.py); dotfiles unsaid
                if not why.startswith("a hidden"):
                    log.warning("%s is not in the workers' copy of src/: %s", src / path, why)
            if not cluster.run_until(finished, max(0.0, deadline - time.monotonic()), poll=0.2):
                acked = spout_metrics(conn, keys, feed.par)["rows_acked"] if feed else 0
                raise RunTimeout(f"{acked} of {rows} rows acked")
            if router is not None:  # the routers report what they sent at their next tick
                routed = base.get("applied_rows", rows)  # a router that splits rows routes each of their keys
                cluster.run_until(lambda: sum(_loads(conn, keys, router.name)) >= routed, 5.0, poll=0.2)
            cluster.quiesce(timeout=5.0)
            run_summary = cluster.summary()
            measured = cluster.spout_throughput(spouts) if feed is None else {}  # the feed's own are in Redis
            stats = cluster.stats()
            tuples = {name: {k: counters[k] for k in ("emitted", "executed", "acked", "failed", "timed_out")}
                      for name, counters in stats.items()}
            forgotten = {name: counters["forgotten"] for name, counters in stats.items()}
            cluster.shutdown()
    except RunTimeout as exc:
        mark_interrupted(conn, keys, f"--timeout: {exc}")
        raise KeysplitError(f"run {run_id} did not finish within --timeout ({exc}); logs in {log_dir}") from None
    except BaseException as exc:
        mark_interrupted(conn, keys, f"{type(exc).__name__} while running: {exc}")
        raise
    finally:
        os.umask(old_umask)
    summary = {**base, **summarise(conn, keys, loaded, feed)}
    summary.update({k: run_summary[k] for k in ("worker_restarts", "task_deaths", "unacked_inputs",
                                                "task_restarts")})
    summary.update(measured)
    summary["tuples"] = tuples  # per component, as Storm's UI counts them (local/cluster.py LocalCluster.stats)
    # a user's spout that died with trees pending: no ack or fail reaches it for them, and whether it emits their
    # tuples again is up to its source (keysplit's feed does: it takes them back from Redis, so it is left out)
    feeds = {f.name for f in loaded.specs_of(FeedSpoutSpec)}
    summary["forgotten_trees"] = {name: forgotten[name] for name in spouts
                                  if name not in feeds and forgotten.get(name)}
    summary["kills"] = injector.fired
    summary["log_dir"] = str(log_dir)
    summary["wall_s"] = time.time() - base["started"]
    mark_topology_totals(summary)
    conn.set(keys.summary, json.dumps(summary))
    set_state(conn, keys, "finished", finished=time.time())
    conn.delete(keys.feed, keys.frequencies)
    if opts.results_out:
        _results_out(conn, keys, loaded, summary, opts.results_out)
    return summary


def _local_env(config_file: Path, env: str, read_env: Callable[[Path, str], dict]) -> dict | None:
    """The config.json env a run on this machine sends its components: None without a config.json, or when the
    default env ``local`` is not one of its envs (a project whose config.json names only its cluster, as the guide
    writes one); any other env it must have (``read_env``'s one-line error)."""
    if not config_file.exists():
        return None
    if env == "local":
        try:
            envs = json.loads(config_file.read_text(encoding="utf-8")).get("envs")
        except (OSError, ValueError, AttributeError):
            envs = None  # read_env says what is wrong with the file
        if isinstance(envs, dict) and "local" not in envs:
            return None
    return read_env(config_file, env)


def collect_run(loaded: LoadedTopology, conn: redis.Redis, run_id: str, *, results_out: str | None = None
                ) -> dict[str, Any]:
    """The summary of a run a Storm cluster ran (after ``--load-only`` and ``sparse submit``), from Redis alone;
    ``results_out``: write every merge's results there too (:func:`write_results`)."""
    keys = RunKeys(run_id)
    raw = conn.get(keys.config)
    if raw is None:
        raise KeysplitError(f"no run {run_id!r} in this Redis (keysplit runs lists them)")
    base = json.loads(raw)
    feeds = loaded.specs_of(FeedSpoutSpec)
    # keysplit's components count their own process starts (toolkit/runtime.py connect): the starts beyond one per
    # task are restarts; which worker went down and which task died first are in Storm's UI and logs, not Redis
    starts = {task: int(n) for task, n in conn.hgetall(keys.starts).items()}
    summary = {**base, **summarise(conn, keys, loaded, feeds[0] if feeds else None), "worker_restarts": None,
               "task_deaths": None, "unacked_inputs": None, "kills": [], "log_dir": None,
               "task_restarts": sum(n - 1 for n in starts.values()) if starts else None,
               "restarting": {task: n for task, n in sorted(starts.items()) if n > 1}}
    if feeds and not feed_done(conn, keys):
        summary["incomplete"] = True
    else:
        mark_topology_totals(summary)
    if results_out:
        _results_out(conn, keys, loaded, summary, results_out)
    return summary


def _groupings(loaded: LoadedTopology) -> str:
    return ", ".join(f"{r.name}={r.grouping}" for r in loaded.specs_of(KeyRouterSpec)) or "none"


def _loads(conn: redis.Redis, keys: RunKeys, component: str) -> list[int]:
    stored = conn.hgetall(keys.stage(component, "loads"))
    meta = conn.hgetall(keys.stage(component, "meta"))
    workers = int(meta.get("workers", 0)) or (max(map(int, stored), default=-1) + 1)
    return [int(stored.get(str(w), 0)) for w in range(workers)]


def summarise(conn: redis.Redis, keys: RunKeys, loaded: LoadedTopology, feed: FeedSpoutSpec | None) -> dict[str, Any]:
    """What the run measured, from Redis: per router its loads, per partial stage the keys each task held, per merge
    its results and top-k, and the feed's throughput and complete latency."""
    out: dict[str, Any] = {"routers": {}, "partials": {}, "merges": {}}
    for spec in loaded.specs_of(KeyRouterSpec):
        meta = conn.hgetall(keys.stage(spec.name, "meta"))
        loads = _loads(conn, keys, spec.name)
        failed = sum(int(v) for v in conn.hgetall(keys.stage(spec.name, "failed")).values())
        # rows a follower router decided without the leader's shared state for their period (0: simulate's loads)
        unsynced = int(conn.get(keys.stage(spec.name, "grouping_unsynced")) or 0)
        out["routers"][spec.name] = {"grouping": meta.get("grouping", spec.grouping), "to": meta.get("to"),
                                     "key": spec.key, "sources": spec.par, "workers": len(loads), "loads": loads,
                                     "imbalance_fraction": imbalance_fraction(loads), "failed": failed,
                                     "unsynced": unsynced}
    for spec in loaded.specs_of(PartialSpec):
        tasks = conn.hgetall(keys.stage(spec.name, "tasks"))
        held = [json.loads(tasks[str(i)]) if str(i) in tasks else {"records": 0, "keys": 0} for i in range(spec.par)]
        out["partials"][spec.name] = {"accumulator": repr(spec.accumulator),
                                      "records": [t["records"] for t in held], "keys": [t["keys"] for t in held],
                                      "failed": sum(t.get("failed", 0) for t in held)}
    for spec in loaded.specs_of(MergeSpec):
        results = conn.hlen(keys.stage(spec.name, "results"))
        lists = [json.loads(v) for v in conn.hgetall(keys.stage(spec.name, "top")).values()]
        top = top_results((tuple(item) for part in lists for item in part), spec.top)
        out["merges"][spec.name] = {"keys": results, "top": [list(kv) for kv in top]}
    out["dead_letters"] = read_dead_letters(conn, keys)  # rows the user's code refused N times (toolkit/deadletter.py)
    _loads_once(conn, keys, loaded, out)
    if feed is not None:
        m = spout_metrics(conn, keys, feed.par)
        duration = max(m["last_ack"] - m["first_emit"], 1e-9)
        hist = m["histogram"]
        out.update({"acked": m["rows_acked"], "entries_acked": m["acked"], "replayed": m["replayed"],
                    "duration_s": duration, "rows_per_second": m["rows_acked"] / duration if m["acked"] else 0.0,
                    "latency_ms": hist.summary()})
    return out


def _loads_once(conn: redis.Redis, keys: RunKeys, loaded: LoadedTopology, out: dict[str, Any]) -> None:
    """Under exactly-once, each merge counts the rows whose states it applied, by the partial task they came from
    (toolkit/commit.py): a row once, however often a fault replayed it. Per router in front of such a partial
    stage, ``loads_once`` is that count per task (what each task did for the result; ``loads`` also counts what
    replays sent again), and per merge ``committed`` the rows applied."""
    for merge in loaded.specs_of(MergeSpec):
        stored = conn.hgetall(keys.stage(merge.name, "committed"))
        if not stored:
            continue
        partial = merge.partial
        once = [int(stored.get(str(i), 0)) for i in range(partial.par)]
        out["merges"][merge.name]["committed"] = sum(once)
        router = out["routers"].get(partial.router.name)
        if router is not None and router["workers"] == partial.par:
            router["loads_once"] = once


def mark_topology_totals(summary: dict[str, Any]) -> None:
    """Whether the results are exact. With keysplit's feed and exactly-once delivery each merge applies every row
    once: its committed rows and the dead letters add up to the rows fed, else ``mismatch`` (with a warning). At
    least once (a user's spouts, or ``keysplit.delivery=at-least-once``), a replay may count a row again, so after
    any replay the results are only known to be at least right."""
    if summary.get("delivery") == "exactly-once" and summary.get("dataset"):
        letters = len(summary.get("dead_letters") or [])
        counts = [m.get("committed", 0) for m in summary["merges"].values()]
        fed = summary.get("applied_rows", summary["rows"])
        exact = bool(counts) and all(n + letters == fed for n in counts)
        summary["totals"] = "exact" if exact else "mismatch"
        if not exact:
            log.warning("run %s: the merges applied %s rows (and %d dead letters), but the feed has %d",
                        summary["run_id"], counts, letters, fed)
    else:
        summary["totals"] = "exact" if not summary.get("replayed") else "at-least"


def _results_out(conn: redis.Redis, keys: RunKeys, loaded: LoadedTopology, summary: dict[str, Any], path: str
                 ) -> None:
    """Write the results and name the file in the summary (stored too, for ``keysplit runs show``); a failure goes
    in the summary's ``results_out_error`` (the summary is still shown: ``keysplit run`` then exits 2), saying that
    the results are safe in Redis and how to write them again."""
    try:
        summary["results_out"] = write_results(conn, keys.run_id, loaded, path)
    except KeysplitError as exc:
        summary["results_out_error"] = (f"{exc}; the run finished and its results are safe in Redis: write them with "
                                        f"`keysplit run {loaded.path} --collect {keys.run_id} --results-out FILE`")
        return
    if conn.exists(keys.summary):
        conn.set(keys.summary, json.dumps(summary))


def write_results(conn: redis.Redis, run_id: str, loaded: LoadedTopology, path: str) -> str:
    """Every key's final result of every merge stage, as CSV (``key,result``; ``merge,key,result`` when there are
    several merges), results computed with the topology's accumulator from the committed states; numbers and text
    as they are, other results as JSON. Keys in the order of their JSON text. Written whole or not at all; returns
    the file's absolute path."""
    import csv

    from keysplit.outputs import atomic_file

    merges = loaded.specs_of(MergeSpec)
    with atomic_file(path, "--results-out") as fh:
        out = csv.writer(fh, lineterminator="\n")
        out.writerow(["merge", "key", "result"] if len(merges) > 1 else ["key", "result"])
        for spec in merges:
            stored = conn.hgetall(RunKeys(run_id).stage(spec.name, "results"))
            for text in sorted(stored):
                try:  # the user's code: a result it cannot give is one line, never a traceback
                    result = spec.partial.accumulator.result(json.loads(stored[text]))
                except Exception as exc:
                    raise KeysplitError(f"--results-out: {spec.partial.accumulator!r}'s result raised "
                                        f"{type(exc).__name__}: {exc} on key {text} of merge {spec.name}") from None
                cell = result if isinstance(result, (int, float, str)) and not isinstance(result, bool) \
                    else json.dumps(result)
                out.writerow([*([spec.name] if len(merges) > 1 else []), json.loads(text), cell])
    return os.path.abspath(path)


def read_results(conn: redis.Redis, run_id: str, merge: str) -> dict[Any, Any]:
    """A merge stage's committed results: key -> state (as the accumulator keeps it)."""
    stored = conn.hgetall(RunKeys(run_id).stage(merge, "results"))
    return {json.loads(k): json.loads(v) for k, v in stored.items()}
