"""``keysplit replay``: replay a dataset through groupings in PySpark: exact loads, counts and a queueing estimate.

The ``spark_replay`` job, also runnable on a cluster as ``spark-submit --master URL spark_replay/__main__.py`` with
the same options.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from keysplit.cli import command_summary
from keysplit.commands.common import (
    Signals,
    Stopped,
    cpu_delay,
    ensure_output_dir,
    positive_int,
    print_json,
    print_table,
    stop_on_signals,
)
from keysplit.commands.knobs import add_topology_options, overheads
from keysplit.commands.simulate import add_routing_options, parse_capacities
from keysplit.storm.cpu_delay import DEFAULT_CPU_DELAY_MS

_DEFAULT_OUT = ".keysplit/replay"

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Replay a dataset in Spark with the library's groupings (the same decisions as "
        "`keysplit simulate` for the same S), and estimate throughput and latency with a queueing model. "
        "Writes OUT/summary.json, OUT/timeseries.parquet and the exact counts in OUT/counts.parquet.",
        epilog="examples (the knobs of the runs to compare with, here those of `keysplit run wordcount -W 8 -S 4 "
        "-A 2 --cpu-delay 1`):\n  keysplit replay --dataset text:zipf.txt -g kg,sg,pkg -W 8 -S 4 -A 2 --cpu-delay 1 "
        "--out replay\n  keysplit replay --dataset text:zipf.txt -g pkg -W 8 -S 4 -A 2 --cpu-delay 2 "
        "--calibration here --out replay-d2\n  keysplit replay topologies/pageviews.py "
        "--dataset csv:views.csv,key=page --out replay-pages",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("topology", nargs="?", metavar="FILE",
                   help="a topology file (path/to/topology.py, the one `keysplit run FILE` runs): replay its keyed "
                   "stage, with its grouping, parallelism and accumulator (every key's result in "
                   "OUT/results.parquet); omit it for the word count's groupings (-g)")
    p.add_argument("--dataset", required=True, metavar="SPEC", help="dataset spec (text:, edges:, csv:, "
                   "parquet: or a generator, which is written to OUT/dataset.csv first)")
    p.add_argument("--workers", "-W", type=positive_int, default=10, metavar="W", help="workers (default 10)")
    add_routing_options(p)
    p.add_argument("--cpu-delay", type=cpu_delay, default=DEFAULT_CPU_DELAY_MS, metavar="MS",
                   help=f"service time of one tuple at a worker, ms (default {DEFAULT_CPU_DELAY_MS:g})")
    add_topology_options(p)
    p.add_argument("--top", type=positive_int, default=10, metavar="K", help="top-k size (default 10)")
    p.add_argument("--master", metavar="URL", help="Spark master (default local[*]; kept from spark-submit)")
    p.add_argument("--driver-memory", default="2g", metavar="MEM", help="Spark driver memory (default 2g)")
    p.add_argument("--conf", action="append", metavar="KEY=VALUE",
                   help="a Spark setting for the session, e.g. spark.executor.memory=4g (repeatable; wins over "
                   "keysplit's own settings)")
    p.add_argument("--partitions", type=positive_int, metavar="N",
                   help="input partitions of the dataset file (default: by size and cores)")
    p.add_argument("--engine", choices=("auto", "reference"), default="auto",
                   help="auto: kg/sg/pkg through the simulator's proven kernel; reference: every grouping's choose")
    p.add_argument("--out", default=_DEFAULT_OUT, metavar="DIR", help=f"output directory (default {_DEFAULT_OUT})")
    p.add_argument("--force", action="store_true", help="replace the outputs in an --out folder that holds files "
                   "other than a replay's (the rest of it is left alone)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of a table")
    p.set_defaults(func=run)
    # what a topology file states itself: given otherwise, it is refused (commands.replay_topology)
    p.set_defaults(replay_defaults={a.dest: a.default for a in p._actions})


def model_line(replay: dict) -> str:
    """One line saying which throughput / latency model the replay's estimates come from."""
    if replay.get("arrivals") == "lindley":
        return "one D/D/1 queue per worker fed at --rate (no max pending, flush or overheads: lower bounds)"
    o = replay.get("overheads") or {}
    loop = f"closed loop, max pending {replay['max_pending']}" if replay.get("arrivals") == "closed" \
        else f"open loop at {replay['rate']:g} words/s, max pending {replay['max_pending']} as a cap"
    return (f"topology model ({loop}, A={replay['aggregators']}, flush {replay['flush_secs']:g} s, overheads: "
            f"runner {o.get('overhead_us', 0):.0f} us/tuple + {o.get('word_us', 0):.0f} us/word, counter "
            f"{o.get('counter_overhead_us', 0):.0f} us/tuple, batches of {replay.get('batch', 1)} / "
            f"{replay.get('batch_ms', 0):g} ms, "
            f"hop {o.get('hop_delay_ms', 0):.0f} ms, tick phase {o.get('tick_phase_s', 0):.2f} s; from "
            f"{'profile ' + o['profile'] if o.get('profile') else o.get('source') or 'no calibration'})")


def run(args: argparse.Namespace) -> int:
    """SIGTERM and SIGHUP stop a replay the way Ctrl-C does: its staging folder removed, the Spark session
    stopped, one line and the shell's status for the signal."""
    caught = Signals()
    try:
        with stop_on_signals() as caught:
            return _run(args)
    except BaseException as exc:
        stop = caught.reason(exc)
        if stop is None:
            raise
        name, status = (str(stop), stop.status) if isinstance(stop, Stopped) else ("Ctrl-C", 130)
        print(f"keysplit: replay stopped by {name}; nothing was written to {args.out}", file=sys.stderr)
        return status


