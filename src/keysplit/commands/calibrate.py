"""``keysplit calibrate``: fit the topology model's costs to measured runs stored in Redis and store a named profile.

Fit the topology model's costs to runs already measured and stored in Redis (local runs, or cluster runs
``--collect``-ed), and store the named profile that ``keysplit replay --calibration NAME`` uses."""

from __future__ import annotations

import argparse
import sys
import time

from keysplit.cli import command_summary
from keysplit.commands.common import add_redis_options, comma_list, print_json, print_table, redis_url

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="Read finished runs from Redis (keysplit run, or a cluster run collected with `keysplit run "
        "wordcount --collect ID`), fit the model's per-tuple cost, counter cost and return delay so that it "
        "reproduces them, and store the profile in $KEYSPLIT_HOME/calibrations/NAME.json for `keysplit replay "
        "--calibration NAME`. Needs two runs or more that differ in grouping, CPU delay or rate, one of them "
        "closed loop with a CPU delay that saturates a counter (e.g. kg and sg at 1 ms).",
        epilog="example:\n  keysplit run wordcount -g kg --dataset text:zipf.txt -W 8 -S 4 -A 2 --cpu-delay 1 "
        "--run-id cal-kg\n  keysplit run wordcount -g sg --dataset text:zipf.txt -W 8 -S 4 -A 2 --cpu-delay 1 "
        "--run-id cal-sg\n  keysplit calibrate --run cal-kg,cal-sg --name here\n"
        "A fitted cost of 0 is a valid fit: the runs need none of that cost to be reproduced.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--run", required=True, type=comma_list, metavar="ID[,ID...]", help="the runs to fit")
    p.add_argument("--name", default="default", metavar="NAME",
                   help="the profile's name (default: default); replaces a profile of that name")
    add_redis_options(p, "Redis holding the runs (default: the project-managed server)")
    p.add_argument("--json", action="store_true", help="print the profile (the stored JSON) instead of a table")
    p.set_defaults(func=run)


def load_runs(conn, run_ids: list[str]) -> list[dict]:
    """The finished runs' summaries; a one-line KeysplitError for a run that is missing or not finished."""

    from keysplit.errors import KeysplitError
    from keysplit.runs.collect import stored_summary
    from keysplit.runs.records import check_run_id, read_record
    from keysplit.runs.topology_view import is_topology_run, view_of
    from keysplit.storm.keys import RunKeys

    runs = []
    for run_id in dict.fromkeys(run_ids):
        check_run_id(run_id)
        raw = conn.get(RunKeys(run_id).summary)
        if raw is None:
            record = read_record(conn, run_id)
            state = "no such run" if record is None else f"it is {record['state']}"
            raise KeysplitError(f"run {run_id} has no summary in this Redis ({state}); calibrate from finished "
                                "runs (a cluster run: `keysplit run wordcount --collect ID` first)")
        summary = stored_summary(raw, run_id)  # a damaged one: one line
        if is_topology_run(summary):  # a topology file's run: its keyed stage, as the model reads a run
            summary = view_of(conn, summary)
        runs.append(summary)
    return runs


def make_profile(name: str, runs: list[dict]) -> dict:
    """Fit ``runs`` and build the profile: kernel overheads at the top (what the replay reads), the fitted and
    measured values, the runs with their knobs, and how well the model then reproduces each."""
    from keysplit.topology_model.calibration import check_profile_name
    from keysplit.topology_model.profile import (
        arrays_of_run,
        check_fittable,
        fit,
        fitted_ranges,
        kernel_overheads,
        reproduction,
        run_record,
    )
    from keysplit.topology_model.storm_terms import ClusterTerms

    check_profile_name(name)
    check_fittable(runs)  # before the datasets are routed
    arrays = [arrays_of_run(r) for r in runs]
    result = fit(runs, arrays)
    terms = ClusterTerms.of_run(runs[0])
    profile = {"name": name, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               **kernel_overheads(result["fitted"], result["measured"], terms),
               "fitted": result["fitted"], "fitted_names": list(fitted_ranges(runs[0].get("shape") or "wordcount")),
               "measured": result["measured"],
               "terms": terms.as_dict(), "runs": [run_record(r) for r in runs]}
    profile["fit"] = reproduction(runs, arrays, profile)
    return profile


def run(args: argparse.Namespace) -> int:
    from keysplit.runs.redis_server import session
    from keysplit.topology_model.calibration import check_profile_name, save_profile

    check_profile_name(args.name)  # a bad name fails before Redis starts
    with session(redis_url(args)) as (conn, _url):
        runs = load_runs(conn, args.run)
    from keysplit.topology_model.profile import check_fittable

    check_fittable(runs)  # a refusal stays one line, before the note below
    if not args.json:  # the fit runs the model hundreds of times: say so before the seconds it is silent
        print(f"calibrate: fitting the model to {len(runs)} runs (a grid search: about 10 s, a minute more the first "
              "time after the model is installed or changed, which compiles it)...", file=sys.stderr, flush=True)
    profile = make_profile(args.name, runs)
    path = save_profile(profile)
    if args.json:
        print_json(profile | {"path": path})
        return 0
    print_profile(profile, path)
    return 0


def print_profile(profile: dict, path: str) -> None:
    """What ``keysplit calibrate`` prints of the profile it wrote to ``path``: the fitted and measured values, then
    each run measured and as the model reproduces it (the guide's sample, docs_hooks/calibrate_sample.py)."""
    from keysplit.topology_model.profile import describe

    name = profile["name"]
    print(f"calibration {name} from {len(profile['runs'])} runs ({profile['terms']['runtime']}, "
          f"{profile['terms']['worker_processes']} worker processes): {describe(profile)}")

    def cell(row: dict, key: str) -> str:
        ratio = row["ratio"][key]
        shown = "-" if ratio is None else f"{ratio:.2f}"  # no ratio where the run measured 0
        return f"{row['measured'][key]:,.0f} / {row['predicted'][key]:,.0f} ({shown})"

    rows = [{"run": r["run_id"], "w": cell(r, "words_per_second"), "p": cell(r, "p50_ms"), "q": cell(r, "p99_ms"),
             "ok": "yes" if r["within"] else "NO"} for r in profile["fit"]]
    print_table(rows, [("run", "run", str), ("words/s run / model", "w", str), ("p50 ms", "p", str),
                       ("p99 ms", "q", str), ("within 15%/25%", "ok", str)])
    print(f"wrote {path}; use it with `keysplit replay ... --calibration {name}`")
