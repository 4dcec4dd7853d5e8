"""``keysplit execution``: execution time and latency of each grouping on workers of given (e.g. unequal) speeds.

How long workers of given speeds take to get through a routed stream (FISH §6.1)."""

from __future__ import annotations

import argparse

from keysplit.cli import command_summary
from keysplit.commands.common import (
    ExamplesHelpFormatter,
    int_list,
    positive_float,
    positive_int,
    print_json,
    print_table,
    spec_list,
)
from keysplit.datasets import open_dataset, require_records
from keysplit.groupings import check_grouping
from keysplit.stream import DEFAULT_RATE, SPLITS

DEFAULT_GROUPINGS = ["fish", "fish:assign=load", "pkg", "sg"]

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Route a dataset with each grouping and serve every worker's messages as one FIFO server "
        "of the given capacity (tuples/s): the execution time (when the last message is done), the mean and "
        "99th-percentile latency. This is the FISH paper's simulation metric; with half the workers twice as "
        "fast (the default, its Fig. 16) it shows what balancing waiting times gains over balancing counts. "
        "Also runnable as `python -m keysplit.execution`.",
        epilog="examples:\n"
        "  keysplit execution --dataset drift:z=1.0,keys=10000,messages=200000,seed=1 -W 16,32,64,128 "
        "-g fish,fish:assign=load,dchoices,wchoices,pkg,sg\n"
        "  keysplit execution --dataset text:zipf.txt -W 8 -g kg,pkg,fish --capacities 1000,1000,2000,2000,"
        "1000,1000,2000,2000",
        formatter_class=ExamplesHelpFormatter,
    )
    p.add_argument("--dataset", required=True, metavar="SPEC", help="dataset spec, e.g. drift:keys=10000,"
                   "messages=200000")
    p.add_argument("--workers", "-W", type=int_list, default=[16], metavar="W[,W...]",
                   help="worker counts (default 16)")
    p.add_argument("--sources", "-S", type=positive_int, default=5, metavar="S", help="sources (default 5)")
    p.add_argument("--groupings", "-g", type=spec_list, default=DEFAULT_GROUPINGS, metavar="G[,G...]",
                   help=f"grouping specs (default {','.join(DEFAULT_GROUPINGS)})")
    p.add_argument("--capacities", default="half-fast", metavar="CAPS",
                   help="worker speeds in tuples/s: half-fast (default: half the workers twice as fast, adding "
                   "up to --rate), equal (adding up to --rate), C for every worker, or C1,...,CW")
    p.add_argument("--rate", type=positive_float, default=DEFAULT_RATE, metavar="MSGS_PER_S",
                   help=f"event-time arrival rate for records without timestamps (default {DEFAULT_RATE:g})")
    p.add_argument("--split", choices=SPLITS, default="shuffle", help="how records reach sources")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from keysplit.execution import execution, parse_capacities

    dataset = open_dataset(args.dataset)
    capacities = {w: parse_capacities(args.capacities, w, args.rate) for w in args.workers}
    for w in args.workers:  # everything is checked before the first run
        for spec in args.groupings:
            check_grouping(spec, w, args.sources)
    require_records(dataset)  # an empty stream would print a table of zeros
    rows = []
    for w in args.workers:
        for spec in args.groupings:
            r = execution(dataset, spec, w, capacities[w], args.sources, rate=args.rate, split=args.split)
            rows.append({"grouping": r.grouping, "workers": w, "messages": r.messages,
                         "execution_time": r.execution_time, "stream_time": r.stream_time,
                         "throughput": r.throughput, "mean_latency": r.mean_latency,
                         "p99_latency": r.p99_latency, "loads": r.loads})
    if args.json:
        print_json({"dataset": dataset.spec, "capacities": args.capacities, "rate": args.rate,
                    "sources": args.sources, "runs": rows})
        return 0
    print(f"dataset {dataset.spec}; capacities {args.capacities} (total {args.rate:g} tuples/s where derived); "
          f"{args.sources} sources")
    print_table(rows, [("grouping", "grouping", str), ("W", "workers", str),
                       ("execution time s", "execution_time", lambda v: f"{v:.2f}"),
                       ("stream ends s", "stream_time", lambda v: f"{v:.2f}"),
                       ("mean latency s", "mean_latency", lambda v: f"{v:.3f}"),
                       ("p99 latency s", "p99_latency", lambda v: f"{v:.3f}")])
    return 0