def _run(args: argparse.Namespace) -> int:
    if args.topology:
        from keysplit.commands.replay_topology import replay_options

        opts = replay_options(args, args.replay_defaults, overheads(args))
    else:
        opts = _wordcount_options(args)
    return _replay(args, opts)


def _wordcount_options(args: argparse.Namespace):
    from spark_replay.options import ReplayOptions

    return ReplayOptions(
        dataset=args.dataset, groupings=args.groupings, workers=args.workers, sources=args.sources,
        cpu_delay_ms=args.cpu_delay, rate=args.rate, split=args.split, checkpoint=args.checkpoint,
        top_k=args.top, out=args.out, force=args.force, capacities=parse_capacities(args.capacities, args.workers),
        partitions=args.partitions, fast=args.engine == "auto", resizes=args.resize,
        aggregators=args.aggregators, spouts=args.spouts, flush_secs=args.flush, max_pending=args.max_pending,
        message_timeout=args.message_timeout, batch=args.batch, batch_ms=args.batch_ms, arrivals=args.arrivals,
        overheads=overheads(args),
    )


def _replay(args: argparse.Namespace, opts) -> int:
    from keysplit.sizes import check_workers
    from spark_replay.job import run_replay, validate
    from spark_replay.session import get_session, parse_conf, stop_session

    check_workers(opts.workers, opts.sources, opts.groupings)  # per-worker state that cannot fit, before anything
    validate(opts)  # bad groupings and numbers fail before the JVM starts
    conf = parse_conf(args.conf)
    from keysplit.datasets import Generator, open_dataset
    from keysplit.groupings.hosting import check_resizes
    from keysplit.stream import check_checkpoint
    from spark_replay.sparkinput import remote_spec

    # A missing local file fails before the JVM too; a file named by URI (hdfs://...) is checked through Spark.
    dataset = None if remote_spec(opts.dataset) else open_dataset(opts.dataset)
    if isinstance(dataset, Generator):
        # A generator's length is a parameter (one message per record), so what depends on it is checked now;
        # a file's length is known only after the ingest has read it.
        messages = dataset.params["messages"]
        check_resizes(opts.groupings, opts.workers, opts.resizes, messages)
        check_checkpoint(opts.checkpoint, messages)
    from spark_replay.sparkinput import check_lines
    from spark_replay.storage import check_out, is_uri

    if not is_uri(opts.out):  # an output over the input, keysplit's own state, another user's link, a user's files
        check_out(dataset, opts.out, opts.force)
    if dataset is not None:
        check_lines(dataset)  # a line longer than run's bound, before the JVM starts
    existed = is_uri(opts.out) or os.path.isdir(opts.out)
    if not is_uri(opts.out):  # a folder named by URI (hdfs://...) is created through Spark
        ensure_output_dir(opts.out)  # and an output directory that cannot be created
        if not existed:  # a new one appears only once the replay is complete (built beside it, then renamed)
            os.rmdir(opts.out)
    try:
        spark, created = get_session(args.master, args.driver_memory, conf)
        try:
            summary = run_replay(spark, opts, progress=lambda msg: print(f"replay: {msg}", file=sys.stderr))
        finally:
            if created:
                stop_session(spark)
    except BaseException:
        if not existed:  # a failed replay leaves nothing behind, not an empty folder
            with contextlib.suppress(OSError):
                os.rmdir(opts.out)
        raise
    if args.json:
        print_json(summary)
        return 0
    d = summary["dataset"]
    print(f"dataset {d['spec']}: {d['messages']:,} messages, {d['keys']:,} keys, p1 = {d['p1']:.4f}; "
          f"W={opts.workers}, S={opts.sources}, cpu delay {opts.cpu_delay_ms:g} ms, rate {opts.rate:g} msg/s")
    print(f"estimate: {model_line(summary['replay'])}")
    print_table(summary["runs"], [
        ("grouping", "grouping", str),
        ("mode", "mode", lambda v: v.split(" ")[0]),
        ("avg imbalance", "avg_imbalance_fraction", lambda v: f"{v:.3e}"),
        ("final imbalance", "final_imbalance_fraction", lambda v: f"{v:.3e}"),
        ("load std-dev %", "load_stddev", lambda v: f"{v:.3f}"),
        ("dist_cost", "dist_cost", lambda v: f"{v:.2f}"),
        ("throughput est.", "throughput_estimate", lambda v: "-" if v is None else f"{v:,.0f}"),
        ("p50 ms", "latency_p50_ms", lambda v: f"{v:,.2f}"),
        ("p99 ms", "latency_p99_ms", lambda v: f"{v:,.2f}"),
        # the groupings' Spark jobs run at once from one start: a time each, not a rate each (job.py)
        ("done after s", "seconds", lambda v: f"{v:,.2f}"),
    ])
    if any(r["mode"].startswith("global") for r in summary["runs"]):
        print("mode global: the grouping's decisions depend on every source (shared load vector or probes of the "
              "true loads), so the whole stream was routed in ONE partition, in sequence order")
    if "topology" in summary:
        t = summary["topology"]
        print(f"topology {t['topology']}: {t['router']} ({t['grouping']}) -> {t['partial']} -> {t['merge']}; "
              f"{t['keys']:,} keys' results of {t['accumulator']['class'].rsplit(':', 1)[-1]} in {t['results']}")
    print(f"summary: {summary['replay']['counts'].rsplit('/', 1)[0]}/summary.json; exact counts: "
          f"{summary['replay']['counts']}; top-{opts.top_k}: "
          + ", ".join(f"{w} {c:,}" for w, c in summary["runs"][0]["top_k"][:5]) + ("..." if opts.top_k > 5 else ""))
    return 0
