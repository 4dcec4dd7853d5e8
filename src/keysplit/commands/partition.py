"""``keysplit partition-experiment``: Gedik's §5 experiment: b and m of scan/redist/readj vs uniform and consistent
hashing, N = 1..10.

Gedik §5's experiment, growing N from 1 to 10 channels on Zipf keys and printing the relative imbalance b (eq. 11) and
relative migration cost m (eq. 12) of uniform hashing, consistent hashing and the scan / redist / readj partitioning
functions. The logic is in :mod:`keysplit.partitioning.experiment`."""

from __future__ import annotations

import argparse

from keysplit.cli import command_summary
from keysplit.commands.common import (
    ExamplesHelpFormatter,
    comma_list,
    finite_float,
    non_negative_float,
    positive_int,
    print_json,
    print_table,
    progress_bar,
)
from keysplit.errors import SpecError
from keysplit.partitioning.experiment import (
    APPROACHES,
    ExperimentConfig,
    ExperimentResult,
    run_experiment,
    work_units,
)
from keysplit.partitioning.resources import Resources
from keysplit.partitioning.utility import utility
from keysplit.plots import check_plot_path, legend_outside, pyplot, refuse_foreign_plot, save_figure, series_style

NAME, HELP = command_summary(__doc__)


def approach_list(text: str) -> tuple[str, ...]:
    items = tuple(a.lower() for a in comma_list(text))
    bad = [a for a in items if a not in APPROACHES]
    if bad:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(APPROACHES)}, got {text!r}")
    return items


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Grow a parallel region from 1 to N channels, one channel per adaptation period, on Zipf "
        "keys; print the relative load imbalance b (eq. 11) and relative migration cost m (eq. 12, the "
        "migration from N-1 to N over the ideal) of each approach. Defaults are the paper's Table 1.",
        epilog="examples:\n"
        "  keysplit partition-experiment --plot partition.png\n"
        "  keysplit partition-experiment --z 1.2 --max-workers 16 --approaches uniform,consistent,scan --json",
        formatter_class=ExamplesHelpFormatter,
    )
    p.add_argument("--domain", type=positive_int, default=10**6, metavar="D", help="domain size |D| (default 10^6)")
    p.add_argument("--z", type=non_negative_float, default=1.0, help="Zipf skew (default 1.0)")
    p.add_argument("--alpha", type=finite_float, default=1.2, help="imbalance tolerance alpha (default 1.2)")
    p.add_argument("--resources", default="LCL", help="beta_s beta_c beta_n as C/L/Q letters (default LCL)")
    p.add_argument("--sigma", type=finite_float, default=0.1, help="frequency threshold scaler sigma (default 0.1)")
    p.add_argument("--utility", default="APM", help="utility function A|APM|APLM|ATM|ATLM (default APM)")
    p.add_argument("--max-workers", type=positive_int, default=10, metavar="N", help="grow to N channels (10)")
    p.add_argument("--vnodes", type=positive_int, default=1000, help="consistent-hash replicas per channel (1000)")
    p.add_argument("--runs", type=positive_int, default=5, help="runs with different hash seeds, averaged (5)")
    p.add_argument("--seed", type=int, default=1, help="seed of the sampled stream for the lossy-counter size")
    p.add_argument("--stream", type=int, default=10**6, metavar="MSGS",
                   help="messages streamed through a lossy counter to report its peak size (0: skip; default 10^6)")
    p.add_argument("--approaches", type=approach_list, default=APPROACHES, metavar="A[,A...]",
                   help=f"approaches to run (default {','.join(APPROACHES)})")
    p.add_argument("--plot", metavar="FILE.png", help="also draw b and m against N (like the paper's Fig. 6; the "
                   "extension picks the format: .png, .svg, .pdf, ...)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=run)


def config_from(args: argparse.Namespace) -> ExperimentConfig:
    Resources.parse(args.resources, args.alpha)  # SpecError on bad letters or alpha <= 1
    utility(args.utility)
    if not 0 < args.sigma <= 1:
        raise SpecError(f"--sigma must be in (0, 1], got {args.sigma}")
    if args.max_workers < 2:
        raise SpecError(f"--max-workers must be at least 2 (migration is measured from N-1 to N), "
                        f"got {args.max_workers}")
    if args.stream < 0:
        raise SpecError(f"--stream must not be negative, got {args.stream}")
    return ExperimentConfig(domain=args.domain, z=args.z, alpha=args.alpha, resources=args.resources.upper(),
                            sigma=args.sigma, utility=args.utility.lower(), max_workers=args.max_workers,
                            vnodes=args.vnodes, runs=args.runs, seed=args.seed, stream=args.stream,
                            approaches=args.approaches)


def run(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    if args.plot is not None:
        check_plot_path(args.plot)
        refuse_foreign_plot(args.plot)
    bar = progress_bar(work_units(cfg), "partition-experiment", enabled=not args.json, unit="step")
    with bar:
        result = run_experiment(cfg, progress=bar.update)
    written = None if args.plot is None else plot(result, args.plot)
    if args.json:
        print_json(result.to_dict())
        return 0
    print_tables(result)
    if written is not None:
        print(f"plot written to {written}")
    return 0


def _num(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def print_tables(result: ExperimentResult) -> None:
    cfg = result.config
    approaches = cfg.approaches
    print(f"Zipf z={cfg.z:g}, |D|={cfg.domain:,}, alpha={cfg.alpha:g}, {cfg.resources}, sigma={cfg.sigma:g}, "
          f"U={cfg.utility.upper()}, {cfg.vnodes} replicas, mean of {cfg.runs} run(s)")
    print("b = relative load imbalance (eq. 11, <= 1 meets alpha); m = relative migration cost from N-1 to N "
          "(eq. 12, 1 = ideal)\n")
    rows = []
    for n in range(1, cfg.max_workers + 1):
        row: dict = {"N": n}
        for a in approaches:
            r = result.row(a, n)
            row[f"{a} b"], row[f"{a} m"] = r.b, r.m
        rows.append(row)
    mean: dict = {"N": "mean 2..N"}
    for a in approaches:
        mean[f"{a} b"], mean[f"{a} m"] = result.mean(a, "b"), result.mean(a, "m")
    rows.append(mean)
    columns = [("N", "N", str)]
    for a in approaches:
        columns += [(f"{a} b", f"{a} b", _num), (f"{a} m", f"{a} m", _num)]
    print_table(rows, columns)
    algos = [a for a in approaches if a not in ("uniform", "consistent")]
    if not algos:
        return
    print("\nexplicit hash size |H_p|, peak lossy-counter entries (epsilon = 0.1 delta), construction time (ms)\n")
    rows = []
    for n in range(2, cfg.max_workers + 1):
        row = {"N": n, "lossy": result.row(algos[0], n).lossy}
        for a in algos:
            r = result.row(a, n)
            row[f"{a} |H_p|"], row[f"{a} ms"] = r.explicit, r.seconds * 1000
        rows.append(row)
    columns = [("N", "N", str), ("lossy", "lossy", lambda v: "-" if v is None else str(v))]
    for a in algos:
        columns += [(f"{a} |H_p|", f"{a} |H_p|", lambda v: f"{v:.0f}"), (f"{a} ms", f"{a} ms", lambda v: f"{v:.1f}")]
    print_table(rows, columns)


def partition_figure(result: ExperimentResult):
    """Two panels against N: relative migration cost m (log scale) and relative load imbalance b."""
    plt = pyplot()
    cfg = result.config
    fig, (ax_m, ax_b) = plt.subplots(1, 2, figsize=(11, 4))
    for index, a in enumerate(cfg.approaches):
        rows = [r for r in result.rows if r.approach == a]
        style = series_style(APPROACHES.index(a) if a in APPROACHES else index)
        ax_m.plot([r.workers for r in rows if r.m is not None], [r.m for r in rows if r.m is not None],
                  label=a, **style)
        ax_b.plot([r.workers for r in rows], [r.b for r in rows], label=a, **style)
    ax_m.set_yscale("log")
    ax_m.set_xlabel("number of channels N (count)")
    ax_m.set_ylabel("relative migration cost m (×, 1 = ideal)")
    ax_b.set_xlabel("number of channels N (count)")
    ax_b.set_ylabel("relative load imbalance b (×, ≤ 1 meets α)")
    for ax in (ax_m, ax_b):
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.grid(alpha=0.3)
    legend_outside(ax_b)
    fig.suptitle(f"Zipf z={cfg.z:g}, |D|={cfg.domain:,}, {cfg.resources}, alpha={cfg.alpha:g}, sigma={cfg.sigma:g}")
    return fig


def plot(result: ExperimentResult, path: str) -> str:
    """:func:`partition_figure` written to ``path``; returns the path written."""
    return save_figure(partition_figure(result), path)
