"""``keysplit run``: run a Storm topology locally (the word count, or your streamparse topology file) and measure it.

The word-count / top-k topology on this machine, measured like PKG §6 (Q5); a topology file goes to
keysplit.commands.run_topology."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections.abc import Iterator

from keysplit.cli import command_summary
from keysplit.commands.common import (
    Stopped,
    add_redis_options,
    check_results_out,
    check_results_writable,
    cpu_delay,
    positive_float,
    positive_int,
    print_json,
    print_table,
    redis_url,
    stop_on_signals,
)
from keysplit.commands.knobs import add_shared_knobs, rate
from keysplit.commands.run_status import RunStatus
from keysplit.commands.run_topology import run_seconds
from keysplit.commands.simulate import GROUPINGS_EPILOG, GroupingsHelpFormatter
from keysplit.datasets import open_dataset
from keysplit.errors import KeysplitError
from keysplit.redis_client import redact
from keysplit.runs.collect import collect_run, read_counts, stored_run, write_counts
from keysplit.runs.faults import describe_kills
from keysplit.runs.prepare import DEFAULT_STARTUP_TIMEOUT, RunOptions, prepare_run
from keysplit.runs.records import check_run_id
from keysplit.runs.redis_server import session
from keysplit.runs.wordcount import resume_run, run_wordcount, start_run
from keysplit.storm.cpu_delay import DEFAULT_CPU_DELAY_MS
from keysplit.storm.exactly_once import DELIVERIES
from keysplit.storm.keys import RunKeys
from keysplit.stream import SPLITS

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Run a streamparse topology on this machine with no JVM: one process per task, Storm's "
        "multi-lang protocol.\n\n"
        "  wordcount            keysplit's word-count / top-k topology: loads --dataset into Redis and runs until\n"
        "                       every line is acked; prints throughput, complete latency, per-worker loads,\n"
        "                       imbalance, memory and the top-k (stored under the run id for `keysplit compare`)\n"
        "  path/to/topology.py  your streamparse topology (keysplit.toolkit): runs until every row of --dataset is\n"
        "                       acked when it reads keysplit's feed (FeedSpout), else --until-idle or --duration;\n"
        "                       prints each keyed stage's loads and results. Only the options Storm has apply\n"
        "                       (--max-pending, --message-timeout, --worker-processes, --kill, --delivery, ...).",
        epilog=GROUPINGS_EPILOG + "\n\nexamples:\n  keysplit run wordcount --grouping pkg --dataset "
        "zipf:z=1.4,keys=10000,messages=20000,seed=1 --workers 8 --cpu-delay 2\n"
        "  keysplit run topologies/pageviews.py --dataset csv:views.csv,key=page --worker-processes 2",
        formatter_class=GroupingsHelpFormatter,
    )
    p.add_argument("topology", metavar="TOPOLOGY",
                   help="wordcount (keysplit's word-count / top-k topology), or your streamparse topology's file, "
                   "path/to/topology.py (docs/guides/your-topology.md): the class streamparse's loader finds, as "
                   "sparse submit deploys it")
    p.add_argument("--duration", type=run_seconds, metavar="SECS",
                   help="a topology file without keysplit's feed: run this long, then stop")
    p.add_argument("--until-idle", type=run_seconds, metavar="SECS",
                   help="a topology file without keysplit's feed: stop once every spout tuple's tree is complete "
                   "and no spout emitted for SECS (finite spouts: a test of your topology)")
    p.add_argument("--grouping", "-g", metavar="G", help="grouping spec, e.g. pkg, pkg:d=4, kg, sg (required)")
    p.add_argument("--dataset", metavar="SPEC", help="dataset spec (see `keysplit datasets --help`; required)")
    p.add_argument("--sources", "-S", type=positive_int, default=5, metavar="S", help="router tasks (default 5)")
    p.add_argument("--workers", "-W", type=positive_int, default=10, metavar="W",
                   help="workers the grouping chooses among (default 10)")
    p.add_argument("--counter-tasks", type=positive_int, metavar="N",
                   help="counter tasks (default W; W must not exceed it)")
    p.add_argument("--cpu-delay", type=cpu_delay, default=DEFAULT_CPU_DELAY_MS, metavar="MS",
                   help="per-word work at the counters in ms, a sleep (the paper's CPU delay; default "
                   f"{DEFAULT_CPU_DELAY_MS:g}, as keysplit replay's; 0 measures the machine's ceiling)")
    p.add_argument("--split", choices=SPLITS, default="shuffle",
                   help="how lines reach the routers (sources), as `keysplit simulate --split` deals records: "
                   "round-robin (shuffle, default) or by the first key's hash (key)")
    add_shared_knobs(p)  # -A, --spouts, --flush, --max-pending, --message-timeout, --batch(-ms), as keysplit replay
    p.add_argument("--rate", type=rate, metavar="MSG_PER_S",
                   help="open loop: the spouts emit this many words (messages) per second, line by line "
                   "(a topology file's feed: rows per second), --max-pending still a cap (default: closed loop, as "
                   "fast as max pending allows)")
    p.add_argument("--top", type=positive_int, default=10, metavar="K", help="k of the top-k (default 10)")
    add_redis_options(p, "Redis URL (default: a project-managed server under .keysplit/)")
    p.add_argument("--run-id", metavar="ID", help="run id: up to 100 letters, digits, '.', '_', '-'; a new one "
                   "(ids of finished runs are never reused; default: time-grouping-random)")
    p.add_argument("--timeout", type=positive_float, default=600.0, metavar="SECS",
                   help="give up when the run has not finished after this long, loading the feed and starting "
                   "the tasks included; the run is then interrupted and can be resumed (default 600)")
    p.add_argument("--startup-timeout", type=positive_float, default=DEFAULT_STARTUP_TIMEOUT, metavar="SECS",
                   help="a task that has not answered its multi-lang handshake and shows no sign of life (no CPU "
                   "time, nothing on stderr) for this long hangs, and the run stops naming it; a start that is slow "
                   "but busy (a loaded machine) is waited for, within --timeout (keysplit.local.startup.timeout."
                   f"secs; default {DEFAULT_STARTUP_TIMEOUT:g}, as Storm's supervisor.worker.start.timeout.secs)")
    p.add_argument("--results-out", "--counts-out", dest="counts_out", metavar="FILE",
                   help="also write every key's final result: the word count's totals as word<TAB>count lines, most "
                   "frequent first; a topology file's merge results as CSV rows key,result (a merge column first "
                   "when it has several merges; a result that is not a number as JSON). Written whole or not at "
                   "all, never over the dataset; the summary names it")
    p.add_argument("--resume", metavar="RUN_ID",
                   help="continue an interrupted run (Ctrl-C, SIGTERM, --timeout, a crash) with the settings it "
                   "was started with: its pending lines are replayed, then the rest of its feed")
    p.add_argument("--kill", action="append", default=[], metavar="COMPONENT[:INDEX]@FRACTION",
                   help="fault injection, repeatable: kill -9 a task (feed, router, counter, aggregator, topk; task "
                   "INDEX, default 0), a worker process (worker:INDEX) or the managed Redis server (redis; restarted "
                   "a second later from its append-only file) once FRACTION of the lines is acked, or a task or "
                   "worker during start-up with @start (its worker is relaunched); @N, a whole number: once N "
                   "lines are acked (a topology file without keysplit's feed: N of its spouts' tuple trees), "
                   "e.g. --kill counter@0.3 --kill redis@0.6 --kill router@start")
    p.add_argument("--delivery", choices=DELIVERIES, default=DELIVERIES[0],
                   help="exactly-once (default): every word counted once whatever crashes, timeouts or replays "
                   "happen; at-least-once: Storm's plain acking, a replayed line may be counted twice in part")
    p.add_argument("--route", choices=["fields", "direct"], default="fields",
                   help="how the router reaches the counter task the grouping chose (keysplit.route): fields "
                   "(default; works on every Storm release) or direct (direct emits; Storm < 2.6 only)")
    p.add_argument("--env", default="local", metavar="NAME",
                   help="config.json env (in the working directory) whose options and log settings the components "
                   "receive, as `sparse submit -e NAME` sends them (default local)")
    p.add_argument("--worker-processes", type=positive_int, default=1, metavar="N",
                   help="topology.workers: worker processes the tasks are spread over; a task that dies takes "
                   "its worker's other tasks down with it, as on Storm (default 1)")
    p.add_argument("--aimd-increase", type=positive_float, default=1.0, metavar="N",
                   help="keysplit.aimd_increase: lines each spout's in-flight window grows by per window of acks "
                   "(default 1)")
    p.add_argument("--aimd-decrease", type=positive_float, default=0.5, metavar="F",
                   help="keysplit.aimd_decrease: the factor a message timeout cuts that window by, in (0, 1]; 1 "
                   "keeps Storm's fixed --max-pending (default 0.5)")
    p.add_argument("--aimd-min", type=positive_int, default=1, metavar="N",
                   help="keysplit.aimd_min: the fewest lines a spout keeps in flight (default 1)")
    p.add_argument("--load-only", action="store_true",
                   help="only load the dataset into the run's feed and print the run id (with --json: the id, lines, "
                   "messages and Redis URL), for `sparse submit`")
    p.add_argument("--collect", metavar="RUN_ID",
                   help="summarise a run that a Storm cluster finished (after --load-only and `sparse submit`)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=run)
    p.set_defaults(parser_defaults={a.dest: a.default for a in p._actions})


def run(args: argparse.Namespace) -> int:
    """SIGTERM and SIGHUP stop a run the way Ctrl-C does: tasks stopped, the run marked interrupted (it can
    be resumed), the managed Redis server's lease released; one line, and the shell's status for the signal."""
    try:
        with stop_on_signals():
            return _run(args)
    except (Stopped, KeyboardInterrupt) as exc:
        name, status = (str(exc), exc.status) if isinstance(exc, Stopped) else ("Ctrl-C", 130)
        run_id = args.resume or args.run_id  # _run sets args.resume once a new run's id is chosen
        hint = ""
        if run_id and not args.load_only and args.topology == "wordcount":
            hint = f"; continue it with `keysplit run wordcount --resume {run_id}`"
            if getattr(args, "feed_loaded", True) is False:  # stopped while loading: there is nothing to resume
                hint = (f"; its feed was not completely loaded, so it cannot be resumed: delete it with "
                        f"`keysplit runs delete {run_id}`")
        print(f"keysplit: run stopped by {name}{hint}", file=sys.stderr)
        return status


def _run(args: argparse.Namespace) -> int:
    if args.topology != "wordcount":
        from keysplit.commands.run_topology import run_file

        return run_file(args, args.parser_defaults, _progress)
    if args.duration is not None or args.until_idle is not None:
        raise KeysplitError("--duration and --until-idle are for a topology file; the word count ends when every "
                            "line is acked")
    modes = [f"--{name.replace('_', '-')}" for name in ("collect", "resume", "load_only") if getattr(args, name)]
    if len(modes) > 1:
        raise KeysplitError(f"{' and '.join(modes)} cannot be combined")
    for given in (args.collect, args.resume):
        if given:
            check_run_id(given)
    if args.collect or args.resume:
        given = [f"--{name}" for name in ("grouping", "dataset", "run_id") if getattr(args, name)]
        if given:
            raise KeysplitError(f"{modes[0]} takes the run's own settings; drop {', '.join(given)}")
        if args.counts_out:
            check_results_writable(args.counts_out)
        with session(redis_url(args)) as (conn, url):
            if args.counts_out:
                check_results_out(args.counts_out, _stored_dataset(conn, args.collect or args.resume))
            if args.collect:
                return report(args, conn, collect_run(conn, args.collect))
            with _progress(not args.json) as progress:
                summary = resume_run(conn, args.resume, url, timeout=args.timeout, progress=progress,
                                     startup_timeout=args.startup_timeout)
            return report(args, conn, summary)
    missing = [f"--{name}" for name in ("grouping", "dataset") if not getattr(args, name)]
    if missing:
        raise KeysplitError(f"keysplit run wordcount needs {' and '.join(missing)}")
    opts = RunOptions(
        grouping=args.grouping, dataset=args.dataset, sources=args.sources, workers=args.workers,
        counter_tasks=args.counter_tasks, aggregators=args.aggregators, spouts=args.spouts,
        cpu_delay_ms=args.cpu_delay, flush_secs=args.flush, max_pending=args.max_pending,
        message_timeout=args.message_timeout, top_k=args.top, timeout=args.timeout, run_id=args.run_id,
        kills=tuple(args.kill), delivery=args.delivery, route=args.route, storm_env=args.env,
        worker_processes=args.worker_processes, rate=args.rate, split=args.split, batch=args.batch,
        batch_ms=args.batch_ms, aimd=(args.aimd_increase, args.aimd_decrease, args.aimd_min),
        startup_timeout=args.startup_timeout,
    )
    prepared = prepare_run(opts)  # every check that needs no server, before anything starts
    if args.counts_out:
        check_results_out(args.counts_out, prepared.dataset)
    with session(redis_url(args)) as (conn, url):
        if args.load_only:
            _, _, base = start_run(conn, prepared, url)
            if args.json:
                print(json.dumps({"run_id": base["run_id"], "lines": base["lines"], "messages": base["messages"],
                                  "redis": redact(url)}))
            else:  # the run id alone, for RUN_ID=$(keysplit run wordcount --load-only ...)
                print(base["run_id"])
            return 0
        args.resume = prepared.settings.run_id  # what the interruption message names
        try:
            with _progress(not args.json) as progress:
                summary = run_wordcount(prepared, conn, url, progress=progress)
        except (Stopped, KeyboardInterrupt):
            args.feed_loaded = _feed_loaded(conn, RunKeys(args.resume))
            raise
        return report(args, conn, summary)


def _feed_loaded(conn, keys: RunKeys) -> bool | None:
    """Whether the run's feed was completely loaded (None: Redis cannot say), after an interruption."""
    import redis

    from keysplit.redis_client import fresh_connections

    try:  # the signal may have left a reply unread on a pooled connection
        return bool(fresh_connections(conn).hget(keys.record, "feed_complete"))
    except (redis.RedisError, OSError):
        return None


