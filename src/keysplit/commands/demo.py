"""``keysplit demo`` (what ``make demo`` runs): the groupings compared on a skewed dataset, end to end."""

from __future__ import annotations

import argparse

from keysplit.commands.common import print_table
from keysplit.datasets import open_dataset
from keysplit.groupings import available
from keysplit.simulate import simulate

DEMO_SIMULATION = "zipf:z=1.1,keys=10000,messages=300000,seed=42"


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="compare every grouping on a skewed dataset (what `make demo` runs)",
                       description="Simulate every available grouping on a skewed Zipf dataset and print "
                       "a comparison table.")
    p.add_argument("--workers", "-W", type=int, default=10, help="workers (default 10)")
    p.add_argument("--sources", "-S", type=int, default=5, help="sources (default 5)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    dataset = open_dataset(DEMO_SIMULATION)
    stats = dataset.stats()
    print(f"== 1. simulation: {DEMO_SIMULATION} (p1 = {stats['p1']:.3f}), W={args.workers}, S={args.sources}")
    rows = []
    for name in available():
        result = simulate(dataset, name, args.workers, args.sources, messages_hint=stats["messages"])
        rows.append(result.summary())
    print_table(rows, [
        ("grouping", "grouping", str),
        ("avg imbalance", "avg_imbalance_fraction", lambda v: f"{v:.2e}"),
        ("final imbalance", "final_imbalance_fraction", lambda v: f"{v:.2e}"),
        ("load std-dev %", "load_stddev", lambda v: f"{v:.3f}"),
        ("dist_cost (memory vs KG)", "dist_cost", lambda v: f"{v:.2f}"),
    ])
    return 0
