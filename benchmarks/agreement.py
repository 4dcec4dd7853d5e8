"""Does the replay's topology model agree with measured runs? (docs/guides/compare.md; a table, never a test)

Each cell is one ``keysplit run wordcount --json`` (measured) next to the model's prediction for the same knobs
(``keysplit.topology_model``: the same kernel ``keysplit replay --arrivals closed|open`` runs in Spark, fed
here in process with the simulator's routing, which the replay's equals by test). Target: predicted throughput
within 15% of measured, p50 and p99 complete latency within 25%.

Dataset: the demo's Zipf text (``zipf:z=1.1,keys=5000,messages=30000,seed=42``, 10 words a line); W=8, S=4,
A=2, flush 1 s, max pending 1000; kg, sg, pkg, dkg, fish; CPU delays 0.5, 1, 2, 4 ms closed loop, and the
open-loop rates of ``--rates`` (words/s, below saturation) at ``--rate-delay`` ms. FISH's routers get the
capacities the topology's router gives them (1000 / D per worker).

The runs use the topology's default batches (``--batch`` / ``--batch-ms`` choose others). The model's overheads
come from a calibration file (``--calibration``, default .keysplit/calibration.json); ``--calibrate`` first makes
it from four runs (see ``keysplit.topology_model.calibrate``), shuffle grouping on a 200,000-word Zipf text of the
same shape: no CPU delay with every line in flight (the runner's ceiling), with batches and with one tuple per word
(which splits the runner's cost into per word and per tuple); no CPU delay in open loop at a quarter of the ceiling
(the hop when nothing queues) and a saturating CPU delay, both with max pending 5000. Calibrate on the machine, and
under the load, the comparison runs on.

    .venv/bin/python benchmarks/agreement.py [--calibrate] [--subset] [--groupings kg,sg] [--delays 1,2] \\
        [--rates 1000,2500] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from keysplit.stream import DEFAULT_BATCH, DEFAULT_BATCH_MS  # noqa: E402

KEYSPLIT = str(Path(sys.executable).with_name("keysplit"))
DEMO = "zipf:z=1.1,keys=5000,messages=30000,seed=42"
CALIBRATION_DATA = "zipf:z=1.1,keys=5000,messages=200000,seed=7"
#: Max pending of the calibration's ceiling runs: every line of its 20,000 may be in flight.
CEILING_PENDING = 20_000
#: The light calibration run's open-loop rate, as a share of the ceiling's words/s: low enough that nothing queues.
LIGHT_SHARE = 0.25
#: --subset: the cells a loaded machine can afford (one closed-loop delay per grouping family, one rate).
SUBSET = {"groupings": "kg,sg,pkg", "delays": "1,2", "rates": "2000"}


def text_file(spec: str) -> Path:
    """The dataset as a 10-words-a-line text file under .keysplit/bench (generated once)."""
    name = spec.replace(":", "-").replace(",", "-").replace("=", "") + "-w10.txt"
    path = ROOT / ".keysplit" / "bench" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([KEYSPLIT, "datasets", "generate", spec, "--out", str(path), "--words-per-line", "10"],
                       check=True, capture_output=True, cwd=ROOT)
    return path


def measure(grouping: str, path: Path, args: argparse.Namespace, delay: float, rate: float | None = None,
            max_pending: int | None = None, batch: int | None = None) -> dict:
    """One ``keysplit run wordcount --json``; its summary (kept under .keysplit/bench/agreement/, which
    ``--reuse`` reads instead of running again, e.g. to re-predict after a new calibration)."""
    cache = ROOT / ".keysplit" / "bench" / "agreement" / (
        f"{path.stem}-{grouping}-d{delay:g}-r{rate or 0:g}-p{max_pending or args.max_pending}-W{args.workers}"
        f"-S{args.sources}-A{args.aggregators}-f{args.flush:g}-b{batch or args.batch}-t{args.batch_ms:g}.json")
    if args.reuse and cache.exists():
        return json.loads(cache.read_text())
    cmd = [KEYSPLIT, "run", "wordcount", "--grouping", grouping, "--dataset", f"text:{path}", "-S", str(args.sources),
           "-W", str(args.workers), "-A", str(args.aggregators), "--cpu-delay", f"{delay:g}",
           "--flush", f"{args.flush:g}", "--max-pending", str(max_pending or args.max_pending), "--json",
           "--batch", str(batch or args.batch), "--batch-ms", f"{args.batch_ms:g}"]
    if rate:
        cmd += ["--rate", f"{rate:g}"]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{result.stderr.strip()[-2000:]}")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(result.stdout)
    return json.loads(result.stdout)


def arrays_for(run: dict, path: Path) -> tuple:
    """The model's input for a run: its dataset routed as its routers route it (FISH with their capacities)."""
    from keysplit.topology_model import route_dataset

    delay = float(run["cpu_delay_ms"] or 0)
    caps = [1000.0 / delay] * run["workers"] if delay > 0 and run["grouping"].startswith("fish") else None
    return route_dataset(f"text:{path}", run["grouping"], run["workers"], run["sources"], run["aggregators"],
                         rate=run.get("rate") or None, capacities=caps, split=run.get("split") or "shuffle")


