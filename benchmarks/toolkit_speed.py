"""A toolkit topology against the word count, in one process on one machine: does a user's keyed edge run at the word
count's speed?

The toolkit topology is topologies/pageviews.py's shape (keysplit's feed of ``(time, page, bytes)`` rows -> 2
routers, PKG -> 4 partial tasks -> 2 merges committing exactly once, top-10) at its default knobs, written into a
temporary project whose ``src/`` holds a ``Sum`` that sleeps D ms in each ``add`` (the word count's ``--cpu-delay``:
a partial task's cost per row; the workers' bound is W / D rows a second). Each run is a ``keysplit run ... --json``
subprocess, as a user runs it; the word count (``keysplit run wordcount``, 4 routers, 8 counters) runs beside it over
seeded Zipf text, the two alternating (``--repeats`` rounds) so that a load change on a shared machine hits both.
The targets (throughput is rows or words / (last ack - first emit), as every run reports it):

- **ceiling**, D = 0: the page views' rows/s at least 0.9 of the word count's words/s in the same round, and the
  word count at least 110,000 words/s; beside them the page views with one tuple a row (``batch=1`` at the feed
  and the router), the toolkit before its rows travelled in batches, and the word count written with the toolkit
  (a router that splits each line into its words: :data:`TOOLKIT_WORDCOUNT`) over the same text;
- **D = 1 ms**: the page views at least 90% of W / D (W = 4 partial tasks: 3,600 rows/s), the word count at least
  90% of its own W / D (W = 8 counters: 7,200 words/s);
- **light load** (``--light-rate`` rows/s open loop at D = 1 ms): the page views' p50 within 0.6 T + 50 ms, T the
  partial and merge period (1 s).

    .venv/bin/python benchmarks/toolkit_speed.py [--rows 300000] [--lines 100000] [--repeats 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from topology_effect import KEYSPLIT, ROOT, add_topology_args, dataset_file, run_once

TOPOLOGY = '''
from keysplit.toolkit import Aggregate, FeedSpout, KeyRouter, Topology
from slowsum import SlowSum


class PageBytes(Topology):
    views = FeedSpout.spec(fields=["time", "page", "bytes"], batch={batch})
    route = KeyRouter.spec(inputs=[views], key="page", grouping="pkg:d=2", time="time", par=2, batch={batch})
    partial = Aggregate.partial(inputs=route, accumulator=SlowSum("bytes", delay_ms={delay}), period=1.0, par=4)
    total = Aggregate.merge(inputs=partial, top=10, par=2)
'''

#: The word count written with the toolkit: the feed's lines, a router that splits each into its words and routes
#: them (``split``), partial counts and a merge keeping the top 10; the classic word count's shape (4 routers, 8
#: counters, 2 aggregators, T = 1 s).
TOOLKIT_WORDCOUNT = '''
from keysplit.toolkit import Aggregate, Count, FeedSpout, KeyRouter, Topology


class WordCount(Topology):
    lines = FeedSpout.spec(fields=["keys"])
    words = KeyRouter.spec(inputs=[lines], key="keys", split="\\t", grouping="pkg:d=2", par={sources})
    counts = Aggregate.partial(inputs=words, accumulator=Count(), period={flush}, par={workers})
    total = Aggregate.merge(inputs=counts, top=10, par={aggregators})
'''

SLOW_SUM = '''
import time

from keysplit.toolkit import Accumulator


class SlowSum(Accumulator):
    """Sum of a field that costs ``delay_ms`` of sleep a row: the word count's --cpu-delay in a user's add."""

    def __init__(self, field, delay_ms=0.0):
        super().__init__(field=field, delay_ms=delay_ms)
        self.fields = (field,)
        self.field, self.delay = field, delay_ms / 1000.0

    def zero(self):
        return 0

    def add(self, state, record):
        if self.delay:
            time.sleep(self.delay)
        return state + int(record[self.field])

    def merge(self, a, b):
        return a + b
'''

#: The partial tasks of the page views (its W) and its flush period (its T).
PARTIALS, PERIOD = 4, 1.0


def load() -> str:
    """The machine's load averages (1, 5, 15 min), as `uptime` prints them."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def page_views(project: Path, csv_path: Path, delay: float, *, max_pending: int, rate: float | None = None,
               batch: int | None = None, timeout: float = 900) -> dict:
    """One ``keysplit run`` of the page views topology at D = ``delay`` ms (``batch``: the feed's and the router's,
    None their default); its summary."""
    path = project / "topologies" / f"pagebytes_{round(delay * 1000)}us_b{batch or 0}.py"
    path.write_text(TOPOLOGY.format(delay=delay, batch=batch))
    cmd = [KEYSPLIT, "run", str(path), "--dataset", f"csv:{csv_path},key=page", "--worker-processes", "2",
           "--max-pending", str(max_pending), "--timeout", f"{timeout:g}", "--json"]
    if rate:
        cmd += ["--rate", f"{rate:g}"]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=project, check=False)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout)


