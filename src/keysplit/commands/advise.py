"""``keysplit advise``: measure a dataset and recommend a grouping (with parameters) from simulations at each W.

Which grouping for my data, from its measures and simulations at each W."""

from __future__ import annotations

import argparse
import math
import time

from keysplit.cli import command_summary
from keysplit.commands.common import int_list, positive_float, positive_int, print_json, print_table

NAME, HELP = command_summary(__doc__)


def memory_budget(text: str) -> float:
    value = positive_float(text)
    if value < 1.0:
        raise argparse.ArgumentTypeError(f"the memory budget is a dist_cost, at least 1.0 (KG's), got {text}")
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Measure a dataset (messages, keys, p1, p2, keys above 1/(5W), drift of the hot set, "
        "timestamps), simulate a shortlist of groupings at each W (kg, pkg, pkg:d=D and salt:k=D on the fast "
        "path over the whole stream; those and potc, dchoices, wchoices (capacity=auto), fish, gedik over an "
        "evenly strided sample), and recommend one spec with a reason in the papers' terms.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n  keysplit advise --dataset zipf:z=1.2,keys=3000,messages=200000,seed=4 -W 10,20\n"
        "  keysplit advise --dataset text:zipf.txt -W 8 --memory 2.0 --plot advice.png\n\n"
        "rules, in order:\n"
        "  1. no splitting fits --memory -> the best one-worker-per-key grouping (kg, potc, gedik)\n"
        "  2. KG's imbalance <= 1e-2 -> kg\n"
        "  3. the hot set drifts (overlap < 0.5) and FISH balances -> fish\n"
        "  4. p1 <= 2/W -> pkg\n"
        "  5. else the cheapest in memory of pkg:d=D, dchoices, wchoices that balances\n"
        "aggregation = partial counts per key per flush (distinct (key, worker) pairs / distinct keys per\n"
        "--flush messages).",
    )
    p.add_argument("--dataset", required=True, metavar="SPEC", help="dataset spec (see `keysplit datasets --help`)")
    p.add_argument("--workers", "-W", type=int_list, default=[10], metavar="W[,W...]", help="worker counts "
                   "(default 10)")
    p.add_argument("--sources", "-S", type=positive_int, default=5, metavar="S", help="sources (default 5)")
    p.add_argument("--memory", type=memory_budget, default=math.inf, metavar="BUDGET",
                   help="largest acceptable dist_cost (memory relative to KG; 1.0 = never split a key)")
    p.add_argument("--sample", type=positive_int, default=50_000, metavar="N",
                   help="messages of the strided sample every candidate runs on (default 50,000)")
    p.add_argument("--flush", type=positive_int, default=1000, metavar="N",
                   help="messages between two flushes of partial counts (default 1,000)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw imbalance, dist_cost and aggregation cost of every candidate")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from keysplit.advise import REFERENCE, advise
    from keysplit.datasets import open_dataset, require_records
    from keysplit.plots import check_plot_path, refuse_foreign_plot
    from keysplit.sizes import check_workers

    if args.plot is not None:
        check_plot_path(args.plot)
        refuse_foreign_plot(args.plot)
    check_workers(args.workers, args.sources, list(REFERENCE))  # before any per-worker state is allocated
    started = time.perf_counter()
    dataset = open_dataset(args.dataset)
    require_records(dataset)
    advice, timing = advise(dataset, args.workers, args.sources, args.memory, args.sample, args.flush)
    timing["total_seconds"] = time.perf_counter() - started
    if args.plot is not None:
        draw(advice, args.plot, dataset.spec)
    if args.json:
        print_json({"dataset": dataset.spec, "sources": args.sources, "memory": None if math.isinf(args.memory)
                    else args.memory, "advice": [a.to_json() for a in advice], "timing": timing})
        return 0
    first = advice[0].profile
    print(f"dataset {dataset.spec}: {first['messages']:,} messages, {first['keys']:,} keys, p1 = {first['p1']:.4f}, "
          f"p2 = {first['p2']:.4f}, timestamps: {'yes' if first['timestamps'] else 'no'}")
    for a in advice:
        pr = a.profile
        print(f"\nW={a.workers}: {pr['hot_keys']} key(s) above 1/(5W); hot-set overlap first/last tenth "
              f"{pr['drift_first_last']:.2f}, consecutive tenths min {pr['drift_consecutive_min']:.2f} "
              f"mean {pr['drift_consecutive_mean']:.2f}")
        print_table(
            [c.__dict__ for c in a.candidates],
            [
                ("candidate", "spec", str),
                ("avg imbalance", "imbalance", lambda v: f"{v:.2e}"),
                ("dist_cost", "dist_cost", lambda v: f"{v:.2f}"),
                ("aggregation", "aggregation", lambda v: f"{v:.2f}"),
                ("full-stream imbalance", "full_imbalance", lambda v: "-" if v is None else f"{v:.2e}"),
                ("note", "note", str),
            ],
        )
        print(f"recommended at W={a.workers}: {a.recommended}\n  {a.reason}")
    print(f"\n{timing['total_seconds']:.1f} s (measuring {timing['measure_seconds']:.1f} s, simulating "
          f"{timing['simulate_seconds']:.1f} s)")
    if args.plot is not None:
        print(f"plot written to {args.plot}")
    return 0


def advice_figure(advice, title: str):
    """One row per W: each candidate's sample imbalance (log scale), dist_cost and aggregation cost; the
    recommendation in green, ruled-out candidates in grey (named in the legend, right of the panels)."""
    from matplotlib.patches import Patch

    from keysplit.plots import legend_outside, pyplot

    plt = pyplot()
    fig, axes = plt.subplots(len(advice), 3, figsize=(15, 3.2 * len(advice)), squeeze=False)
    for row, a in zip(axes, advice):
        names = [c.spec for c in a.candidates]
        colors = ["tab:green" if c.spec == a.recommended else "tab:gray" if c.note else "tab:blue"
                  for c in a.candidates]
        row[0].barh(names, [max(c.imbalance, 1e-9) for c in a.candidates], color=colors)
        row[0].set_xscale("log")
        row[0].set_xlabel("avg imbalance fraction on the sample\n(max − mean load, per message)")
        row[0].set_title(f"W={a.workers}: recommended {a.recommended}")
        row[1].barh(names, [c.dist_cost for c in a.candidates], color=colors)
        row[1].set_xlabel("dist_cost (memory relative to KG, ×)")
        row[2].barh(names, [c.aggregation for c in a.candidates], color=colors)
        row[2].set_xlabel("aggregation cost (partial counts per key per flush)")
        for ax in row:
            ax.set_ylabel("candidate (grouping spec)")
            ax.invert_yaxis()
        legend_outside(row[2], handles=[Patch(color="tab:green", label="recommended"),
                                        Patch(color="tab:blue", label="candidate"),
                                        Patch(color="tab:gray", label="ruled out (note)")])
    fig.suptitle(title, fontsize=9)
    return fig


def draw(advice, path: str, title: str) -> None:
    """:func:`advice_figure` written to ``path`` (``keysplit advise --plot``), whole or not at all."""
    from keysplit.plots import save_figure

    save_figure(advice_figure(advice, title), path)