def calibrate(args: argparse.Namespace, out: str) -> dict:
    from keysplit.topology_model import calibrate as fit

    path = text_file(CALIBRATION_DATA)
    print(f"calibrating on text:{path.name}: sg with no CPU delay, closed loop (with one tuple per word too) then "
          f"open loop at {LIGHT_SHARE:.0%} of its throughput, then sg at {args.calibration_delay:g} ms (max pending "
          "5000)", file=sys.stderr)
    # the ceilings with every line in flight: with batches, max pending 5000 (50,000 words over ~2 s of flush
    # waits) would bind before the runner does
    ceiling = measure("sg", path, args, 0.0, max_pending=CEILING_PENDING)
    single = measure("sg", path, args, 0.0, max_pending=CEILING_PENDING, batch=1) if args.batch > 1 else None
    light_rate = round(LIGHT_SHARE * ceiling["words_per_second"], -2)
    light = measure("sg", path, args, 0.0, rate=light_rate, max_pending=5000)
    saturation = measure("sg", path, args, args.calibration_delay, max_pending=5000)
    cal = fit(ceiling, arrays_for(ceiling, path), saturation, arrays_for(saturation, path), light,
              arrays_for(light, path), *((single, arrays_for(single, path)) if single else ()))
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(cal, fh, indent=2)
        fh.write("\n")
    print(f"wrote {out}: runner {cal['overhead_us']:.0f} us a tuple and {cal['word_us']:.0f} us a word (ceiling "
          f"{ceiling['words_per_second']:.0f} words/s"
          + (f", {single['words_per_second']:.0f} with one tuple per word" if single else "")
          + f"), counter {cal['counter_overhead_us']:.0f} us a tuple beyond the delay, hop "
          f"{cal['hop_delay_ms']:.0f} ms and ack delay {cal['ack_delay_ms']:.0f} ms and commit {cal['commit_us']:.0f} "
          f"us a partial count (light run at {light_rate:g} words/s), tick phase "
          f"{cal['tick_phase_s']:.3f} s", file=sys.stderr)
    return cal