@contextlib.contextmanager
def _progress(enabled: bool = True, unit: str = "line") -> Iterator[RunStatus]:
    """The run's status line on a terminal (commands/run_status.py): loading, tasks starting, acked and rate."""
    with RunStatus(unit, enabled) as status:
        yield status


def report(args: argparse.Namespace, conn, summary: dict) -> int:
    """Print the summary (table or ``--json``), then write ``--counts-out``: a file that cannot be written (a full
    disk) after a finished run says where the counts are and how to get them, with the summary already shown."""
    if args.json:
        print_json(summary)
        if summary.get("timed_out"):
            print(f"keysplit: warning: {timeout_note(summary)}", file=sys.stderr)
    else:
        print_summary(summary)
    if args.counts_out:
        run_id = summary["run_id"]
        try:
            write_counts(read_counts(conn, RunKeys(run_id)), args.counts_out)
        except KeysplitError as exc:
            sys.stdout.flush()  # the summary first, then the one line on stderr
            raise KeysplitError(f"{exc}; run {run_id} finished and its counts are safe in Redis: write them once "
                                f"there is room with `keysplit run wordcount --collect {run_id} --counts-out "
                                f"{args.counts_out}`") from None
    return 0


def _stored_dataset(conn, run_id: str):
    """The dataset a stored run read, if its file is still there (a moved file cannot be overwritten)."""
    spec = stored_run(conn, run_id)[1].get("dataset")
    try:
        return open_dataset(spec) if spec else None
    except KeysplitError:
        return None


