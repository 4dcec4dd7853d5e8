"""The PKG paper's Storm experiment (Fig. 10a, Table 3) with `keysplit run`: throughput and latency of
KG, SG and PKG when a CPU delay per word saturates the workers.

The dataset is a seeded Zipf text (``--words-per-line`` words a line, like the paper's tweets that give
10-15 words each; z and the vocabulary set by ``--z`` / ``--keys``). Each (delay, grouping) pair is one
``keysplit run wordcount --json`` subprocess with the same topology (S routers, W counters, A aggregators);
only ``--grouping`` differs. Throughput is words per second between the first emit and the last ack; latency
is Storm's complete latency of a line (emit to ack), which here includes the aggregation wait (counters ack
only after their partial counts are flushed and merged, so add ~1-2 flush periods to every scheme).

Baseline: SG at the same delay, measured in the same process (ratios are what matter on a shared machine).
The paper's claim to see: PKG's throughput clearly above KG's and close to SG's, KG's latency the worst. Each row
also has its **balance limit**: its most loaded counter sleeps D for each of its words, so no run of that grouping
can be faster than words / (its words x D), W / D when the loads are even; the ratio of two groupings' limits is
what the paper's effect predicts for their throughputs once the workers, not the plumbing, bound them.

Max pending is 2,500 lines (25,000 words): a line waits one to two flush periods for the counters' and the
aggregators' ticks, so by Little's law a closed loop runs at most max pending x words per line / ~2 s, which with
1,000 lines (10,000 words: ~5,000 words/s) is below W / D = 8,000 at 1 ms. 20,000 lines by default: throughput is
words / (last ack - first emit), which includes the final flush wait (~1.5 s), ~20% of a 6,000-line SG run at 1 ms
but 2% of KG's at 4 ms, so short runs understate the balanced groupings against KG. The runs use the topology's
default batches (``--batch 1`` for one tuple per word).

    .venv/bin/python benchmarks/topology_effect.py [--delays 1,2,4] [--lines 20000] [--workers 8] \\
        [--max-pending 2500] [--batch N --batch-ms MS] [--out docs/img/topology_effect.png] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
KEYSPLIT = str(Path(sys.executable).with_name("keysplit"))


def write_zipf_text(path: Path, lines: int, words_per_line: int, keys: int, z: float, seed: int) -> None:
    """``lines`` lines of ``words_per_line`` words ``w<rank>`` with P(rank r) ~ 1/r^z (seeded)."""
    from keysplit.datasets.generators import zipf_cdf

    rng = np.random.Generator(np.random.PCG64(seed))
    ranks = np.searchsorted(zipf_cdf(z, keys), rng.random(lines * words_per_line), side="right") + 1
    ranks = np.minimum(ranks, keys).reshape(lines, words_per_line)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="ascii") as fh:
        for row in ranks.tolist():
            fh.write(" ".join(f"w{r}" for r in row) + "\n")


def dataset_file(args: argparse.Namespace, lines: int | None = None) -> Path:
    """The seeded Zipf text of ``lines`` lines (default ``--lines``), written once under .keysplit/bench."""
    lines = lines or args.lines
    name = f"zipf-z{args.z:g}-k{args.keys}-l{lines}-w{args.words_per_line}-s{args.seed}.txt"
    path = ROOT / ".keysplit" / "bench" / name
    if not path.exists():
        write_zipf_text(path, lines, args.words_per_line, args.keys, args.z, args.seed)
    return path


def run_once(grouping: str, delay: float, path: Path, args: argparse.Namespace, *, max_pending: int | None = None,
             extra: list[str] | None = None) -> dict:
    """One ``keysplit run wordcount --json`` (``--batch``/``--batch-ms`` from ``args`` unless ``extra`` sets them);
    returns its summary."""
    cmd = [KEYSPLIT, "run", "wordcount", "--grouping", grouping, "--dataset", f"text:{path}",
           "-S", str(args.sources), "-W", str(args.workers), "-A", str(args.aggregators),
           "--cpu-delay", f"{delay:g}", "--flush", f"{args.flush:g}",
           "--max-pending", str(max_pending or args.max_pending), "--timeout", str(args.timeout), "--json"]
    extra = list(extra or [])
    if "--batch" not in extra:
        cmd += ["--batch", str(args.batch), "--batch-ms", f"{args.batch_ms:g}"]
    cmd += extra
    if args.redis:
        cmd += ["--redis", args.redis]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout)


def effect_figure(rows: list[dict], title: str):
    """Throughput and mean latency against the CPU delay, one line per grouping (its own color, line style and
    marker), the legend right of the panels."""
    from keysplit.plots import legend_outside, pyplot, series_style

    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for index, grouping in enumerate(("pkg", "sg", "kg")):
        mine = sorted((r for r in rows if r["grouping"].split(":")[0] == grouping), key=lambda r: r["cpu_delay_ms"])
        if not mine:
            continue
        delays = [r["cpu_delay_ms"] for r in mine]
        style = series_style(index)
        ax1.plot(delays, [r["words_per_second"] for r in mine], label=grouping.upper(), **style)
        ax2.plot(delays, [r["latency_ms"]["mean"] / 1000.0 for r in mine], label=grouping.upper(), **style)
    ax1.set(xlabel="CPU delay per word (ms)", ylabel="throughput (words/s)", title="throughput (cf. Fig. 10a)")
    ax2.set(xlabel="CPU delay per word (ms)", ylabel="mean complete latency (s)", title="latency (cf. Table 3)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    legend_outside(ax2)
    fig.suptitle(title, fontsize=9)
    return fig


def plot(rows: list[dict], out: Path, title: str) -> None:
    from keysplit.plots import save_figure

    out.parent.mkdir(parents=True, exist_ok=True)
    save_figure(effect_figure(rows, title), str(out))


def delay_of(summary: dict) -> float:
    return float(summary.get("cpu_delay_ms") or 0.0)


def add_topology_args(p: argparse.ArgumentParser, max_pending: int, lines: int = 6000) -> None:
    """The dataset and topology options shared by the topology benchmarks."""
    from keysplit.stream import DEFAULT_BATCH, DEFAULT_BATCH_MS

    p.add_argument("--groupings", default="kg,sg,pkg")
    p.add_argument("--lines", type=int, default=lines)
    p.add_argument("--words-per-line", type=int, default=10)
    p.add_argument("--keys", type=int, default=5000)
    p.add_argument("--z", type=float, default=1.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sources", type=int, default=4)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--aggregators", type=int, default=2)
    p.add_argument("--flush", type=float, default=1.0)
    p.add_argument("--max-pending", type=int, default=max_pending)
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH,
                   help=f"keysplit.batch: words a router sends a counter in a tuple at most (default {DEFAULT_BATCH})")
    p.add_argument("--batch-ms", type=float, default=DEFAULT_BATCH_MS,
                   help=f"keysplit.batch_ms: or once the first waited this long (default {DEFAULT_BATCH_MS:g})")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--redis", help="Redis URL (default: the project-managed server)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--delays", default="1,2,4", help="CPU delays in ms per word (default 1,2,4)")
    add_topology_args(p, max_pending=2500, lines=20000)
    p.add_argument("--message-timeout", type=int, default=120,
                   help="topology.message.timeout.secs (default 120: at 4 ms kg's hot counter holds a line ~35 s)")
    p.add_argument("--out", default=str(ROOT / "docs" / "img" / "topology_effect.png"), help="PNG plot ('' for none)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    delays = [float(d) for d in args.delays.split(",")]
    groupings = args.groupings.split(",")
    path = dataset_file(args)
    rows = []
    for delay in delays:
        for grouping in groupings:
            started = time.time()
            s = run_once(grouping, delay, path, args, extra=["--message-timeout", str(args.message_timeout)])
            rows.append(s)
            if not args.json:
                print(f"D={delay:g} ms {grouping:>4}: {s['words_per_second']:8.0f} words/s  latency mean "
                      f"{s['latency_ms']['mean']:7.0f} ms  p99 {s['latency_ms']['p99']:7.0f} ms  "
                      f"(run {s['run_id']}, {time.time() - started:.0f} s wall)", flush=True)
    for s in rows:  # ratios to SG and KG at the same delay, measured in this process
        base = next((b for b in rows if b["grouping"] == "sg" and b["cpu_delay_ms"] == s["cpu_delay_ms"]), None)
        kg = next((b for b in rows if b["grouping"] == "kg" and b["cpu_delay_ms"] == s["cpu_delay_ms"]), None)
        s["throughput_vs_sg"] = s["words_per_second"] / base["words_per_second"] if base else None
        s["latency_vs_sg"] = s["latency_ms"]["mean"] / base["latency_ms"]["mean"] if base else None
        s["throughput_vs_kg"] = s["words_per_second"] / kg["words_per_second"] if kg else None
        # the balance limit: the most loaded counter sleeps D per word it got, so the run cannot be faster than
        # words / (its words x D); W / D for perfect balance
        s["balance_limit"] = s["messages"] * 1000.0 / (max(s["loads"]) * delay_of(s)) if delay_of(s) else None
        s["limit_vs_kg"] = s["balance_limit"] / kg["balance_limit"] if kg and s["balance_limit"] else None
    batching = f"batches of {args.batch} words / {args.batch_ms:g} ms" if args.batch > 1 else "one tuple per word"
    title = (f"keysplit run wordcount: {path.name}, S={args.sources} W={args.workers} A={args.aggregators}, "
             f"flush {args.flush:g} s, max pending {args.max_pending}, {batching}; {os.cpu_count()} cores, "
             f"shared (load {', '.join(f'{v:.1f}' for v in os.getloadavg())} at the end)")
    if args.out:
        plot(rows, Path(args.out), title)
    keep = ("run_id", "grouping", "cpu_delay_ms", "words_per_second", "lines_per_second", "throughput_vs_sg",
            "throughput_vs_kg", "balance_limit", "limit_vs_kg", "latency_ms", "latency_vs_sg",
            "final_imbalance_fraction", "dist_cost", "replayed", "duration_s", "loads", "batch", "batch_ms",
            "words_per_tuple")
    result = {"dataset": f"text:{path}", "title": title, "rows": [{k: s.get(k) for k in keep} for s in rows]}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return 0
    print(f"\n{title}\n")
    print("| CPU delay (ms) | grouping | words/s | balance limit | % of limit | vs SG | vs KG (limit) | "
          "mean latency (ms) | p99 latency (ms) | I(m)/m | dist_cost |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in rows:
        ratio = f"{s['throughput_vs_sg']:.2f}" if s["throughput_vs_sg"] else "-"
        limit = s["balance_limit"]
        vs_kg = (f"{s['throughput_vs_kg']:.2f} ({s['limit_vs_kg']:.2f})" if s["throughput_vs_kg"] and s["limit_vs_kg"]
                 else "-")
        share = f"{s['words_per_second'] / limit:.0%}" if limit else "-"
        print(f"| {s['cpu_delay_ms']:g} | {s['grouping']} | {s['words_per_second']:.0f} | "
              f"{f'{limit:.0f}' if limit else '-'} | {share} | "
              f"{ratio} | {vs_kg} | {s['latency_ms']['mean']:.0f} | {s['latency_ms']['p99']:.0f} | "
              f"{s['final_imbalance_fraction']:.3f} | {s['dist_cost']:.2f} |")
    if args.out:
        print(f"\nplot: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
