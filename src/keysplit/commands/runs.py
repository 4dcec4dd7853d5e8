"""``keysplit runs``: list, show or delete the word-count runs stored in Redis.

The word-count runs stored in Redis, their state, and their removal."""

from __future__ import annotations

import argparse
import time

from keysplit.cli import command_summary
from keysplit.commands.common import add_redis_options, print_json, print_table, redis_url
from keysplit.errors import KeysplitError

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME,
        help=HELP,
        description="The runs of `keysplit run wordcount` stored in Redis, oldest first, with their state:\n"
        "loading, loaded (--load-only; waiting for a cluster), running, finished, or interrupted\n"
        "(Ctrl-C, SIGTERM, --timeout, a crash, or a process that died; `keysplit run wordcount\n"
        "--resume ID` continues it). A run id is never reused: delete a run to use its id again.",
        epilog="examples:\n  keysplit runs\n  keysplit runs show 20260101T120000-pkg-1a2b3c\n"
        "  keysplit runs delete R1 R2",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("action", nargs="?", choices=["list", "show", "delete"], default="list",
                   help="list (default), show ID, or delete ID...")
    p.add_argument("ids", nargs="*", metavar="ID", help="run ids (show: one; delete: one or more)")
    add_redis_options(p, "Redis URL (default: the project-managed server)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from keysplit.runs.records import check_run_id
    from keysplit.runs.redis_server import session

    if args.action == "list" and args.ids:
        raise KeysplitError(f"`keysplit runs` lists every run; to see one, use `keysplit runs show {args.ids[0]}`")
    if args.action == "show" and len(args.ids) != 1:
        raise KeysplitError("`keysplit runs show` takes exactly one run id")
    if args.action == "delete" and not args.ids:
        raise KeysplitError("`keysplit runs delete` needs at least one run id")
    for run_id in args.ids:
        check_run_id(run_id)
    if args.action == "list" and not args.json and redis_url(args) is None:
        from keysplit.home import keysplit_home

        if not (keysplit_home() / "redis").exists():  # no store here: say so, and create none
            return listing(None, False, managed=True)
    with session(redis_url(args)) as (conn, _url):
        if args.action == "show":
            return show(conn, args.ids[0], args.json)
        if args.action == "delete":
            return delete(conn, list(dict.fromkeys(args.ids)), args.json)
        return listing(conn, args.json, managed=redis_url(args) is None)


def listing(conn, as_json: bool, managed: bool = False) -> int:
    from keysplit.runs.records import list_runs

    runs = list_runs(conn) if conn is not None else []
    if as_json:
        print_json(runs)
        return 0
    if not runs:
        from keysplit.home import keysplit_home

        where = (f"in {keysplit_home()} (the nearest .keysplit/ from here up, or $KEYSPLIT_HOME)" if managed
                 else "in this Redis")
        print(f"no runs stored {where}; keysplit run wordcount ... stores one")
        return 0
    rows = [{"grouping": "-", "dataset": "-", **r,  # a record of a run stopped before it was described
             "start": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r["started"])) if r["started"] else "-",
             "words": f"{r['messages']:,}" if "messages" in r else "-"} for r in runs]
    print_table(rows, [("run id", "run_id", str), ("state", "state", str), ("grouping", "grouping", str),
                       ("dataset", "dataset", str), ("words", "words", str), ("start", "start", str)])
    return 0


def show(conn, run_id: str, as_json: bool) -> int:
    from keysplit.runs.collect import damaged_summary, stored_summary
    from keysplit.runs.records import read_record
    from keysplit.storm.keys import RunKeys

    record = read_record(conn, run_id)
    if record is None:
        raise KeysplitError(f"no run {run_id!r} in this Redis (see `keysplit runs`)")
    keys = RunKeys(run_id)
    summary = conn.get(keys.summary)
    out = {"record": record, "summary": stored_summary(summary, run_id) if summary else None}
    if as_json:
        print_json(out)
        return 0
    for key, value in record.items():
        if key == "started" or key in ("updated", "finished"):
            value = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(value)))
        print(f"{key}: {value}")
    if summary and "routers" in out["summary"]:  # a topology file's run (keysplit.runs.topology_run)
        from keysplit.commands.run_topology import print_summary as print_file_summary

        print()
        print_file_summary(out["summary"])
    elif summary:
        from keysplit.commands.run import print_summary

        print()
        try:
            print_summary(out["summary"])
        except (KeyError, TypeError, ValueError, AttributeError):
            raise damaged_summary(run_id) from None
    elif record["state"] == "interrupted" and record.get("feed_complete") and conn.exists(keys.feed):
        print(f"\ncontinue it with `keysplit run wordcount --resume {run_id}`, or delete it with "
              f"`keysplit runs delete {run_id}`")
    elif record["state"] == "interrupted":  # what --resume refuses (runs/wordcount.py resume_run)
        print(f"\nit was interrupted before its feed was completely loaded, so it cannot be resumed: delete it with "
              f"`keysplit runs delete {run_id}` and start again")
    return 0



def delete(conn, run_ids: list[str], as_json: bool) -> int:
    """All or nothing: every id must name a run that is not running, or nothing is deleted."""
    import shutil

    from keysplit.home import keysplit_home
    from keysplit.runs.records import delete_run, read_record

    records = {run_id: read_record(conn, run_id) for run_id in run_ids}
    missing = [run_id for run_id, record in records.items() if record is None]
    if missing:
        raise KeysplitError(f"no run {', '.join(missing)} in this Redis (see `keysplit runs`); nothing deleted")
    busy = [f"{r['run_id']} (pid {r.get('owner')})" for r in records.values() if r["state"] in ("loading", "running")]
    if busy:
        raise KeysplitError(f"run {', '.join(busy)} is still running: stop it first; nothing deleted")
    deleted = []
    for run_id in run_ids:
        keys = delete_run(conn, run_id)
        shutil.rmtree(keysplit_home() / "logs" / run_id, ignore_errors=True)
        deleted.append({"run_id": run_id, "keys": keys})
    if as_json:
        print_json(deleted)
    else:
        for d in deleted:
            print(f"deleted run {d['run_id']} ({d['keys']} keys and its task logs)")
    return 0
