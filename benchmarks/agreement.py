"""Does a calibration predict runs it did not see? (docs/guides/calibrate.md; prints a table, never a test)

The calibration is ``keysplit calibrate`` on two measured runs, kg and sg at one CPU delay (``--delay``); the
model with that profile then predicts every cell -- kg, sg, pkg, dkg and fish at that delay and at twice it --
and each prediction is put next to its own measured ``keysplit run``. Only the two calibration runs were seen
by the fit; the other cells are held out. Target: words/s within 15%, p50 and p99 complete latency within 25%.

Every run is ``keysplit run wordcount --json --run-id ID`` on the demo's Zipf text
(``zipf:z=1.1,keys=5000,messages=30000,seed=42``, 10 words a line), W=8, S=4, A=2, flush 1 s, max pending at its
default (the spouts' window grows from what W / D needs up to a latency: storm/window.py),
the topology's default batches, and ``--worker-processes 2``; each is stored in the project's Redis (so
``keysplit calibrate`` reads it there, as it would a cluster's run) and its summary kept under
.keysplit/bench/agreement/ (``--reuse`` reads it instead of running again, e.g. to re-fit).

    .venv/bin/python benchmarks/agreement.py [--delay 1] [--groupings kg,sg,pkg,dkg,fish] [--reuse] [--json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from keysplit.storm.window import DEFAULT_MAX_PENDING  # noqa: E402  (after the path)

KEYSPLIT = str(Path(sys.executable).with_name("keysplit"))
DEMO = "zipf:z=1.1,keys=5000,messages=30000,seed=42"
#: The groupings the calibration sees; the others are predicted.
CALIBRATION_GROUPINGS = ("kg", "sg")
PROFILE = "agreement"


def text_file(spec: str) -> Path:
    """The dataset as a 10-words-a-line text file under .keysplit/bench (generated once)."""
    path = ROOT / ".keysplit" / "bench" / "calib" / "demo.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([KEYSPLIT, "datasets", "generate", spec, "--out", str(path), "--words-per-line", "10"],
                       check=True, capture_output=True, cwd=ROOT)
    return path


def run_id(grouping: str, delay: float, args: argparse.Namespace) -> str:
    return (f"agreement-{grouping}-d{delay:g}-W{args.workers}-S{args.sources}-A{args.aggregators}"
            f"-P{args.processes}-p{args.max_pending}")


def measure(grouping: str, delay: float, path: Path, args: argparse.Namespace) -> dict:
    """One ``keysplit run wordcount --json``, stored in Redis under its id; its summary (kept for ``--reuse``)."""
    rid = run_id(grouping, delay, args)
    cache = ROOT / ".keysplit" / "bench" / "agreement" / f"{rid}.json"
    if args.reuse and cache.exists():
        return json.loads(cache.read_text())
    subprocess.run([KEYSPLIT, "runs", "delete", rid], capture_output=True, cwd=ROOT, check=False)
    cmd = [KEYSPLIT, "run", "wordcount", "--grouping", grouping, "--dataset", f"text:{path}",
           "-S", str(args.sources), "-W", str(args.workers), "-A", str(args.aggregators), "--cpu-delay", f"{delay:g}",
           "--max-pending", str(args.max_pending), "--worker-processes", str(args.processes), "--run-id", rid,
           "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{result.stderr.strip()[-2000:]}")
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text(result.stdout)
    return json.loads(result.stdout)


def calibrate(run_ids: list[str]) -> dict:
    """``keysplit calibrate --run ... --name agreement --json``: the profile."""
    cmd = [KEYSPLIT, "calibrate", "--run", ",".join(run_ids), "--name", PROFILE, "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{result.stderr.strip()[-2000:]}")
    return json.loads(result.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--delay", type=float, default=1.0, help="CPU delay of the calibration runs, ms (default 1)")
    p.add_argument("--groupings", default="kg,sg,pkg,dkg,fish", help="the cells' groupings")
    p.add_argument("--workers", "-W", type=int, default=8)
    p.add_argument("--sources", "-S", type=int, default=4)
    p.add_argument("--aggregators", "-A", type=int, default=2)
    p.add_argument("--max-pending", type=int, default=DEFAULT_MAX_PENDING)
    p.add_argument("--processes", type=int, default=2, help="--worker-processes of every run (default 2)")
    p.add_argument("--reuse", action="store_true", help="use the measured runs kept from an earlier invocation")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    from keysplit.topology_model.profile import arrays_of_run, describe, params_for, predict, ratios, within

    path = text_file(DEMO)
    # the calibration's runs are the table's "seen" cells: measured once (a second measure would replace them)
    seen_runs = {(g, args.delay): measure(g, args.delay, path, args) for g in CALIBRATION_GROUPINGS}
    seen = list(seen_runs.values())
    profile = calibrate([r["run_id"] for r in seen])
    print(f"calibrated on {', '.join(r['run_id'] for r in seen)}: " + ", ".join(
        f"{k} {v:.3g}" for k, v in profile["fitted"].items()) + "; the runs' first hop (ms) "
        + ", ".join(f"{r['first_hop_ms']:.1f}" for r in profile["runs"]), file=sys.stderr)
    rows = []
    for delay in (args.delay, 2 * args.delay):
        for grouping in args.groupings.split(","):
            run = seen_runs.get((grouping, delay)) or measure(grouping, delay, path, args)
            pred = predict(params_for(run, profile), arrays_of_run(run))
            lat = run["latency_ms"]
            meas = {"words_per_second": run["words_per_second"], "p50_ms": lat["p50"], "p99_ms": lat["p99"]}
            r = ratios(pred, meas)
            rows.append({"grouping": grouping, "cpu_delay_ms": delay, "run_id": run["run_id"],
                         "seen": grouping in CALIBRATION_GROUPINGS and delay == args.delay,
                         "measured": meas, "predicted": pred, "ratio": r, "within": within(r)})
            print(f"{grouping} D={delay:g}: " + " ".join(f"{k} {v:.2f}" for k, v in r.items()), file=sys.stderr)
    held = [r for r in rows if not r["seen"]]
    worst = {k: max((r["ratio"][k] for r in held), key=lambda v: abs(v - 1)) for k in held[0]["ratio"]}
    if args.json:
        json.dump({"dataset": DEMO, "profile": profile, "rows": rows, "worst_held_out": worst}, sys.stdout, indent=2)
        print()
        return 0
    print(f"{DEMO} (10 words a line), W={args.workers} S={args.sources} A={args.aggregators}, flush 1 s, max pending "
          f"{args.max_pending}, {args.processes} worker processes, default batches; profile {PROFILE} from kg and sg "
          f"at {args.delay:g} ms: {describe(profile)}\n")
    print("| grouping | CPU delay (ms) | seen by the fit | words/s measured / predicted (ratio) "
          "| p50 ms measured / predicted (ratio) | p99 ms measured / predicted (ratio) | within target |")
    print("|---|---:|---|---:|---:|---:|---|")
    for r in rows:
        m, pr, q = r["measured"], r["predicted"], r["ratio"]
        print(f"| {r['grouping']} | {r['cpu_delay_ms']:g} | {'yes' if r['seen'] else 'no'} "
              f"| {m['words_per_second']:,.0f} / {pr['words_per_second']:,.0f} ({q['words_per_second']:.2f}) "
              f"| {m['p50_ms']:,.0f} / {pr['p50_ms']:,.0f} ({q['p50_ms']:.2f}) "
              f"| {m['p99_ms']:,.0f} / {pr['p99_ms']:,.0f} ({q['p99_ms']:.2f}) | {'yes' if r['within'] else 'NO'} |")
    print(f"\nheld-out cells: worst ratios (predicted / measured) words/s {worst['words_per_second']:.2f}, p50 "
          f"{worst['p50_ms']:.2f}, p99 {worst['p99_ms']:.2f}; {sum(r['within'] for r in held)} of {len(held)} "
          "within target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
