"""Does a calibration of a toolkit topology predict its runs it did not see? (docs/guides/calibrate.md; prints a
table, never a test)

The topology is ``topologies/pageviews.py`` (PageBytes: FeedSpout -> KeyRouter x 2 -> Aggregate.partial(Sum) x 4 ->
Aggregate.merge x 2, period 1 s), its grouping set by ``KEYSPLIT_GROUPING``, on ``pageviews:keys=2000,
messages=20000,seed=1`` with ``--worker-processes 2``. Every step is the command a user types, in one folder
(.keysplit/bench/topology-agreement/): ``keysplit run topologies/pageviews.py`` for each grouping, ``keysplit
calibrate`` on the first two (kg and pkg:d=2 by default), then for every grouping ``keysplit replay
topologies/pageviews.py --calibration ...`` and ``keysplit compare``, whose replay / run ratios it prints with
whether each is within the word count's targets (words/s 15%, p50 and p99 25%) and whether results and loads are
equal. The groupings after the first two are held out. The machine's load average is printed beside: a run's
throughput on shared cores is the share of them it got.

    .venv/bin/python benchmarks/topology_agreement.py [--groupings kg,pkg:d=2,dchoices,sg] [--reuse]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KEYSPLIT = str(Path(sys.executable).with_name("keysplit"))
DATASET = "pageviews:keys=2000,messages=20000,seed=1"
TOPOLOGY = str(ROOT / "topologies" / "pageviews.py")
PROFILE = "topology-agreement"
TARGETS = {"throughput": 0.15, "latency_p50_ms": 0.25, "latency_p99_ms": 0.25}


def keysplit(folder: Path, args: list[str], grouping: str | None = None) -> dict:
    """One command, ``--json``, in ``folder`` (its own .keysplit state); its JSON output."""
    env = {**os.environ, "KEYSPLIT_HOME": str(folder / ".keysplit")}
    if grouping:
        env["KEYSPLIT_GROUPING"] = grouping
    done = subprocess.run([KEYSPLIT, *args, "--json"], cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"keysplit {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def slug(grouping: str) -> str:
    return grouping.replace(":", "-").replace("=", "").replace(",", "-")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groupings", default="kg,pkg:d=2,dchoices,sg",
                   help="the first two calibrate, the rest are held out (default kg,pkg:d=2,dchoices,sg)")
    p.add_argument("--reuse", action="store_true", help="keep the runs already stored (re-fit and replay only)")
    args = p.parse_args()
    groupings = args.groupings.split(",")
    folder = ROOT / ".keysplit" / "bench" / "topology-agreement"
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "views.csv").exists():
        subprocess.run([KEYSPLIT, "datasets", "generate", DATASET, "--out", "views.csv"], cwd=folder, check=True,
                       capture_output=True, env={**os.environ, "KEYSPLIT_HOME": str(folder / ".keysplit")})
    dataset = "csv:views.csv,key=page"
    loads = [os.getloadavg()[0]]
    for g in groupings:
        rid = f"pages-{slug(g)}"
        if not args.reuse:
            subprocess.run([KEYSPLIT, "runs", "delete", rid], cwd=folder, capture_output=True,
                           env={**os.environ, "KEYSPLIT_HOME": str(folder / ".keysplit")})
            keysplit(folder, ["run", TOPOLOGY, "--dataset", dataset, "--worker-processes", "2", "--run-id", rid], g)
            loads.append(os.getloadavg()[0])
    profile = keysplit(folder, ["calibrate", "--run", ",".join(f"pages-{slug(g)}" for g in groupings[:2]),
                                "--name", PROFILE])
    rows = []
    for n, g in enumerate(groupings):
        out = f"replay-{slug(g)}"
        keysplit(folder, ["replay", TOPOLOGY, "--dataset", dataset, "--calibration", PROFILE, "--out", out,
                          "--force"], g)
        row = keysplit(folder, ["compare", "--run", f"pages-{slug(g)}", "--replay", out, "--no-plots"])["rows"][0]
        ratios = row["ratio"]
        within = all(ratios[k] is not None and abs(ratios[k] - 1) <= t for k, t in TARGETS.items())
        rows.append((g, "yes" if n < 2 else "no", row, within))
    f = profile["fitted"]
    print(f"{DATASET} as CSV, topologies/pageviews.py (S=2 routers, 4 partials, 2 merges, period 1 s), "
          f"2 worker processes; profile from {', '.join(groupings[:2])}: a row {f['tuple_us']:.0f} us in the stages, "
          f"{f['spout_us']:.0f} us in the spout, return {f['return_ms']:.1f} ms (fitted), a merge "
          f"{profile['measured'].get('merge_entry_us', 0.0):.0f} us a partial-state entry (measured); load average "
          "during the runs "
          + ", ".join(f"{v:.1f}" for v in loads))
    print("| grouping | seen by the fit | rows/s measured / predicted (ratio) | p50 ms measured / predicted (ratio) "
          "| p99 ms measured / predicted (ratio) | results | loads | within target |")
    print("|---|---|---:|---:|---:|---|---|---|")
    def cell(m: dict, ratio: float) -> str:
        return f"{m['run']:,.0f} / {m['replay']:,.0f} ({ratio:.2f})"

    for g, seen, r, ok in rows:
        tp = {"run": r["throughput"]["run_words_per_second"], "replay": r["throughput"]["replay_estimate"]}
        print(f"| {g} | {seen} | {cell(tp, r['ratio']['throughput'])} | "
              f"{cell(r['latency_p50_ms'], r['ratio']['latency_p50_ms'])} | "
              f"{cell(r['latency_p99_ms'], r['ratio']['latency_p99_ms'])} | "
              f"{'equal' if r['counts_equal'] else 'DIFFER'} | "
              f"{'equal' if r['loads_equal'] else 'differ'} | {'yes' if ok else 'no'} |")
    held = [ok for _, seen, _, ok in rows if seen == "no"]
    print(f"held-out cells within target: {sum(held)} of {len(held)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
