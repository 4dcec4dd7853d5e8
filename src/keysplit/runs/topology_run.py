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

import importlib.util
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
from keysplit.datasets.readers import CsvDataset
from keysplit.errors import KeysplitError
from keysplit.groupings import grouping_class
from keysplit.home import keysplit_home, private_dir
from keysplit.metrics import imbalance_fraction
from keysplit.runs.collect import spout_metrics
from keysplit.runs.faults import Injector, check_kills, parse_kill
from keysplit.runs.prepare import RunTimeout, fill_feed
from keysplit.runs.records import mark_interrupted, reserve, set_state
from keysplit.runs.redis_server import managed_server
from keysplit.specs import parse_spec
from keysplit.storm.feed import feed_done
from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import PASSWORD_ENV, split_password
from keysplit.storm.window import DEFAULT_MAX_PENDING
from keysplit.stream import source_of
from keysplit.toolkit.contract import ROUTE_FIELD
from keysplit.toolkit.shape import run_facts
from keysplit.toolkit.specs import FeedSpoutSpec, KeyRouterSpec, MergeSpec, PartialSpec, check_topology

log = logging.getLogger("keysplit.run")


@dataclass
class LoadedTopology:
    """A user's topology class, where it came from, and the project it belongs to."""

    cls: Any
    name: str  # the class name (the topology's name, as `sparse submit -n` takes it for one file)
    path: Path
    root: Path  # the streamparse project: the folder holding topologies/ (and src/), else the file's folder

    def specs_of(self, kind: type) -> list:
        return [s for s in self.cls.specs if isinstance(s, kind)]

    @property
    def spout_names(self) -> set[str]:
        from streamparse.dsl.spout import JavaSpoutSpec, ShellSpoutSpec

        return {s.name for s in self.cls.specs if isinstance(s, (ShellSpoutSpec, JavaSpoutSpec))}

    @property
    def parallelism(self) -> dict[str, int]:
        return {s.name: s.par for s in self.cls.specs}


def load_topology(target: str) -> LoadedTopology:
    """Import ``path/to/topology.py[:ClassName]`` as streamparse would, with the project's ``src/`` importable,
    and check it (:func:`keysplit.toolkit.check_topology`); one-line errors."""
    from streamparse import Topology

    where, _, wanted = target.partition(":") if not os.path.exists(target) else (target, "", "")
    path = Path(where)
    if path.suffix != ".py":
        raise KeysplitError(f"{target}: a topology is `wordcount` or a Python file (path/to/topology.py[:Class])")
    if not path.is_file():
        raise KeysplitError(f"topology file not found: {where}")
    path = path.resolve()
    root = path.parent.parent if path.parent.name == "topologies" else path.parent
    for folder in (root / "src", root):
        if folder.is_dir() and str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    module_name = f"keysplit_topology_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except KeysplitError as exc:
        raise KeysplitError(f"{where}: {exc}") from None
    except Exception as exc:  # the user's file: say what it raised and where, in one line
        raise KeysplitError(f"cannot import {where}: {type(exc).__name__}: {exc}") from None
    found = {name: obj for name, obj in vars(module).items()
             if isinstance(obj, type) and issubclass(obj, Topology) and getattr(obj, "specs", None)
             and obj.__module__ == module_name}
    if wanted:
        if wanted not in found:
            raise KeysplitError(f"{where} has no topology class {wanted!r} (found: {', '.join(found) or 'none'})")
        name = wanted
    elif len(found) != 1:
        raise KeysplitError(f"{where} defines {len(found)} topology classes ({', '.join(found) or 'none'}); name one "
                            f"as {where}:CLASS")
    else:
        name = next(iter(found))
    loaded = LoadedTopology(found[name], name, path, root)
    check_topology(loaded.cls)
    if len(loaded.specs_of(FeedSpoutSpec)) > 1:
        raise KeysplitError(f"{where}: {name} has more than one FeedSpout; keysplit run loads one feed a run")
    return loaded


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


