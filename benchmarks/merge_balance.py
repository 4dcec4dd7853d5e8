"""Does the merge stage keep the balance the grouping made? A toolkit topology (keysplit's feed -> S routers -> W
partial counts -> M merges committing exactly once) on a Zipf ``z=2`` feed under PKG, run once per ``--cost-us``: the
accumulator (a count, in the project's src/) spends that much CPU in each ``add`` and each ``merge``, as a user's
sketch or model would. For each run: the CPU each merge task process used, the busiest against the mean (the target:
the task owning the hottest key no busier than twice the mean), and Redis per row, from the run's start (its feed
loaded) to its end: ``INFO cpu`` (used_cpu_sys + used_cpu_user, the whole server) and ``INFO commandstats`` (the
microseconds Redis spent executing commands, and the commands, over the rows).

The merge processes' CPU is read from outside (psutil, sampled every 0.25 s, children of this process whose command
line runs ``MergeAggregate``), so the same script measures any version of keysplit: run it once as it is and once
with an older ``src/`` first on the path (the local runner copies the keysplit it runs from into the workers), e.g.

    .venv/bin/python benchmarks/merge_balance.py                                  # this version
    git worktree add --detach /tmp/base BASE && PYTHONPATH=/tmp/base/src .venv/bin/python benchmarks/merge_balance.py

A version whose merge tasks record their own work (``stage:total:tasks``: entries, merges, CPU seconds) also prints it,
with the hottest key's owner (``merge_index``) named. Printed, never asserted: a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path

import psutil

from keysplit.datasets import open_dataset, write_dataset
from keysplit.runs import redis_server
from keysplit.runs.topology_file import load_topology
from keysplit.runs.topology_run import TopologyRunOptions, read_results, run_topology
from keysplit.storm.keys import RunKeys
from keysplit.toolkit.contract import merge_index

TOPOLOGY = '''
from costly import CostlyCount

from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Topology


class Keys(Topology):
    rows = FeedSpout.spec(fields=["key"])
    route = KeyRouter.spec(inputs=[rows], key="key", grouping={grouping!r}, par={sources})
    partial = Aggregate.partial(inputs=route, accumulator=CostlyCount({cost}), period={period}, par={workers})
    total = Aggregate.merge(inputs=partial, top=10, period={period}, par={merges})
'''

COSTLY = '''
import time

from keysplit.toolkit import Accumulator


def burn(us):
    end = time.process_time() + us / 1e6
    while time.process_time() < end:
        pass


class CostlyCount(Accumulator):
    """A count whose add and merge each spend cost_us microseconds of CPU."""

    def __init__(self, cost_us=0):
        super().__init__(cost_us=cost_us)
        self.cost_us = cost_us

    def zero(self):
        return 0

    def add(self, state, record):
        burn(self.cost_us)
        return state + 1

    def merge(self, a, b):
        burn(self.cost_us)
        return a + b
'''


def redis_cpu(conn) -> tuple[float, float, int, dict[str, float], dict[str, int]]:
    """Redis's CPU seconds (the server), the seconds and calls of its command executions, and each command's
    microseconds and calls (a script's commands count both in the script's call and in their own)."""
    info = conn.info("cpu")
    stats = conn.info("commandstats")
    return (float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
            sum(float(v["usec"]) for v in stats.values()) / 1e6, sum(int(v["calls"]) for v in stats.values()),
            {name.removeprefix("cmdstat_"): float(v["usec"]) for name, v in stats.items()},
            {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})


class Sampler(threading.Thread):
    """Every 0.25 s: the CPU seconds of each merge task process (the last value seen before it exits), and Redis's
    CPU when the run's state first reads ``running`` (its feed loaded)."""

    def __init__(self, conn, keys: RunKeys) -> None:
        super().__init__(daemon=True)
        self.conn, self.keys = conn, keys
        self.cpu: dict[int, float] = {}
        self.redis_start: tuple[float, float, int, dict[str, float], dict[str, int]] | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self.stop.wait(0.25):
            if self.redis_start is None and self.conn.hget(self.keys.record, "state") == "running":
                self.redis_start = redis_cpu(self.conn)
            for proc in me.children(recursive=True):
                try:
                    if any("MergeAggregate" in part for part in proc.cmdline()):
                        times = proc.cpu_times()
                        self.cpu[proc.pid] = times.user + times.system
                except psutil.Error:
                    continue


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=20_000, help="rows in the feed (default 20000)")
    p.add_argument("--keys", type=int, default=1000, help="distinct keys of the Zipf law (default 1000)")
    p.add_argument("--z", type=float, default=2.0, help="the Zipf exponent (default 2)")
    p.add_argument("--grouping", default="pkg:d=2")
    p.add_argument("--sources", type=int, default=2, help="router tasks (default 2)")
    p.add_argument("--workers", type=int, default=4, help="partial tasks (default 4)")
    p.add_argument("--merges", type=int, default=4, help="merge tasks (default 4)")
    p.add_argument("--period", type=float, default=1.0, help="flush and commit period, seconds (default 1)")
    p.add_argument("--cost-us", default="0,200", help="CPU microseconds of each add and merge, a run each (default "
                   "0,200)")
    p.add_argument("--max-pending", type=int, default=20_000)
    p.add_argument("--worker-processes", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    import keysplit

    out = {"keysplit": str(Path(keysplit.__file__).parent), "runs": []}
    with tempfile.TemporaryDirectory(prefix="keysplit-merge-balance-") as tmp:
        folder = Path(tmp)
        os.environ["KEYSPLIT_HOME"] = str(folder / "home")
        csv_path = folder / "keys.csv"
        write_dataset(open_dataset(f"zipf:z={args.z},keys={args.keys},messages={args.rows},seed=1"), str(csv_path))
        data = open_dataset(f"csv:{csv_path},key=key")
        expected = Counter(record[1][0] for record, _ in data.rows())
        hot, hot_rows = expected.most_common(1)[0]
        (folder / "project" / "topologies").mkdir(parents=True)
        (folder / "project" / "src").mkdir()
        (folder / "project" / "src" / "costly.py").write_text(COSTLY)
        server = redis_server.start_server(folder / "home")
        conn = redis_server.connect(server.url)
        try:
            for round_, cost in ((r, float(c)) for r in range(args.repeats) for c in args.cost_us.split(",")):
                path = folder / "project" / "topologies" / "keys_topology.py"
                path.write_text(TOPOLOGY.format(grouping=args.grouping, sources=args.sources, workers=args.workers,
                                                merges=args.merges, period=args.period, cost=cost))
                run_id = f"merge-balance-{round_}-{int(cost)}-{os.getpid()}"
                sampler = Sampler(conn, RunKeys(f"{run_id}-0"))
                sampler.start()
                load = os.getloadavg()[0]
                for attempt in range(3):  # a machine loaded past 60 s of start-up: start the run again
                    try:
                        summary = run_topology(load_topology(str(path)), TopologyRunOptions(
                            dataset=data, max_pending=args.max_pending, worker_processes=args.worker_processes,
                            timeout=1200, run_id=f"{run_id}-{attempt}"), conn, server.url,
                            log_dir=folder / "logs" / f"{run_id}-{attempt}")
                        break
                    except Exception as exc:
                        if "did not answer the multi-lang handshake" not in str(exc) or attempt == 2:
                            raise
                        print(f"start-up timed out on a load of {os.getloadavg()[0]:.1f}; again", file=sys.stderr)
                        sampler.stop.set()
                        sampler = Sampler(conn, RunKeys(f"{run_id}-{attempt + 1}"))
                        sampler.start()
                run_id = summary["run_id"]
                redis_end = redis_cpu(conn)
                sampler.stop.set()
                sampler.join()
                exact = read_results(conn, run_id, "total") == dict(expected)
                cpu = sorted(sampler.cpu.values(), reverse=True)
                start = sampler.redis_start or redis_end
                rows = summary["rows"]
                row = {"round": round_, "cost_us": cost, "rows": rows, "exact": exact,
                       "rows_per_second": round(summary["rows_per_second"], 1), "load_before": round(load, 2),
                       "hot_key_share": round(hot_rows / summary["rows"], 3),
                       "merge_process_cpu_s": [round(c, 2) for c in cpu],
                       "busiest_over_mean": round(cpu[0] / statistics.mean(cpu), 2) if cpu else None,
                       "redis_cpu_us_per_row": round(1e6 * (redis_end[0] - start[0]) / rows, 2),
                       "redis_command_us_per_row": round(1e6 * (redis_end[1] - start[1]) / rows, 2),
                       "redis_commands_per_row": round((redis_end[2] - start[2]) / rows, 3),
                       "redis_top_commands_us_per_row": dict(sorted(
                           ((name, round((us - start[3].get(name, 0.0)) / rows, 2))
                            for name, us in redis_end[3].items()), key=lambda kv: -kv[1])[:6]),
                       "redis_top_calls_per_row": dict(sorted(
                           ((name, round((n - start[4].get(name, 0)) / rows, 4))
                            for name, n in redis_end[4].items()), key=lambda kv: -kv[1])[:8])}
                tasks = conn.hgetall(RunKeys(run_id).stage("total", "tasks"))
                if tasks:  # the merge tasks' own account (this version and later)
                    work = {int(i): json.loads(t) for i, t in tasks.items()}
                    owner = merge_index(json.dumps(hot), args.merges)
                    busy = [work.get(i, {}).get("busy_s", 0.0) for i in range(args.merges)]
                    row.update({"hot_key_owner": owner, "merge_busy_s": [round(b, 3) for b in busy],
                                "owner_busy_over_mean": round(busy[owner] / statistics.mean(busy), 2),
                                "merge_entries": [work.get(i, {}).get("entries", 0) for i in range(args.merges)],
                                "merge_records": [work.get(i, {}).get("records", 0) for i in range(args.merges)],
                                "merge_commit_retries": sum(w.get("retries", 0) for w in work.values())})
                out["runs"].append(row)
                if not args.json:
                    print(json.dumps(row), flush=True)
        finally:
            redis_server.stop_server(folder / "home", save=False, force=True)
    if args.json:
        print(json.dumps(out, indent=2))
    return 0 if all(r["exact"] for r in out["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
