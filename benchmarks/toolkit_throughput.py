"""Throughput of a toolkit topology on the local runner with the router sending one tuple per row (``batch=1``) and
rows in batches (``batch=100``): does batching help a user's keyed edge as it helped the word count
(docs/design/batches.md)?

The topology is topologies/pageviews.py's (keysplit's feed of ``(time, page, bytes)`` rows -> S routers -> W partial
sums -> M merges committing exactly once, top-10), written to a temporary file once per batch size, over one
generated ``pageviews:`` CSV. Each run is ``keysplit run FILE --dataset csv:...`` done in this process
(``run_topology``, as the tests run it), with max pending above the row count so that the spout's in-flight cap
does not bind: the routers, the runner and the protocol do. Throughput is rows / (last ack - first emit), as every
run reports it; the partial and merge flush periods (1 s) are in it, so short runs understate both modes alike.
The modes alternate (``--repeats`` rounds) so that a load change on a shared machine hits both; the load averages
before each run are printed, and the ratio is of the medians measured in this process.

    .venv/bin/python benchmarks/toolkit_throughput.py [--rows 20000] [--max-pending 20000] [--batch 100] \\
        [--grouping pkg:d=2] [--repeats 1] [--worker-processes 2] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

from keysplit.datasets import open_dataset, write_dataset
from keysplit.runs import redis_server
from keysplit.runs.topology_file import load_topology
from keysplit.runs.topology_run import TopologyRunOptions, read_results, run_topology
from keysplit.storm.keys import RunKeys

TOPOLOGY = '''
from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Sum, Topology


class PageBytes(Topology):
    views = FeedSpout.spec(fields=["time", "page", "bytes"])
    route = KeyRouter.spec(inputs=[views], key="page", grouping={grouping!r}, batch={batch},
                           batch_ms={batch_ms}, par={sources})
    partial = Aggregate.partial(inputs=route, accumulator=Sum("bytes"), period=1.0, par={workers})
    total = Aggregate.merge(inputs=partial, top=10, par={merges})
'''


def load() -> str:
    """The machine's load averages (1, 5, 15 min), as `uptime` prints them."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def exact_bytes(csv_path: Path) -> dict[str, int]:
    """Each page's bytes summed with the csv module, not keysplit's reader: the totals every run must equal."""
    import csv

    out: Counter = Counter()
    with open(csv_path, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh):
            out[row["page"]] += int(row["bytes"])
    return dict(out)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=20_000, help="page views in the feed (default 20000)")
    p.add_argument("--max-pending", type=int, default=20_000, help="topology.max.spout.pending (default 20000)")
    p.add_argument("--batch", type=int, default=100, help="rows a batch holds at most (default 100)")
    p.add_argument("--batch-ms", type=float, default=20.0, help="ms a batch waits at most (default 20)")
    p.add_argument("--grouping", default="pkg:d=2")
    p.add_argument("--sources", type=int, default=2, help="router tasks (default 2)")
    p.add_argument("--workers", type=int, default=4, help="partial tasks (default 4)")
    p.add_argument("--merges", type=int, default=2, help="merge tasks (default 2)")
    p.add_argument("--worker-processes", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1, help="rounds of (batch 1, batch N), alternating (default 1)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()

    results: dict[int, list[float]] = {1: [], args.batch: []}
    rows_out = []
    with tempfile.TemporaryDirectory(prefix="keysplit-toolkit-bench-") as tmp:
        folder = Path(tmp)
        os.environ["KEYSPLIT_HOME"] = str(folder / "home")
        csv_path = folder / "views.csv"
        write_dataset(open_dataset(f"pageviews:messages={args.rows},seed=1"), str(csv_path))
        expected = exact_bytes(csv_path)
        server = redis_server.start_server(folder / "home")
        conn = redis_server.connect(server.url)
        try:
            for round_ in range(args.repeats):
                for batch in (1, args.batch):
                    path = folder / f"pagebytes_b{batch}.py"
                    path.write_text(TOPOLOGY.format(grouping=args.grouping, batch=batch, sources=args.sources,
                                                    workers=args.workers, merges=args.merges,
                                                    batch_ms=args.batch_ms))
                    before = load()
                    opts = TopologyRunOptions(
                        dataset=open_dataset(f"csv:{csv_path},key=page"), max_pending=args.max_pending,
                        worker_processes=args.worker_processes, timeout=900)
                    summary = run_topology(load_topology(str(path)), opts, conn, server.url,
                                           log_dir=folder / "logs" / f"{round_}-{batch}")
                    exact = read_results(conn, summary["run_id"], "total") == expected
                    rate = summary["rows_per_second"]
                    # rows per tuple the partial tasks received: that the batches did fill
                    held = [json.loads(v) for v in conn.hvals(RunKeys(summary["run_id"]).stage("partial", "tasks"))]
                    per_tuple = sum(t["records"] for t in held) / max(1, sum(t.get("tuples", 0) for t in held))
                    results[batch].append(rate)
                    row = {"round": round_, "batch": batch, "rows_per_second": round(rate, 1),
                           "wall_s": round(summary["wall_s"], 2),
                           "rows_per_partial_tuple": round(per_tuple, 1), "p50_ms": summary["latency_ms"].get("p50"),
                           "exact": exact, "load_before": before}
                    rows_out.append(row)
                    if not args.json:
                        print(f"batch {batch:>4}: {rate:>9,.0f} rows/s  wall {summary['wall_s']:6.1f} s  "
                              f"rows/tuple {per_tuple:5.1f}  exact totals {exact}  load {before}", flush=True)
        finally:
            redis_server.stop_server(folder / "home", save=False, force=True)
    single, batched = statistics.median(results[1]), statistics.median(results[args.batch])
    ratio = batched / single if single else float("nan")
    if args.json:
        print(json.dumps({"runs": rows_out, "ratio": ratio, "load_after": load()}, indent=2))
    else:
        print(f"batch {args.batch} / batch 1: {ratio:.2f}x (medians of {args.repeats} round(s); load now {load()})")
    return 0 if all(r["exact"] for r in rows_out) else 1


if __name__ == "__main__":
    sys.exit(main())
