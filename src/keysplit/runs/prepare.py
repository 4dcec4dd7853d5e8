"""Before a run of the word-count topology: its options, the checks that refuse what cannot run on this machine, and the
feed of records loaded into Redis (:func:`load_feed`, which a ``sparse submit``-ted topology reads too)."""

from __future__ import annotations

import os
import re
import resource
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import redis

from keysplit.datasets import Dataset, encode_record, open_dataset, require_records
from keysplit.errors import KeysplitError
from keysplit.fingerprint import StreamFingerprint
from keysplit.groupings import check_grouping
from keysplit.runs.faults import check_kills, parse_kill
from keysplit.runs.records import check_run_id
from keysplit.sizes import MAX_CPU_DELAY_MS
from keysplit.specs import parse_spec
from keysplit.storm.components import AGGREGATOR, COUNTER, ROUTER, SPOUT, TOPK
from keysplit.storm.cpu_delay import DEFAULT_CPU_DELAY_MS
from keysplit.storm.feed import create_group
from keysplit.storm.keys import RunKeys
from keysplit.storm.settings import RunSettings
from keysplit.storm.window import DEFAULT_MAX_PENDING
from keysplit.stream import DEFAULT_BATCH, DEFAULT_BATCH_MS

#: Records per pipelined XADD batch when loading the feed.
LOAD_BATCH = 2000


class RunTimeout(KeysplitError):
    """``--timeout`` passed (set-up included); the message says how far the run got."""


#: ``keysplit run --startup-timeout``: seconds a starting task may show no sign of life (no CPU time, nothing on
#: stderr) before it counts as hung (local/liveness.py); Storm's supervisor.worker.start.timeout.secs.
DEFAULT_STARTUP_TIMEOUT = 120.0



#: Resident memory of one task process (a Python interpreter with streamparse and redis loaded), measured
#: at 25-35 MB; the size check counts this much per task.
TASK_MEMORY_MB = 32


#: File descriptors the runner holds per task (its stdin and stdout pipes, its log file).
TASK_FDS = 3


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
    cpu_delay_ms: float = DEFAULT_CPU_DELAY_MS
    flush_secs: float = 1.0
    max_pending: int = DEFAULT_MAX_PENDING
    message_timeout: int = 30
    top_k: int = 10
    timeout: float = 600.0
    run_id: str | None = None
    kills: tuple[str, ...] = ()  # fault injection: COMPONENT[:INDEX]@FRACTION (runs/faults.py)
    delivery: str = "exactly-once"  # or at-least-once: storm/exactly_once.py
    split: str = "shuffle"  # how lines are dealt to the routers (keysplit.stream.source_of), as in simulate
    route: str = "fields"  # keysplit.route: fields (every Storm release) or direct (Storm < 2.6)
    storm_env: str = "local"  # the config.json env whose options and log settings the components receive
    worker_processes: int = 1  # topology.workers
    rate: float | None = None  # open loop: words/s the spouts emit (max pending still caps); None: closed loop
    batch: int = DEFAULT_BATCH  # words a router sends a counter in one tuple at most (1: one a word)
    batch_ms: float = DEFAULT_BATCH_MS  # ... or after this long (storm/router.py)
    aimd: tuple[float, float, int] = (1.0, 0.5, 1)  # the spouts' adaptive window: increase, decrease, min
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT  # a starting task silent this long hangs (local/liveness.py)


@dataclass
class Prepared:
    """A validated run: the dataset opened, the grouping's canonical spec, the settings for the topology."""

    options: RunOptions
    dataset: Dataset
    grouping: str
    settings: RunSettings


def new_run_id(grouping: str) -> str:
    """``<UTC time>-<grouping name>-<6 hex>``, e.g. ``20260101T120000-pkg-1a2b3c``."""
    name = re.sub(r"[^a-z0-9]+", "", parse_spec(grouping)[0]) or "run"
    return f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{name}-{secrets.token_hex(3)}"


