"""``keysplit run path/to/topology.py``: a user's streamparse topology on this machine (keysplit.runs.topology_run).

Shares ``keysplit run``'s parser: the options that shape the word count (``--grouping``, ``-S``, ``-W``, ...) are
refused, because a topology file states its own groupings and parallelism; the ones Storm has (``--max-pending``,
``--message-timeout``, ``--worker-processes``), the feed (``--dataset``, ``--split``), faults (``--kill``), Redis
and the output options apply.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from keysplit.commands.common import print_json, print_table
from keysplit.datasets import open_dataset
from keysplit.errors import KeysplitError
from keysplit.runs.faults import describe_kills
from keysplit.runs.redis_server import session

#: `keysplit run` options that only the word count has (a topology file states these itself).
WORDCOUNT_ONLY = ("grouping", "sources", "workers", "counter_tasks", "cpu_delay", "aggregators", "spouts", "flush",
                  "batch", "batch_ms", "top", "route", "resume", "aimd_increase",
                  "aimd_decrease", "aimd_min")


#: The longest --duration / --until-idle: a day (a local run is a test, not a service).
MAX_SECONDS = 86_400.0


def run_seconds(text: str) -> float:
    """A positive number of seconds up to :data:`MAX_SECONDS` (argparse type)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 < value <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(f"expected seconds in (0, {MAX_SECONDS:,.0f}], got {text}")
    return value


def run_file(args: argparse.Namespace, parser_defaults: dict, progress_bars: Callable) -> int:
    """``keysplit run FILE``; ``progress_bars(enabled, unit)`` is `keysplit run`'s status line (a context)."""
    from keysplit.runs.topology_file import load_topology
    from keysplit.runs.topology_run import TopologyRunOptions, run_topology

    given = [f"--{name.replace('_', '-')}" for name in WORDCOUNT_ONLY
             if getattr(args, name, None) != parser_defaults.get(name)]
    if given:
        raise KeysplitError(f"{', '.join(given)}: only for `keysplit run wordcount`; a topology file states its "
                            "groupings and parallelism in its specs (KeyRouter.spec(grouping=..., par=...))")
    if args.rate and not args.dataset:
        raise KeysplitError("--rate paces keysplit's feed (rows a second); your own spouts set their own pace")
    if (args.duration is not None or args.until_idle is not None) and args.dataset:
        raise KeysplitError("--duration and --until-idle are for a topology without keysplit's feed; with --dataset "
                            "the run ends when every row is acked")
    if args.duration is not None and args.until_idle is not None:
        raise KeysplitError("--duration and --until-idle cannot be combined")
    loaded = load_topology(args.topology)
    if args.counts_out:
        from keysplit.commands.common import check_results_out

        check_results_out(args.counts_out, open_dataset(args.dataset) if args.dataset else None)
    if args.collect:
        from keysplit.runs.records import check_run_id
        from keysplit.runs.topology_run import collect_run

        check_run_id(args.collect)
        with session(_redis(args)) as (conn, _):
            summary = collect_run(loaded, conn, args.collect, results_out=args.counts_out)
        return _report(args, summary)
    opts = TopologyRunOptions(
        dataset=open_dataset(args.dataset) if args.dataset else None, split=args.split, duration=args.duration,
        until_idle=args.until_idle,
        max_pending=args.max_pending, message_timeout=args.message_timeout, worker_processes=args.worker_processes,
        delivery=args.delivery, timeout=args.timeout, kills=tuple(args.kill), storm_env=args.env, run_id=args.run_id,
        results_out=args.counts_out, startup_timeout=args.startup_timeout,
        options={"keysplit.rate": args.rate} if args.rate else {})
    from keysplit.runs.topology_run import check_options

    check_options(loaded, opts, local=not args.load_only)  # before any server starts

    if args.load_only:  # for `sparse submit -o keysplit.run_id=RUN_ID`, then --collect RUN_ID
        from keysplit.redis_client import redact
        from keysplit.runs.topology_run import load_run

        with session(_redis(args)) as (conn, url):
            keys, base = load_run(loaded, opts, conn, local=False)
        if args.json:
            print_json({"run_id": keys.run_id, "rows": base["rows"], "redis": redact(url)})
        else:
            print(keys.run_id)
        return 0
    with session(_redis(args)) as (conn, url), progress_bars(not args.json, "row") as progress:
        summary = run_topology(loaded, opts, conn, url, progress=progress)
    return _report(args, summary)