def ratio(pred: float, meas: float) -> float:
    return pred / meas if meas else float("inf")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groupings", default="kg,sg,pkg,dkg,fish")
    p.add_argument("--delays", default="0.5,1,2,4", help="closed-loop CPU delays, ms")
    p.add_argument("--rates", default="1000,2500", help="open-loop rates, words/s (below saturation)")
    p.add_argument("--rate-delay", type=float, default=1.0, help="CPU delay of the open-loop cells, ms")
    p.add_argument("--subset", action="store_true",
                   help=f"only {SUBSET['groupings']} at {SUBSET['delays']} ms and {SUBSET['rates']} words/s "
                   "(a loaded machine)")
    p.add_argument("--workers", "-W", type=int, default=8)
    p.add_argument("--sources", "-S", type=int, default=4)
    p.add_argument("--aggregators", "-A", type=int, default=2)
    p.add_argument("--flush", type=float, default=1.0)
    p.add_argument("--max-pending", type=int, default=1000)
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, help=f"keysplit.batch (default {DEFAULT_BATCH})")
    p.add_argument("--batch-ms", type=float, default=DEFAULT_BATCH_MS,
                   help=f"keysplit.batch_ms (default {DEFAULT_BATCH_MS:g})")
    p.add_argument("--calibrate", action="store_true", help="make the calibration file first (four runs)")
    p.add_argument("--calibration", default=os.path.join(".keysplit", "calibration.json"))
    p.add_argument("--calibration-delay", type=float, default=2.0, help="CPU delay of the saturation run, ms")
    p.add_argument("--reuse", action="store_true", help="use the measured runs kept from an earlier invocation")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    if args.subset:
        args.groupings, args.delays, args.rates = SUBSET["groupings"], SUBSET["delays"], SUBSET["rates"]
    os.chdir(ROOT)
    from keysplit.topology_model import load_calibration, params_of_run, simulate

    if args.calibrate:
        calibrate(args, args.calibration)
    cal = load_calibration(args.calibration)
    overheads = {k: v for k, v in cal.items() if k != "source"}
    path = text_file(DEMO)
    cells = [(g, float(d), None) for d in args.delays.split(",") if d for g in args.groupings.split(",")]
    cells += [(g, args.rate_delay, float(r)) for r in args.rates.split(",") if r for g in args.groupings.split(",")]
    rows = []
    for grouping, delay, rate in cells:
        run = measure(grouping, path, args, delay, rate)
        model = simulate(params_of_run(run, **overheads), *arrays_for(run, path)).summary()
        lat = run["latency_ms"]
        row = {"grouping": grouping, "cpu_delay_ms": delay, "rate": rate, "run_id": run["run_id"],
               "measured": {"words_per_second": run["words_per_second"], "p50_ms": lat["p50"], "p99_ms": lat["p99"],
                            "tick_phase_s": run.get("tick_phase_s"), "replayed": run["replayed"]},
               "predicted": {"words_per_second": model["throughput_estimate"], "p50_ms": model["latency_p50_ms"],
                             "p99_ms": model["latency_p99_ms"]}}
        row["ratio"] = {k: ratio(row["predicted"][k], row["measured"][k]) for k in row["predicted"]}
        row["within"] = (abs(row["ratio"]["words_per_second"] - 1) <= 0.15 and abs(row["ratio"]["p50_ms"] - 1) <= 0.25
                         and abs(row["ratio"]["p99_ms"] - 1) <= 0.25)
        rows.append(row)
        print(f"{grouping} D={delay:g} {'closed' if rate is None else f'rate {rate:g}'}: ratios "
              + " ".join(f"{k} {v:.2f}" for k, v in row["ratio"].items()), file=sys.stderr)
    worst = {k: max((r["ratio"][k] for r in rows), key=lambda v: abs(v - 1)) for k in ("words_per_second", "p50_ms",
                                                                                          "p99_ms")}
    if args.json:
        json.dump({"dataset": DEMO, "calibration": cal, "rows": rows, "worst_ratio": worst}, sys.stdout, indent=2)
        print()
        return 0
    batching = f"batches of {args.batch} words / {args.batch_ms:g} ms" if args.batch > 1 else "one tuple per word"
    print(f"{DEMO} (10 words a line), W={args.workers} S={args.sources} A={args.aggregators}, flush {args.flush:g} s, "
          f"max pending {args.max_pending}, {batching}; calibration {cal.get('source')}: runner "
          f"{cal['overhead_us']:.0f} us a tuple and {cal.get('word_us', 0.0):.0f} us a word, counter "
          f"{cal['counter_overhead_us']:.0f} us a tuple, hop {cal['hop_delay_ms']:.0f} ms, ack delay "
          f"{cal.get('ack_delay_ms', 0.0):.0f} ms, tick phase "
          f"{cal['tick_phase_s']:.3f} s\n")
    print("| grouping | CPU delay (ms) | arrivals | words/s measured / predicted (ratio) | p50 ms measured / predicted "
          "(ratio) | p99 ms measured / predicted (ratio) | within target |")
    print("|---|---:|---|---:|---:|---:|---|")
    for r in rows:
        m, pr, q = r["measured"], r["predicted"], r["ratio"]
        arrivals = "closed" if r["rate"] is None else f"open, {r['rate']:g} w/s"
        print(f"| {r['grouping']} | {r['cpu_delay_ms']:g} | {arrivals} "
              f"| {m['words_per_second']:,.0f} / {pr['words_per_second']:,.0f} ({q['words_per_second']:.2f}) "
              f"| {m['p50_ms']:,.0f} / {pr['p50_ms']:,.0f} ({q['p50_ms']:.2f}) "
              f"| {m['p99_ms']:,.0f} / {pr['p99_ms']:,.0f} ({q['p99_ms']:.2f}) | {'yes' if r['within'] else 'NO'} |")
    print(f"\nworst ratios (predicted / measured): throughput {worst['words_per_second']:.2f}, p50 "
          f"{worst['p50_ms']:.2f}, p99 {worst['p99_ms']:.2f}; {sum(r['within'] for r in rows)} of {len(rows)} cells "
          "within target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