def toolkit_wordcount(project: Path, text: Path, args: argparse.Namespace) -> dict:
    """One ``keysplit run`` of the word count written with the toolkit over the classic word count's text; its
    summary."""
    path = project / "topologies" / "toolkit_wordcount.py"
    path.write_text(TOOLKIT_WORDCOUNT.format(sources=args.sources, workers=args.workers, flush=args.flush,
                                             aggregators=args.aggregators))
    cmd = [KEYSPLIT, "run", str(path), "--dataset", f"text:{text}", "--worker-processes", "2",
           "--max-pending", str(args.max_pending), "--timeout", f"{args.timeout:g}", "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=project, check=False)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{result.stderr.strip()[-2000:]}")
    summary = json.loads(result.stdout)
    summary["words_per_second"] = summary["applied_rows"] / summary["duration_s"]
    return summary


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_topology_args(p, max_pending=60_000, lines=100_000)
    p.add_argument("--rows", type=int, default=300_000, help="page views of the ceiling runs (default 300000)")
    p.add_argument("--delay-rows", type=int, default=20_000, help="page views of the D = 1 ms runs (default 20000)")
    p.add_argument("--delay-lines", type=int, default=3_000, help="word count lines of the D = 1 ms runs")
    p.add_argument("--light-rate", type=float, default=1000.0, help="rows/s of the light-load run (default 1000)")
    p.add_argument("--light-rows", type=int, default=10_000, help="page views of the light-load run")
    p.add_argument("--repeats", type=int, default=1, help="rounds of every run, alternating (default 1)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rounds: list[dict] = []

    def say(text: str) -> None:
        if not args.json:
            print(text, flush=True)

    with tempfile.TemporaryDirectory(prefix="keysplit-toolkit-speed-") as tmp:
        project = Path(tmp)
        (project / "src").mkdir()
        (project / "topologies").mkdir()
        (project / "src" / "slowsum.py").write_text(SLOW_SUM)
        views = {}
        for n in {args.rows, args.delay_rows, args.light_rows}:
            views[n] = project / f"views-{n}.csv"
            subprocess.run([KEYSPLIT, "datasets", "generate", f"pageviews:keys=2000,messages={n},seed=1", "--out",
                            str(views[n])], check=True, capture_output=True, cwd=ROOT)
        text, delay_text = dataset_file(args), dataset_file(args, args.delay_lines)
        for round_ in range(args.repeats):
            row: dict = {"round": round_, "load_before": load()}
            words = run_once("pkg", 0.0, text, args)
            rows = page_views(project, views[args.rows], 0.0, max_pending=args.max_pending)
            single = page_views(project, views[args.delay_rows], 0.0, max_pending=args.max_pending, batch=1)
            toolkit_words = toolkit_wordcount(project, text, args)
            row["ceiling"] = {"wordcount_words_per_s": words["words_per_second"],
                              "toolkit_wordcount_words_per_s": toolkit_words["words_per_second"],
                              "pageviews_rows_per_s": rows["rows_per_second"],
                              "pageviews_one_a_tuple_rows_per_s": single["rows_per_second"],
                              "ratio": rows["rows_per_second"] / words["words_per_second"]}
            say(f"round {round_}: ceiling  word count {words['words_per_second']:>9,.0f} words/s   page views "
                f"{rows['rows_per_second']:>9,.0f} rows/s (one a tuple: {single['rows_per_second']:,.0f})   ratio "
                f"{row['ceiling']['ratio']:.2f} (target 0.9; word count target 110,000)   load {row['load_before']}")
            say(f"round {round_}: ceiling  the word count written with the toolkit "
                f"{toolkit_words['words_per_second']:>9,.0f} words/s ("
                f"{toolkit_words['words_per_second'] / words['words_per_second']:.2f} of the classic one's)")
            words = run_once("pkg", 1.0, delay_text, args, max_pending=5000)
            rows = page_views(project, views[args.delay_rows], 1.0, max_pending=5000)
            row["delay_1ms"] = {"wordcount_of_bound": words["words_per_second"] / (args.workers * 1000.0),
                                "pageviews_of_bound": rows["rows_per_second"] / (PARTIALS * 1000.0)}
            say(f"round {round_}: D = 1 ms word count {row['delay_1ms']['wordcount_of_bound']:.0%} of W/D   page "
                f"views {row['delay_1ms']['pageviews_of_bound']:.0%} of W/D (target 90%)")
            light = page_views(project, views[args.light_rows], 1.0, max_pending=5000, rate=args.light_rate)
            p50 = light["latency_ms"]["p50"]
            row["light"] = {"rate": args.light_rate, "p50_ms": p50, "target_ms": 600 * PERIOD + 50,
                            "rows_per_s": light["rows_per_second"]}
            say(f"round {round_}: light load ({args.light_rate:g} rows/s, D = 1 ms) p50 {p50:,.0f} ms (target "
                f"{600 * PERIOD + 50:,.0f})   load now {load()}")
            rounds.append(row)
    ratio = statistics.median(r["ceiling"]["ratio"] for r in rounds)
    if args.json:
        print(json.dumps({"rounds": rounds, "ceiling_ratio_median": ratio, "load_after": load()}, indent=2))
    else:
        print(f"page views / word count at the ceiling: {ratio:.2f} (median of {args.repeats} round(s))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