def check_options(loaded: LoadedTopology, opts: TopologyRunOptions) -> tuple[FeedSpoutSpec | None, Any]:
    """Everything that needs no server: the dataset against the feed spout, the kills against the components.
    Returns the feed spout and the router it deals rows to (or None)."""
    feeds = loaded.specs_of(FeedSpoutSpec)
    feed = feeds[0] if feeds else None
    if feed is None:
        if opts.dataset is not None:
            raise KeysplitError(f"--dataset is for a topology that reads keysplit's feed, and {loaded.name} has no "
                                "FeedSpout (keysplit.toolkit.FeedSpout)")
        if not opts.duration and not opts.until_idle:
            raise KeysplitError(f"{loaded.name} reads no keysplit feed, so nothing says when it is done: give "
                                "--until-idle SECS (your spouts are finite) or --duration SECS")
    else:
        if opts.dataset is None:
            raise KeysplitError(f"{loaded.name} reads keysplit's feed ({feed.name}): give --dataset "
                                "csv:FILE,key=COLUMN")
        if not isinstance(opts.dataset, CsvDataset):
            raise KeysplitError(f"--dataset {opts.dataset.spec}: a FeedSpout emits the columns of a CSV file's rows; "
                                "give csv:FILE,key=COLUMN")
        missing = [f for f in feed.row_fields if f not in opts.dataset.columns]
        if missing:
            raise KeysplitError(f"{opts.dataset.path} has no column {missing[0]!r}, which {feed.name} emits (columns: "
                                f"{', '.join(opts.dataset.columns)})")
    router = _dealt_router(loaded, feed)
    if router is not None and opts.dataset is not None and router.key != opts.dataset.key_column:
        raise KeysplitError(f"--dataset keys records by {opts.dataset.key_column!r} but {router.name} routes by "
                            f"{router.key!r}: give key={router.key} so the dataset's records are the router's keys")
    kinds = tuple(loaded.parallelism)
    kills = [parse_kill(k, kinds) for k in opts.kills]
    if kills and feed is None:
        raise KeysplitError("--kill fires when a share of the feed's rows is acked; this topology reads no feed")
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


def load_rows(conn: redis.Redis, keys: RunKeys, dataset: CsvDataset, *, sources: int, split: str,
              with_frequencies: bool, progress: Callable[[int], None] | None = None,
              deadline: float | None = None) -> int:
    """Append every row with a key to the run's feed: its columns as a JSON object (the key column as the record's
    key: cleaned as every reader cleans it), its record number, and the router it is dealt to; returns the rows."""
    frequencies: Counter = Counter()

    def entries() -> Iterator[dict]:
        for index, (record, row) in enumerate(dataset.rows()):
            key = record[1][0]
            if with_frequencies:
                frequencies[key] += 1
            yield {"r": json.dumps(row, separators=(",", ":")), "n": index, "s": index,
                   "d": source_of(index, key, sources, split)}

    return fill_feed(conn, keys, entries(), frequencies, progress=progress, deadline=deadline)