def print_summary(s: dict) -> None:
    out = sys.stdout
    out.write(f"run {s['run_id']}: grouping {s['grouping']}, dataset {s['dataset']}\n")
    out.write(f"  {s['lines']} lines, {s['messages']} words; S={s['sources']} W={s['workers']} "
              f"A={s['aggregators']} cpu delay {s['cpu_delay_ms']:g} ms, flush {s['flush_secs']:g} s"
              + (f", rate {s['rate']:g} words/s" if s.get("rate") else "")
              + (f", batches of up to {s['batch']} words or {s['batch_ms']:g} ms" if (s.get("batch") or 1) > 1 else "")
              + "\n")
    lat = s["latency_ms"]
    out.write(f"throughput: {s['words_per_second']:,.0f} words/s, {s['lines_per_second']:,.0f} lines/s "
              f"over {s['duration_s']:.1f} s\n")
    if s.get("bound"):  # runs/collect.py what_bound
        out.write(f"bound by {s['bound']}\n")
    out.write(f"latency (ms): mean {lat['mean']:.1f}  p50 {lat['p50']:.1f}  p95 {lat['p95']:.1f}  "
              f"p99 {lat['p99']:.1f}\n")
    resumed = f"  resumed: {s['resumes']} time(s)" if s.get("resumes") else ""
    if s.get("worker_restarts") is None and "worker_restarts" in s:
        restarts = "unknown" if s.get("restarts") is None else s["restarts"]
        out.write(f"replayed lines: {s['replayed']}  task restarts: {restarts}{resumed}  worker restarts and task "
                  "deaths: unknown here (a cluster run: see Storm's UI and worker logs)\n")
    else:
        out.write(f"replayed lines: {s['replayed']}  worker restarts: {s.get('worker_restarts', 0)}  task deaths: "
                  f"{s.get('task_deaths', 0)}  task restarts: {s.get('restarts', 0)}  unacked inputs: "
                  f"{s.get('unacked_inputs', 0)}{resumed}\n")
    if s.get("window_cuts"):
        out.write(window_line(s) + "\n")
    out.write(totals_line(s) + "\n")
    out.write(f"imbalance I(m)/m: {s['final_imbalance_fraction']:.4f}  load std-dev: {s['load_stddev']:.2f}%  "
              f"dist_cost (memory vs KG): {s['dist_cost']:.2f}\n")
    if s.get("grouping_stats"):
        out.write("grouping stats: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                 for k, v in s["grouping_stats"].items() if v != []) + "\n")
    out.write("\n")
    total = sum(s["loads"]) or 1
    redone = s.get("redone") or [0] * len(s["loads"])  # words processed again (replays, flushes lost to a crash)
    rows = [{"worker": i, "load": load, "share": 100.0 * load / total, "distinct": d, "redone": r}
            for i, (load, d, r) in enumerate(zip(s["loads"], s["distinct_per_worker"], redone))]
    print_table(rows, [("worker", "worker", str), ("words", "load", str), ("share %", "share", "{:.1f}".format),
                       ("distinct keys", "distinct", str)] + ([("redone", "redone", str)] if any(redone) else []))
    out.write(f"\ntop-{len(s['top_k'])}:\n")
    print_table([{"rank": i + 1, "word": w, "count": c} for i, (w, c) in enumerate(s["top_k"])],
                [("rank", "rank", str), ("word", "word", str), ("count", "count", str)])
    if s.get("kills"):
        out.write("\nkills: " + describe_kills(s["kills"]) + "\n")
    if s.get("dedup_peak_bytes") is not None:
        out.write(f"exactly-once state in Redis: peak {s['dedup_peak_bytes'] / 1024:,.0f} KiB "
                  f"({s['dedup_peak_marks']:,} marks of lines in flight)\n")
    if s.get("timed_out"):
        out.write(f"\nnote: {timeout_note(s)}\n")


def totals_line(s: dict) -> str:
    """Whether the totals can be trusted to the unit."""
    totals = s.get("totals", "exact")
    if totals == "exact" and s.get("delivery") == "exactly-once":
        return (f"totals: exact (exactly-once: {s['counted']:,} words counted, each once"
                + (f", through {s['replayed']} replayed line(s))" if s["replayed"] else ")"))
    if totals == "exact":
        return "totals: exact (no line was replayed)"
    if totals == "mismatch":
        return (f"totals: MISMATCH: {s['counted']:,} words counted, the feed has {s['messages']:,} (exactly-once "
                "delivery should make these equal: please report it)")
    return (f"totals: at least (each word counted at least once; {s['replayed']} replayed line(s) may have been "
            "counted twice, in part)")


def window_line(s: dict) -> str:
    """Where the spouts' adaptive windows settled (storm/window.py), when timeouts cut them."""
    per = ", ".join("unlimited" if w["window"] < 0 else str(w["window"]) for w in s["spout_windows"])
    total = "unlimited" if s["window"] is None else f"{s['window']:,} lines"
    return (f"in-flight window: settled at {total} (per spout: {per}; --max-pending {s['max_pending']}), "
            f"cut {s['window_cuts']} time(s) by message timeouts")


def timeout_note(s: dict) -> str:
    lines = s.get("timed_out_lines", s["timed_out"])  # lines, not spout tuples (a tuple carries several lines)
    return (f"{lines} line(s) were not acked within the message timeout of {s['message_timeout_secs']} s "
            "and were replayed"
            + (f"; the spouts cut their in-flight window to {s['window']:,} lines"
               if s.get("window_cuts") and s.get("window") else "")
            + ": raise --message-timeout (topology.message.timeout.secs) or lower --max-pending")
