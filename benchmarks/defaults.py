"""At the topology's default knobs, do the workers bind? And how long does a line wait at light load?

Throughput: sg and pkg at D = 1 ms, W = 8 (S = 4, A = 2, flush 1 s), on the README's own datasets -- its
`keysplit run` example (``zipf:z=1.2,keys=5000,messages=50000,seed=1``: one word a line) and the demo's text
(``zipf:z=1.1,keys=5000,messages=30000,seed=42`` written 10 words a line) -- each run twice back to back: with the
default knobs (no ``--max-pending``: the spouts' window grows from what W / D needs up to a latency,
storm/window.py) and with ``--max-pending 1000``, the previous default's fixed cap. Printed per pair: words/s as
a share of W / D, the ratio default / previous default (both measured in this one process, so a load change hits
both alike), what each run's summary says bound it (``bound_by``, runs/collect.py ``what_bound``), and the load
average.

Light load: sg, open loop at ``--light-rate`` words/s (1,000), D = 1 ms, ``--light-lines`` lines of the demo's
text: a line's complete latency p50 against the target 0.6 T + 50 ms, and the same run with ``--batch 1`` (whose
aggregators still commit at their tick: about T later).

    .venv/bin/python benchmarks/defaults.py [--groupings sg,pkg] [--messages 50000] [--light-lines 1500] [--json]

``--messages`` scales both datasets (the README's sizes by default); the previous default's runs of one word a
line are slow by design (about 500 words/s before, then ~1,800), so ``--previous-messages`` (default 10,000) sets
their length: a ratio of rates, each words / (last ack - first emit), over the same first lines of the dataset.
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
README_RUN = "zipf:z=1.2,keys=5000,messages={n},seed=1"
DEMO = "zipf:z=1.1,keys=5000,messages={n},seed=42"


def load() -> str:
    """The load averages (1, 5, 15 min)."""
    return ", ".join(f"{v:.2f}" for v in os.getloadavg())


def demo_text(messages: int) -> Path:
    """The demo's dataset written 10 words a line (generated once under .keysplit/bench)."""
    path = ROOT / ".keysplit" / "bench" / "defaults" / f"demo-{messages}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([KEYSPLIT, "datasets", "generate", DEMO.format(n=messages), "--out", str(path),
                        "--words-per-line", "10"], check=True, capture_output=True)
    return path


def run(grouping: str, dataset: str, *extra: str) -> dict:
    """One ``keysplit run wordcount --json`` at W = 8, S = 4, A = 2, D = 1 ms unless ``extra`` says otherwise."""
    cmd = [KEYSPLIT, "run", "wordcount", "--grouping", grouping, "--dataset", dataset, "-S", "4", "-W", "8", "-A",
           "2", "--cpu-delay", "1", "--timeout", "900", "--json", *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groupings", default="sg,pkg")
    p.add_argument("--messages", type=int, default=0, help="words of each dataset (default: the README's sizes)")
    p.add_argument("--previous-messages", type=int, default=10_000,
                   help="words of the one-word-a-line runs at the previous default (default 10000)")
    p.add_argument("--light-rate", type=float, default=1000.0)
    p.add_argument("--light-lines", type=int, default=1500)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    limit = 8 * 1000.0 / 1.0  # W / D
    datasets = [("README run, 1 word a line", README_RUN.format(n=args.messages or 50_000),
                 README_RUN.format(n=args.previous_messages)),
                ("demo text, 10 words a line", f"text:{demo_text(args.messages or 30_000)}", None)]
    rows = []
    for name, dataset, previous_dataset in datasets:
        for grouping in args.groupings.split(","):
            before = load()
            new = run(grouping, dataset)
            old = run(grouping, previous_dataset or dataset, "--max-pending", "1000")
            row = {"dataset": name, "grouping": grouping, "load_before": before, "load_after": load(),
                   **{f"{tag}_{k}": s.get(k) for tag, s in (("default", new), ("previous", old))
                      for k in ("words_per_second", "bound_by", "bound", "window", "max_pending", "messages")},
                   "default_p50_ms": new["latency_ms"]["p50"], "totals": [new["totals"], old["totals"]]}
            row["of_limit"] = new["words_per_second"] / limit
            row["default_over_previous"] = new["words_per_second"] / old["words_per_second"]
            rows.append(row)
            if not args.json:
                print(f"{name} {grouping}: {new['words_per_second']:,.0f} words/s ({row['of_limit']:.0%} of W/D, "
                      f"bound by {new['bound_by']}, window {new.get('window')}), previous default "
                      f"{old['words_per_second']:,.0f} ({old['bound_by']}): x{row['default_over_previous']:.2f} "
                      f"(load {before} -> {row['load_after']})", file=sys.stderr, flush=True)
    light_data = f"text:{demo_text(args.light_lines * 10)}"
    before = load()
    light = {mode: run("sg", light_data, "--rate", f"{args.light_rate:g}", *extra)["latency_ms"]
             for mode, extra in (("default", ()), ("batch1", ("--batch", "1")))}
    target_ms = 0.6 * 1000.0 + 50.0
    result = {"rows": rows, "light": {**light, "target_p50_ms": target_ms, "load_before": before,
                                      "load_after": load(), "rate": args.light_rate, "lines": args.light_lines},
              "cores": os.cpu_count()}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print("\nD = 1 ms, W = 8 (W / D = 8,000 words/s), S = 4, A = 2, flush 1 s; default knobs against --max-pending "
          "1000 (the previous default's cap)\n")
    print("| dataset | grouping | default words/s | of W / D | bound by | window | previous default words/s | "
          "bound by | default / previous | load average before -> after |")
    print("|---|---|---:|---:|---|---:|---:|---|---:|---|")
    for r in rows:
        print(f"| {r['dataset']} | {r['grouping']} | {r['default_words_per_second']:,.0f} | {r['of_limit']:.0%} | "
              f"{r['default_bound_by']} | {r['default_window']} | {r['previous_words_per_second']:,.0f} | "
              f"{r['previous_bound_by']} | {r['default_over_previous']:.2f} | {r['load_before']} -> "
              f"{r['load_after']} |")
    lt = result["light"]
    print(f"\nlight load: sg, {args.light_rate:g} words/s open loop, D = 1 ms, {args.light_lines} lines of 10 words "
          f"(load average {lt['load_before']} -> {lt['load_after']})\n")
    print("| mode | p50 ms | p50 / (0.6 T + 50 ms) | p99 ms | mean ms |")
    print("|---|---:|---:|---:|---:|")
    for mode, label in (("default", "default"), ("batch1", "--batch 1")):
        m = lt[mode]
        print(f"| {label} | {m['p50']:,.0f} | {m['p50'] / target_ms:.2f} | {m['p99']:,.0f} | {m['mean']:,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