def _report(args: argparse.Namespace, summary: dict) -> int:
    """Print the summary; the exit status is 1 when rows were set aside as dead letters (the results leave them
    out), else 0."""
    if args.json:
        print_json(summary)
    else:
        print_summary(summary)
    if summary.get("results_out_error"):  # after the summary: the run itself finished
        raise KeysplitError(summary["results_out_error"])
    forgotten = summary.get("forgotten_trees")
    if forgotten:  # a crash lost what those trees carried, unless the user's spout emits it again: not a success
        print(f"keysplit: error: run {summary['run_id']} stopped with {forgotten_text(forgotten)} forgotten by a "
              "crash (a spout's worker died with them pending, and no ack or fail reaches a spout for them, as in "
              "Storm): the results hold their rows only if your spout emitted them again", file=sys.stderr)
        return 1
    return 1 if summary.get("dead_letters") else 0


def forgotten_text(forgotten: dict[str, int]) -> str:
    """``{"clicks": 3, "views": 1}`` -> ``4 tuple trees of spouts 'clicks' (3), 'views' (1)``."""
    total = sum(forgotten.values())
    trees = "tuple tree" if total == 1 else "tuple trees"
    if len(forgotten) == 1:
        return f"{total} {trees} of spout {next(iter(forgotten))!r}"
    return f"{total} {trees} of spouts " + ", ".join(f"{name!r} ({n})" for name, n in forgotten.items())


def _redis(args: argparse.Namespace) -> str | None:
    from keysplit.commands.common import redis_url

    return redis_url(args)