def new_run_id(name: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{name.lower()[:40]}-{secrets.token_hex(3)}"


def load_run(loaded: LoadedTopology, opts: TopologyRunOptions, conn: redis.Redis, *,
             progress: Callable[[str, int, int], None] | None = None,
             deadline: float | None = None) -> tuple[RunKeys, dict[str, Any]]:
    """Reserve a run id, load the feed (if the topology reads one) and record the run: what ``--load-only`` does
    before ``sparse submit``. Returns the run's keys and the summary fields known before it runs."""
    feed, router = check_options(loaded, opts)
    run_id = opts.run_id or new_run_id(loaded.name)
    keys = RunKeys(run_id)
    started = time.time()
    reserve(conn, keys, {"started": started, "grouping": _groupings(loaded),
                         "dataset": opts.dataset.spec if opts.dataset else ""})
    rows = 0
    try:
        if feed is not None:
            needs_pass = any(grouping_class(parse_spec(r.grouping)[0]).needs_full_pass
                             for r in loaded.specs_of(KeyRouterSpec))
            loaded_rows = [0]

            def load_progress(n: int) -> None:
                loaded_rows[0] += n
                if progress is not None:
                    progress("load", loaded_rows[0], 0)

            rows = load_rows(conn, keys, opts.dataset, sources=router.par if router else 1,  # type: ignore[arg-type]
                             split=opts.split, with_frequencies=needs_pass, progress=load_progress, deadline=deadline)
        base = {"run_id": run_id, "topology": f"{loaded.path.name}:{loaded.name}", "dataset":
                opts.dataset.spec if opts.dataset else None, "rows": rows, "delivery": opts.delivery,
                "worker_processes": opts.worker_processes, "max_pending": opts.max_pending,
                "message_timeout_secs": opts.message_timeout, "split": opts.split, "started": started,
                "components": loaded.parallelism, **run_facts(loaded.cls, opts.dataset, loaded.root)}
        conn.set(keys.config, json.dumps(base))
        set_state(conn, keys, "loaded", lines=rows, messages=rows, feed_complete=1)
    except BaseException as exc:
        mark_interrupted(conn, keys, f"{type(exc).__name__} while loading the feed: {exc}")
        raise
    return keys, base


def run_topology(loaded: LoadedTopology, opts: TopologyRunOptions, conn: redis.Redis, redis_url: str, *,
                 progress: Callable[[str, int, int], None] | None = None, log_dir: str | os.PathLike | None = None,
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
    env_config = read_env(loaded.root / "config.json", opts.storm_env) if (loaded.root / "config.json").exists() \
        else None
    remaining = deadline - time.monotonic()
    # the conf `sparse submit -e ENV -o ...` would send
    conf = submit_conf(loaded.cls, loaded.name, {
        **opts.options,
        "topology.max.spout.pending": opts.max_pending, "topology.message.timeout.secs": opts.message_timeout,
        "topology.workers": opts.worker_processes, "keysplit.run_id": run_id, "keysplit.redis_url": url,
        "keysplit.redis_password_env": PASSWORD_ENV if password else "", "keysplit.delivery": opts.delivery,
        "keysplit.local.startup.timeout.secs": max(1.0, min(60.0, remaining))}, env_config=env_config)
    log_dir = Path(log_dir) if log_dir else private_dir(keysplit_home() / "logs") / run_id
    set_state(conn, keys, "running")
    end = None if feed is not None or not opts.duration else time.monotonic() + opts.duration
    spouts = [s.name for s in loaded.cls.specs if s.name in loaded.spout_names]
    quiet = {"emitted": -1, "since": time.monotonic()}

    def idle() -> bool:
        """Every spout tree complete, and no spout emitted for --until-idle seconds (since the last change)."""
        stats = cluster.stats()
        emitted = sum(stats[s]["emitted"] for s in spouts)
        if emitted != quiet["emitted"] or any(stats[s]["pending"] for s in spouts):
            quiet.update(emitted=emitted, since=time.monotonic())
            return False
        return emitted > 0 and time.monotonic() - quiet["since"] >= opts.until_idle  # type: ignore[operator]

    def finished() -> bool:
        if injector.restart_redis_if_due():
            return False
        if feed is None:
            return time.monotonic() >= end if end is not None else idle()
        acked = spout_metrics(conn, keys, feed.par)["acked"]
        injector.fire_due(cluster, acked, rows)
        if injector.recovering(cluster):
            return False
        if progress is not None:
            progress("run", acked, rows)
        return feed_done(conn, keys)

    old_umask = os.umask(0o077)  # task logs hold the dataset's rows: 0600
    try:
        src = loaded.root / "src"
        with tempfile.TemporaryDirectory(prefix=f"keysplit-resources-{os.getpid()}-") as tmp, \
                LocalCluster(loaded.cls, conf, cwd=str(loaded.root), python=python, log_dir=str(log_dir),
                             env={PASSWORD_ENV: password} if password else {},
                             resources=str(build_resources(os.path.join(tmp, "resources"),
                                                           src if src.is_dir() else None)),
                             on_starting=injector.fire_at_start) as cluster:
            cluster.start()
            if not cluster.run_until(finished, max(0.0, deadline - time.monotonic()), poll=0.2):
                raise RunTimeout(f"{spout_metrics(conn, keys, feed.par)['acked'] if feed else 0} of {rows} rows acked")
            if router is not None:  # the routers report what they sent at their next tick
                cluster.run_until(lambda: sum(_loads(conn, keys, router.name)) >= rows, 5.0, poll=0.2)
            cluster.quiesce(timeout=5.0)
            run_summary = cluster.summary()
            tuples = {name: {k: counters[k] for k in ("emitted", "executed", "acked", "failed", "timed_out")}
                      for name, counters in cluster.stats().items()}
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
    summary["tuples"] = tuples  # per component, as Storm's UI counts them (local/cluster.py LocalCluster.stats)
    summary["kills"] = injector.fired
    summary["log_dir"] = str(log_dir)
    summary["wall_s"] = time.time() - base["started"]
    conn.set(keys.summary, json.dumps(summary))
    set_state(conn, keys, "finished", finished=time.time())
    conn.delete(keys.feed, keys.frequencies)
    return summary


def collect_run(loaded: LoadedTopology, conn: redis.Redis, run_id: str) -> dict[str, Any]:
    """The summary of a run a Storm cluster ran (after ``--load-only`` and ``sparse submit``), from Redis alone."""
    keys = RunKeys(run_id)
    raw = conn.get(keys.config)
    if raw is None:
        raise KeysplitError(f"no run {run_id!r} in this Redis (keysplit runs lists them)")
    base = json.loads(raw)
    feeds = loaded.specs_of(FeedSpoutSpec)
    summary = {**base, **summarise(conn, keys, loaded, feeds[0] if feeds else None), "worker_restarts": None,
               "task_deaths": None, "unacked_inputs": None, "task_restarts": None, "kills": [], "log_dir": None}
    if feeds and not feed_done(conn, keys):
        summary["incomplete"] = True
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
        out["routers"][spec.name] = {"grouping": meta.get("grouping", spec.grouping), "to": meta.get("to"),
                                     "key": spec.key, "sources": spec.par, "workers": len(loads), "loads": loads,
                                     "imbalance_fraction": imbalance_fraction(loads), "failed": failed}
    for spec in loaded.specs_of(PartialSpec):
        tasks = conn.hgetall(keys.stage(spec.name, "tasks"))
        held = [json.loads(tasks[str(i)]) if str(i) in tasks else {"records": 0, "keys": 0} for i in range(spec.par)]
        out["partials"][spec.name] = {"accumulator": repr(spec.accumulator),
                                      "records": [t["records"] for t in held], "keys": [t["keys"] for t in held],
                                      "failed": sum(t.get("failed", 0) for t in held)}
    for spec in loaded.specs_of(MergeSpec):
        results = conn.hlen(keys.stage(spec.name, "results"))
        lists = [json.loads(v) for v in conn.hgetall(keys.stage(spec.name, "top")).values()]
        top = sorted((tuple(item) for part in lists for item in part), key=lambda kv: (-kv[1], json.dumps(kv[0])))
        out["merges"][spec.name] = {"keys": results, "top": [list(kv) for kv in top[:spec.top]]}
    if feed is not None:
        m = spout_metrics(conn, keys, feed.par)
        duration = max(m["last_ack"] - m["first_emit"], 1e-9)
        hist = m["histogram"]
        out.update({"acked": m["acked"], "replayed": m["replayed"], "duration_s": duration,
                    "rows_per_second": m["acked"] / duration if m["acked"] else 0.0,
                    "latency_ms": hist.summary()})
    return out


def read_results(conn: redis.Redis, run_id: str, merge: str) -> dict[Any, Any]:
    """A merge stage's committed results: key -> state (as the accumulator keeps it)."""
    stored = conn.hgetall(RunKeys(run_id).stage(merge, "results"))
    return {json.loads(k): json.loads(v) for k, v in stored.items()}
