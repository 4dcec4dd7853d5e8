"""``keysplit compare``: put measured topology runs next to a replay's estimates (throughput, latency, balance, counts).

Topology runs (from Redis) next to a Spark replay's estimates, per grouping."""

from __future__ import annotations

import argparse
import os

from keysplit.cli import command_summary
from keysplit.commands.common import (
    add_redis_options,
    comma_list,
    ensure_output_dir,
    print_json,
    print_table,
    redis_url,
)
from keysplit.errors import KeysplitError
from keysplit.outputs import inside, refuse_inputs

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="For each run, the replay's entry of the same grouping side by side: throughput, latency "
        "p50/p99, imbalance, memory, and whether the run's final counts equal the replay's exact counts. "
        "Prints a table and writes comparison.json and PNG plots. Run and replay must be of the same dataset.",
        epilog="examples:\n"
        "  keysplit compare --run latest --replay replay/\n"
        "  keysplit compare --run kg-1,pkg-1 --replay replay/ --out compare/ --json",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--run", required=True, type=comma_list, metavar="RUN_ID[,RUN_ID...]",
                   help="topology run ids (keysplit run; `latest` is the newest finished run)")
    p.add_argument("--replay", required=True, metavar="DIR", help="replay directory (keysplit replay --out)")
    p.add_argument("--out", metavar="DIR", help="where to write comparison.json and the plots (default DIR/compare)")
    add_redis_options(p, "Redis holding the runs (default: the project-managed server)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--json", action="store_true", help="print the comparison (comparison.json's object) instead")
    p.set_defaults(func=run)


#: What ``compare`` writes in --out, and what it reads in the replay directory.
OUTPUTS = ("comparison.json", "throughput_latency.png", "loads.png", "imbalance.png", "agreement.png")
REPLAY_FILES = ("summary.json", "counts.parquet", "results.parquet", "timeseries.parquet", "dataset.csv")


def check_outputs(out: str, replay: str) -> None:
    """Refuse an --out that would write over, or into, one of the replay's files (any spelling)."""
    inputs = [os.path.join(replay, name) for name in REPLAY_FILES]
    for name in OUTPUTS:
        refuse_inputs("--out", os.path.join(out, name), inputs)
    for folder in inputs:
        if os.path.exists(folder) and inside(out, folder):
            raise KeysplitError(f"--out {out} is inside the replay's {folder}; choose another output directory")


def _pair(a, b, fmt, ratio=None) -> str:
    text = f"{'-' if a is None else fmt(a)} | {'-' if b is None else fmt(b)}"
    return text if ratio is None else f"{text} ({ratio:.2f})"


def run(args: argparse.Namespace) -> int:
    from keysplit import compare, compare_plots
    from keysplit.runs.redis_server import session

    compare.load_replay(args.replay)  # a missing replay fails before Redis starts
    # and so does an output directory that cannot be created (after the replay check: the default is in it)
    out = args.out if args.out is not None else os.path.join(args.replay, "compare")
    check_outputs(out, args.replay)  # never over one of the replay's files
    out = ensure_output_dir(out)
    with session(redis_url(args)) as (conn, _url):  # a managed server started here is saved and stopped after
        result = compare.compare(conn, args.run, args.replay)
    path = compare.write(result, out)
    plots = [] if args.no_plots else compare_plots.plot(result, args.replay, out)
    if args.json:
        print_json(result)
        return 0
    num = lambda v: f"{v:,.0f}"  # noqa: E731
    ms = lambda v: f"{v:,.2f}"  # noqa: E731
    sci = lambda v: f"{v:.2e}"  # noqa: E731
    rows = [{
        "grouping": r["grouping"], "run": r["run_id"],
        "tp": _pair(r["throughput"]["run_words_per_second"], r["throughput"]["replay_estimate"], num,
                    r["ratio"]["throughput"]),
        "p50": _pair(r["latency_p50_ms"]["run"], r["latency_p50_ms"]["replay"], ms, r["ratio"]["latency_p50_ms"]),
        "p99": _pair(r["latency_p99_ms"]["run"], r["latency_p99_ms"]["replay"], ms, r["ratio"]["latency_p99_ms"]),
        "imb": _pair(r["final_imbalance_fraction"]["run"], r["final_imbalance_fraction"]["replay"], sci),
        "mem": _pair(r["dist_cost"]["run"], r["dist_cost"]["replay"], lambda v: f"{v:.2f}"),
        "counts": ("results " if r.get("compared") == "results" else "") + ("equal" if r["counts_equal"] else
        "DIFFER ({missing} missing, {extra} extra, {different} different)".format(**r["counts_diff"])),
        "loads": "equal" if r["loads_equal"] else "differ",
    } for r in result["rows"]]
    print(f"dataset {result['dataset']['spec']} (sha256 {result['dataset']['sha256'][:12]}): run | replay "
          "(replay / run)")
    print(f"calibration: {result.get('calibration') or 'uncalibrated'} (the replay model's costs; `keysplit "
          "calibrate` makes a profile, `keysplit replay --calibration NAME` uses it)")
    if result["rows"]:  # every row's knobs agree with the replay's (compare refuses otherwise): print the first's
        print("knobs: " + ", ".join(f"{k['option']} {k['run'] if k['run'] is not None else k['replay']}"
                                    for k in result["rows"][0]["knobs"]))
    print_table(rows, [
        ("grouping", "grouping", str), ("run", "run", str), ("words/s", "tp", str), ("p50 ms", "p50", str),
        ("p99 ms", "p99", str), ("final imbalance", "imb", str), ("dist_cost", "mem", str),
        ("counts", "counts", str), ("loads", "loads", str),
    ])
    for r in result["rows"]:
        for note in r["notes"]:
            print(f"note: {r['run_id']}: {note}")
    print(f"wrote {path}" + (f" and {', '.join(os.path.basename(p) for p in plots)}" if plots else ""))
    return 0
