"""``keysplit simulate``: route a dataset through groupings in process and measure balance and memory.

Every grouping over one dataset, in process, measured side by side."""

from __future__ import annotations

import argparse

from keysplit.cli import command_summary
from keysplit.commands.common import (
    int_list,
    non_negative_float,
    positive_float,
    positive_int,
    print_json,
    print_table,
    progress_bar,
    spec_list,
)
from keysplit.datasets import Dataset, FileDataset, open_dataset, require_records
from keysplit.errors import SpecError
from keysplit.groupings import REGISTRY, check_grouping, grouping_class
from keysplit.groupings.base import spec_value
from keysplit.groupings.hosting import check_resizes
from keysplit.outputs import refuse_inputs, refuse_state
from keysplit.plots import check_plot_path, imbalance_over_time, refuse_foreign_plot
from keysplit.simulator import ENGINES, simulate
from keysplit.sizes import check_workers
from keysplit.stream import DEFAULT_RATE, SPLITS, Resize, check_checkpoint

NAME, HELP = command_summary(__doc__)


def grouping_help() -> str:
    lines = []
    for name in REGISTRY:
        try:
            cls = grouping_class(name)
        except SpecError:
            continue
        params = ", ".join(f"{k}={spec_value(p.default)}" for k, p in cls.PARAMS.items())
        lines.append(f"  {name:<10} {cls.summary}" + (f" [{params}]" if params else ""))
    return "groupings (spec NAME[:key=value,...]):\n" + "\n".join(lines)


#: Where an epilog lists the groupings; :class:`GroupingsHelpFormatter` fills it in.
GROUPINGS_EPILOG = "{groupings}"


class GroupingsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Raw description and epilog, whose ``{groupings}`` becomes :func:`grouping_help` only when help is
    printed: listing the groupings imports every grouping module, which every start would otherwise pay."""

    def add_text(self, text: str | None) -> None:
        if text and GROUPINGS_EPILOG in text:
            text = text.replace(GROUPINGS_EPILOG, grouping_help())
        super().add_text(text)


def resize_list(text: str) -> list[Resize]:
    out = []
    for item in text.split(","):
        at, sep, w = item.partition(":")
        try:
            out.append(Resize(int(at), int(w)))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected AT:WORKERS[,AT:WORKERS], got {text!r}") from None
        if not sep or out[-1].at < 1 or out[-1].workers < 1:
            raise argparse.ArgumentTypeError(f"expected AT:WORKERS with both at least 1, got {item!r}")
    return out


def add_routing_options(p: argparse.ArgumentParser) -> None:
    """The options that decide every routing decision, shared with `keysplit replay`: the same values give
    the same decisions in both."""
    p.add_argument("--sources", "-S", type=positive_int, default=5, metavar="S", help="sources (default 5)")
    p.add_argument("--groupings", "-g", type=spec_list, default=["kg", "sg", "pkg"], metavar="G[,G...]",
                   help="grouping specs (default kg,sg,pkg)")
    p.add_argument("--rate", type=positive_float, default=DEFAULT_RATE, metavar="MSGS_PER_S",
                   help=f"event-time rate for records without timestamps (default {DEFAULT_RATE:g})")
    p.add_argument("--split", choices=SPLITS, default="shuffle",
                   help="how records reach sources: round-robin (shuffle) or by key hash (key)")
    p.add_argument("--checkpoint", type=positive_int, metavar="N",
                   help="messages between imbalance checkpoints (default m/1000)")
    p.add_argument("--capacities", metavar="C[,C...]",
                   help="per-worker service rates in tuples/s for groupings that use them (FISH); "
                   "a single value is used for every worker")
    p.add_argument("--resize", type=resize_list, default=[], metavar="AT:W[,AT:W]",
                   help="change the worker count to W just before message AT (0-based); only groupings "
                   "that support it (fish, gedik)")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Route a dataset through one or more groupings with S sources and W workers, in "
        "process, and print imbalance, load std-dev, memory (dist_cost) and speed.",
        epilog="examples:\n"
        "  keysplit simulate --dataset zipf:z=1.2,keys=1000,messages=20000,seed=1 -W 8 -S 4 -g kg,sg,pkg\n"
        "  keysplit simulate --dataset text:zipf.txt -W 10,50 -g kg,pkg,pkg:d=4 --plot imbalance.png\n\n"
        + GROUPINGS_EPILOG,
        formatter_class=GroupingsHelpFormatter,
    )
    p.add_argument("--dataset", required=True, metavar="SPEC", help="dataset spec, e.g. zipf:z=1.0,keys=10000,"
                   "messages=1000000,seed=1 or text:zipf.txt (see `keysplit datasets --help`)")
    p.add_argument("--workers", "-W", type=int_list, default=[10], metavar="W[,W...]",
                   help="worker counts (default 10)")
    add_routing_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--engine", choices=ENGINES, default="auto",
                   help="auto: the numba fast path for kg, sg, pkg and salt (same decisions as the reference), else "
                   "the reference; fast: fast path or error; reference: the Python Grouping.choose loop")
    p.add_argument("--plot", metavar="FILE.png", help="also draw the imbalance fraction over time of every run "
                   "(the extension picks the format: .png, .svg, .pdf, ...)")
    p.set_defaults(func=run)


def parse_capacities(text: str | None, workers: int) -> list[float] | None:
    if text is None:
        return None
    try:
        values = [non_negative_float(v) for v in text.split(",")]
    except argparse.ArgumentTypeError as exc:
        raise SpecError(f"--capacities: {exc}") from None
    if len(values) == 1:
        values *= workers
    if len(values) != workers or any(v <= 0 for v in values):
        raise SpecError(f"--capacities needs 1 or {workers} positive values, got {len(values)}")
    return values


def run(args: argparse.Namespace) -> int:
    if args.plot is not None:
        check_plot_path(args.plot)
        refuse_state("--plot", args.plot)
    check_workers([*args.workers, *(r.workers for r in args.resize)], args.sources, args.groupings)  # a --resize too
    dataset = open_dataset(args.dataset)
    if args.plot is not None and isinstance(dataset, FileDataset):
        refuse_inputs("--plot", args.plot, [dataset.path])
    if args.plot is not None:
        refuse_foreign_plot(args.plot)
    capacities: dict[int, list[float] | None] = {}
    for w in args.workers:  # validate everything before the first long run
        for spec in args.groupings:
            check_grouping(spec, w, args.sources)
        capacities[w] = parse_capacities(args.capacities, w)
    require_records(dataset)
    from keysplit.simulator.encoded_text import message_count  # here: numpy and the kernels only when simulating

    messages = message_count(dataset)  # generators know it; a file takes one counting pass (text: by the kernels)
    check_checkpoint(args.checkpoint, messages)
    for w in args.workers:
        check_resizes(args.groupings, w, args.resize, messages)
    runs = []
    for w in args.workers:
        for spec in args.groupings:
            runs.append(_one(dataset, spec, w, args, messages, capacities[w]))
    # keys and p1 come from the first run, which counted every key while routing (no separate stats pass)
    stats = {"spec": dataset.spec, "messages": messages, "keys": runs[0].keys,
             "p1": runs[0].top_key_messages / messages if messages else 0.0}
    plot = None if args.plot is None else imbalance_over_time(runs, args.plot, f"{stats['spec']}, S={args.sources}")
    if args.json:
        print_json({"dataset": {k: stats[k] for k in ("spec", "messages", "keys", "p1")},
                    "runs": [r.summary() for r in runs]})
        return 0
    print(f"dataset {stats['spec']}: {stats['messages']:,} messages, {stats['keys']:,} keys, "
          f"p1 = {stats['p1']:.4f}; {args.sources} sources")
    print_table(
        [r.summary() for r in runs],
        [
            ("grouping", "grouping", str),
            ("W", "workers", str),
            ("avg imbalance", "avg_imbalance_fraction", lambda v: f"{v:.3e}"),
            ("final imbalance", "final_imbalance_fraction", lambda v: f"{v:.3e}"),
            ("load std-dev %", "load_stddev", lambda v: f"{v:.3f}"),
            ("dist_cost", "dist_cost", lambda v: f"{v:.2f}"),
            ("msgs/s", "messages_per_second", lambda v: f"{v:,.0f}"),
        ],
    )
    if plot is not None:
        print(f"plot written to {plot}")
    return 0


def _one(dataset: Dataset, spec: str, workers: int, args, messages: int, capacities):
    def run(progress):
        return simulate(dataset, spec, workers, args.sources, rate=args.rate, split=args.split,
                        checkpoint=args.checkpoint, messages_hint=messages, capacities=capacities,
                        resizes=args.resize, progress=progress, engine=args.engine)

    if args.json:  # no bar is drawn under --json: skip tqdm's import (part of the start-up a script pays)
        return run(None)
    bar = progress_bar(messages, f"{spec} W={workers}")
    with bar:
        last = [0]

        def advance(n: int) -> None:
            bar.update(n - last[0])
            last[0] = n

        return run(advance)