def prepare_run(opts: RunOptions) -> Prepared:
    """Check everything that can be checked before anything starts; one-line KeysplitErrors."""
    if opts.timeout <= 0:
        raise KeysplitError(f"--timeout must be positive, got {opts.timeout}")
    if opts.max_pending < 1:
        raise KeysplitError(f"--max-pending must be at least 1, got {opts.max_pending}")
    if opts.message_timeout < 1:
        raise KeysplitError(f"--message-timeout must be at least 1 second, got {opts.message_timeout}")
    if opts.rate is not None and not opts.rate > 0:
        raise KeysplitError(f"--rate must be positive, got {opts.rate}")
    if not 0 <= opts.cpu_delay_ms <= MAX_CPU_DELAY_MS:
        raise KeysplitError(f"--cpu-delay must be between 0 and {MAX_CPU_DELAY_MS:,.0f} ms, got {opts.cpu_delay_ms}")
    kills = [parse_kill(k) for k in opts.kills]
    if opts.run_id is not None:
        check_run_id(opts.run_id)
    counter_tasks = opts.counter_tasks or opts.workers
    check_task_count(opts.spouts + opts.sources + max(counter_tasks, opts.workers) + opts.aggregators + 1)
    grouping = check_grouping(opts.grouping, opts.workers, opts.sources)
    if parse_spec(opts.grouping)[1].get("load") == "global":
        raise KeysplitError(f"{opts.grouping}: load=global is the simulator's oracle (one load vector shared by "
                            "all sources); the topology's routers are separate processes, use load=local or probe=T")
    settings = RunSettings(
        run_id=opts.run_id or new_run_id(opts.grouping), grouping=opts.grouping, spouts=opts.spouts,
        sources=opts.sources, workers=opts.workers, counter_tasks=counter_tasks, aggregators=opts.aggregators,
        cpu_delay_ms=opts.cpu_delay_ms, flush_secs=opts.flush_secs, top_k=opts.top_k, route=opts.route,
        split=opts.split, rate=opts.rate or 0.0, delivery=opts.delivery, batch=opts.batch, batch_ms=opts.batch_ms,
        aimd_increase=opts.aimd[0], aimd_decrease=opts.aimd[1], aimd_min=opts.aimd[2],
    )
    check_kills(kills, {SPOUT: opts.spouts, ROUTER: opts.sources, COUNTER: counter_tasks,
                        AGGREGATOR: opts.aggregators, TOPK: 1}, opts.worker_processes)
    if os.path.exists("config.json"):  # the env whose conf the components will get must exist (--env)
        from keysplit.local.submission import read_env

        read_env("config.json", opts.storm_env)
    elif opts.storm_env != "local":  # without config.json only the default env is known: a name would be ignored
        raise KeysplitError(f"--env {opts.storm_env}: there is no config.json in {os.getcwd()} to take it from "
                            "(run from the project folder, or drop --env)")
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


#: The smallest word-count topology: one spout, router, counter, aggregator and top-k task.
MIN_TASKS = 5


def check_task_count(tasks: int) -> None:
    """Refuse a topology this machine cannot start, before anything is loaded or spawned."""
    limit, why = machine_task_limit()
    if tasks > limit and limit < MIN_TASKS:  # no size can run here: lowering -S or -W is no advice
        raise KeysplitError(f"this machine can start about {max(limit, 0):,} task processes ({why}), fewer than the "
                            f"{MIN_TASKS} of the smallest topology: raise that limit (e.g. `ulimit -n 4096`) or free "
                            "memory")
    if tasks > limit:
        raise KeysplitError(f"this run needs {tasks:,} task processes (spouts + routers + counters + aggregators + "
                            f"top-k); this machine can start about {max(limit, 0):,} ({why}): lower -S, -W, "
                            "--counter-tasks, -A or --spouts")


