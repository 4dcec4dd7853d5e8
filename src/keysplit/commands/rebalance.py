"""``keysplit rebalance``: measure the key state that moves when a worker is added or removed mid-stream.

How much key state moves when a worker joins or leaves (FISH §5, Fig. 17)."""

from __future__ import annotations

import argparse

from keysplit.cli import command_summary
from keysplit.commands.common import (
    ExamplesHelpFormatter,
    positive_float,
    positive_int,
    print_json,
    print_table,
    spec_list,
)
from keysplit.datasets import open_dataset, require_records
from keysplit.errors import SpecError
from keysplit.groupings import check_grouping
from keysplit.rebalance import mapping_moves, rebalance_run
from keysplit.stream import DEFAULT_RATE, SPLITS

DEFAULT_GROUPINGS = ["fish", "fish:placement=mod", "pkg", "kg"]

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Route a dataset with W workers, change to W' workers just before message AT, and "
        "measure the keys whose messages then reach a worker holding none of their state (moved keys) and "
        "the (key, worker) state entries created for them, against the same run without the change. "
        "Also prints the share of keys whose owner changes on a consistent-hash ring versus hash mod W. "
        "Groupings with a resize hook (fish) are resized in place; others are re-prepared with W' workers, "
        "as Storm does on a rebalance. fish:placement=mod is FISH without consistent hashing.",
        epilog="examples:\n"
        "  keysplit rebalance --dataset drift:z=1.0,keys=10000,messages=1000000,seed=1 --workers 10 --to 11\n"
        "  keysplit rebalance --dataset text:zipf.txt -W 8 --to 6 --at 10000 -g fish,fish:placement=mod,pkg",
        formatter_class=ExamplesHelpFormatter,
    )
    p.add_argument("--dataset", required=True, metavar="SPEC", help="dataset spec, e.g. drift:keys=10000,"
                   "messages=200000")
    p.add_argument("--workers", "-W", type=positive_int, default=10, metavar="W", help="workers before (default 10)")
    p.add_argument("--to", type=positive_int, required=True, metavar="W2", help="workers after the change")
    p.add_argument("--at", type=positive_int, metavar="MESSAGE",
                   help="the change happens just before this message (0-based; default: the middle)")
    p.add_argument("--sources", "-S", type=positive_int, default=5, metavar="S", help="sources (default 5)")
    p.add_argument("--groupings", "-g", type=spec_list, default=DEFAULT_GROUPINGS, metavar="G[,G...]",
                   help=f"grouping specs (default {','.join(DEFAULT_GROUPINGS)})")
    p.add_argument("--vnodes", type=positive_int, default=64, help="virtual nodes per worker for the mapping "
                   "comparison (default 64, FISH's)")
    p.add_argument("--rate", type=positive_float, default=DEFAULT_RATE, metavar="MSGS_PER_S",
                   help=f"event-time rate for records without timestamps (default {DEFAULT_RATE:g})")
    p.add_argument("--split", choices=SPLITS, default="shuffle", help="how records reach sources")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.to == args.workers:
        raise SpecError(f"--to must differ from --workers ({args.workers}); nothing would change")
    dataset = open_dataset(args.dataset)
    for spec in args.groupings:
        check_grouping(spec, args.workers, args.sources)
        check_grouping(spec, args.to, args.sources)
    require_records(dataset)
    keys: set[str] = set()
    messages = 0
    for _, ks in dataset.records():
        keys.update(ks)
        messages += len(ks)
    at = args.at if args.at is not None else messages // 2
    if at >= messages:
        raise SpecError(f"--at {at} is past the end of the stream ({messages} messages)")
    mapping = mapping_moves(sorted(keys), args.workers, args.to, args.vnodes)
    runs = [rebalance_run(dataset, spec, args.workers, args.to, at, args.sources, rate=args.rate,
                          split=args.split) for spec in args.groupings]
    if args.json:
        print_json({"dataset": dataset.spec, "workers": args.workers, "to": args.to, "at": at,
                    "sources": args.sources, "mapping": mapping, "runs": [r.summary() for r in runs]})
        return 0
    print(f"dataset {dataset.spec}: {messages:,} messages, {len(keys):,} keys; W {args.workers} -> {args.to} "
          f"before message {at:,}; {args.sources} sources")
    print(f"keys whose owner changes: ring ({args.vnodes} vnodes) {mapping['ring']:.1%}, hash mod W "
          f"{mapping['mod']:.1%} (ideal {mapping['ideal']:.1%})")
    print_table(
        [r.summary() for r in runs],
        [
            ("grouping", "grouping", str),
            ("keys moved", "moved_share", lambda v: f"{v:.1%}"),
            ("without change", "control_moved_share", lambda v: f"{v:.1%}"),
            ("new state", "new_state_share", lambda v: f"{v:.1%}"),
            ("without change", "control_new_state_share", lambda v: f"{v:.1%}"),
            ("dist_cost", "dist_cost", lambda v: f"{v:.2f}"),
            ("without change", "control_dist_cost", lambda v: f"{v:.2f}"),
        ],
    )
    print("keys moved: share of the keys routed both before and after the change that reached a worker "
          "holding none of their state; new state: (key, worker) entries created after the change, over "
          "those keys' entries before it.")
    return 0