def print_summary(s: dict) -> None:
    out = sys.stdout
    out.write(f"run {s['run_id']}: {s['topology']}" + (f", dataset {s['dataset']}" if s.get("dataset") else "") + "\n")
    out.write("  components: " + ", ".join(f"{name} x{par}" for name, par in s["components"].items())
              + f"; {s['worker_processes']} worker process(es); delivery {s['delivery']}\n")
    if s.get("delivery") == "at-least-once" and not s.get("dataset"):
        out.write("  your spouts' tuples: at-least-once (Storm's acking replays a failed tree; exactly-once totals "
                  "need keysplit's FeedSpout)\n")
    if s.get("totals"):
        committed = [m["committed"] for m in s["merges"].values() if "committed" in m]
        said = {"exact": "exact", "mismatch": "MISMATCH (see the warning above)",
                "at-least": "at least right (rows were replayed, and at-least-once may count a replay twice)"}
        out.write(f"totals: {said.get(s['totals'], s['totals'])}"
                  + (f" ({committed[0]:,} of {s['rows']:,} rows applied once"
                     + (f", {len(s['dead_letters'])} dead letters" if s.get("dead_letters") else "") + ")"
                     if committed else "") + "\n")
    if s.get("acked"):
        lat = s["latency_ms"]
        what = "rows" if s.get("dataset") else "spout tuples"
        out.write(f"throughput: {s['rows_per_second']:,.0f} {what}/s over {s['duration_s']:.1f} s ({s['acked']:,} "
                  f"{what} acked, {s['replayed']} replayed)\n")
        out.write(f"latency (ms, emit to ack): mean {lat['mean']:.1f}  p50 {lat['p50']:.1f}  p99 {lat['p99']:.1f}\n")
    if s["worker_restarts"] is None:
        restarts = "unknown (no component started)" if s.get("task_restarts") is None else s["task_restarts"]
        out.write(f"task restarts (keysplit's components count their starts): {restarts}"
                  + "".join(f"; {task} started {n} times" for task, n in list(s.get("restarting", {}).items())[:6])
                  + "\nworker restarts and task deaths: in Storm's UI and worker logs (a cluster run)\n")
    else:
        out.write(f"worker restarts: {s['worker_restarts']}  task deaths: {s['task_deaths']}  task restarts: "
                  f"{s['task_restarts']}\n")
    if s.get("incomplete"):
        so_far = f"{s.get('acked') or 0:,} of {s['rows']:,} rows acked" if s.get("rows") else "rows still unacked"
        if s.get("task_restarts") is None:  # no keysplit component has counted its start
            out.write(f"note: {so_far}: no component has started yet (a cluster's workers can take a minute)\n")
        else:
            out.write(f"note: {so_far}, the feed is not completely acked yet; these numbers are so far\n")
    if s.get("tuples"):
        out.write("\n")
        print_table([{"component": name, **c} for name, c in s["tuples"].items()],
                    [("component", "component", str), ("emitted", "emitted", str), ("executed", "executed", str),
                     ("acked", "acked", str), ("failed", "failed", str), ("timed out", "timed_out", str)])
    for name, r in s["routers"].items():
        if not r["loads"]:  # no task of the router has reported yet (a cluster run that has not started)
            out.write(f"\n{name}: grouping {r['grouping']} on {r['key']!r}, {r['sources']} source(s): nothing "
                      "routed yet\n")
            continue
        total = sum(r["loads"]) or 1
        if r.get("loads_once") and r["loads_once"] != r["loads"]:
            out.write(f"\n{name}: loads counted once {r['loads_once']} (the loads below include what replays sent "
                      "again)")
        out.write(f"\n{name}: grouping {r['grouping']} on {r['key']!r}, {r['sources']} source(s) -> {r['workers']} "
                  f"task(s) of {r['to']}; imbalance I(m)/m {r['imbalance_fraction']:.4f}"
                  + (f"; {r['failed']} tuple(s) failed (no usable key)" if r["failed"] else "")
                  + (f"; {r['unsynced']} tuple(s) decided without router 0's shared state for their period (the "
                     "loads may differ from simulate's)" if r.get("unsynced") else "") + "\n")
        print_table([{"task": i, "load": n, "share": 100.0 * n / total} for i, n in enumerate(r["loads"])],
                    [("task", "task", str), ("tuples", "load", str), ("share %", "share", "{:.1f}".format)])
    for name, p in s["partials"].items():
        out.write(f"\n{name}: {p['accumulator']}, keys held per task {p['keys']} (sum {sum(p['keys'])}: the state a "
                  "split key costs)\n")
    for name, m in s["merges"].items():
        out.write(f"\n{name}: {m['keys']:,} keys committed\n")
        if m["top"]:
            print_table([{"rank": i + 1, "key": k, "result": v} for i, (k, v) in enumerate(m["top"])],
                        [("rank", "rank", str), ("key", "key", str), ("result", "result", str)])
    if s.get("dead_letters"):
        print_dead_letters(s["dead_letters"], s["run_id"])
    if s.get("kills"):
        out.write("\nkills: " + describe_kills(s["kills"], "rows" if s.get("dataset") else "tuple trees") + "\n")
    if s.get("forgotten_trees"):
        out.write(f"forgotten by a crash: {forgotten_text(s['forgotten_trees'])}\n")
    if s.get("results_out"):
        out.write(f"\nevery key's result: {s['results_out']}\n")
    if s.get("log_dir"):
        out.write(f"\ntask logs: {s['log_dir']}\n")


#: Dead letters a summary names one by one; the others are counted.
DEAD_LETTERS_SHOWN = 10


def print_dead_letters(letters: list[dict], run_id: str) -> None:
    """The rows the user's code refused, each with its stage, record, key, values and error: the results leave them
    out (keysplit.toolkit.deadletter)."""
    out = sys.stdout
    out.write(f"\ndead letters: {len(letters)} row(s) refused by the accumulator on every attempt, left out of the "
              f"results (Redis keysplit:run:{run_id}:dead_letters):\n")
    for d in letters[:DEAD_LETTERS_SHOWN]:
        where = (f"row {d['row']} of the dataset" if d.get("row") is not None
                 else f"record {d['record']}" if d.get("record") is not None else "a row")
        out.write(f"  {d['stage']}[{d['task']}]: {where}, key {json.dumps(d.get('key'))}, values "
                  f"{json.dumps(d.get('values'), default=str)}: {d['error']} ({d['attempts']} attempts)\n")
    if len(letters) > DEAD_LETTERS_SHOWN:
        out.write(f"  ... and {len(letters) - DEAD_LETTERS_SHOWN} more\n")