def check_topology_tasks(parallelism: dict[str, int]) -> None:
    """Refuse a topology file's sizes this machine cannot start (``par=1000`` began 1,000 processes of 50 MB on a
    23 GB machine), naming its biggest component, before anything is loaded or spawned: the word count's check
    (:func:`check_task_count`) for any topology."""
    tasks = sum(parallelism.values())
    limit, why = machine_task_limit()
    if tasks > limit:
        biggest = sorted(parallelism.items(), key=lambda kv: -kv[1])
        shares = ", ".join(f"{name} x{n:,}" for name, n in biggest[:3]) + (", ..." if len(biggest) > 3 else "")
        raise KeysplitError(f"this topology needs {tasks:,} task processes ({shares}); this machine can start about "
                            f"{max(limit, 0):,} ({why}): lower the par of {biggest[0][0]!r}"
                            + (" or raise that limit" if limit < MIN_TASKS else ""))


def file_state(dataset: Dataset) -> tuple[int, int, int] | None:
    """A dataset file's (inode, size, modification time in ns), to see whether it changed while it was read (None:
    a generated dataset, or a file gone)."""
    path = getattr(dataset, "path", None)
    try:
        st = os.stat(path) if path else None
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns) if st else None


def load_feed(
    conn: redis.Redis, keys: RunKeys, dataset: Dataset, *, with_frequencies: bool = False,
    progress: Callable[[int], None] | None = None, deadline: float | None = None,
    deal: Callable[[int, str], int] | None = None, fingerprint: StreamFingerprint | None = None,
) -> tuple[int, int]:
    """Append every record with at least one key to the run's feed stream (pipelined); returns (lines,
    words). Records without keys are skipped, as the simulator skips them. ``with_frequencies`` also stores
    the exact key counts (for groupings that need a full pass). ``deal(index, first key)`` gives each line the router
    (source) the simulator deals its record to, stored with the line for the spout (``d``). ``fingerprint`` is fed
    every record read (those without keys too, as ``Dataset.sha256`` reads them): the fingerprint of what was
    loaded, whatever the file holds afterwards."""
    words = 0
    frequencies: Counter = Counter()

    def entries() -> Iterator[dict]:
        nonlocal words
        lines = 0
        for index, record in enumerate(dataset.records()):
            if fingerprint is not None:
                fingerprint.add(*record)
            if not record[1]:
                continue
            entry = {"r": encode_record(record), "n": index, "s": lines}
            if deal is not None:
                entry["d"] = deal(index, record[1][0])
            lines += 1
            words += len(record[1])
            if with_frequencies:
                frequencies.update(record[1])
            yield entry

    lines = fill_feed(conn, keys, entries(), frequencies, progress=progress, deadline=deadline)
    return lines, words


#: The key of an entry given to :func:`fill_feed` that holds its stream id rather than a field (Redis's own id, the
#: time of the XADD, when absent).
ENTRY_ID = "id"


def fill_feed(conn: redis.Redis, keys: RunKeys, entries: Iterable[dict], frequencies: Counter, *,
              progress: Callable[[int], None] | None = None, deadline: float | None = None) -> int:
    """Append ``entries`` to the run's new feed stream, pipelined :data:`LOAD_BATCH` at a time (``progress`` after
    each batch; a RunTimeout past ``deadline``), then store ``frequencies`` (filled while the entries are drawn) and
    create the spouts' consumer group; returns how many entries. Both feeds are loaded so: the word count's lines
    (:func:`load_feed`) and a toolkit topology's rows (keysplit.runs.topology_run.load_rows, which names each entry's
    id, :data:`ENTRY_ID`: its line's, so that a record finds its entry)."""
    if conn.exists(keys.feed):
        raise KeysplitError(f"run {keys.run_id!r} already has a feed in Redis; choose another run id")
    count = 0
    pipe = conn.pipeline(transaction=False)
    for entry in entries:
        pipe.xadd(keys.feed, entry, id=entry.pop(ENTRY_ID, "*"))
        count += 1
        if count % LOAD_BATCH == 0:
            pipe.execute()
            if progress is not None:
                progress(LOAD_BATCH)
            if deadline is not None and time.monotonic() > deadline:
                raise RunTimeout(f"{count:,} lines loaded into the feed")
    pipe.execute()
    if progress is not None:
        progress(count % LOAD_BATCH)
    items = list(frequencies.items())
    for start in range(0, len(items), 10_000):
        conn.hset(keys.frequencies, mapping=dict(items[start:start + 10_000]))
    create_group(conn, keys)
    return count
