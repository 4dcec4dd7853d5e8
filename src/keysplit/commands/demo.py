"""``keysplit demo``: the whole product on a skewed dataset: simulate, run the topology, replay, compare.

What ``make demo`` runs, end to end.

It is the sequence of commands a user would type, each printed before it runs: write a Zipf corpus,
simulate every grouping on it, run the word-count topology with KG, SG and PKG, calibrate the topology model
from the KG and SG runs, replay the same file in Spark with that calibration, and compare the runs with the
replay. Everything lands under ``.keysplit/demo/``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import time
from pathlib import Path

from keysplit.cli import command_summary
from keysplit.commands.common import ExamplesHelpFormatter, cpu_delay, ensure_output_dir, positive_int
from keysplit.errors import KeysplitError, SpecError
from keysplit.groupings import available, check_grouping
from keysplit.storm.cpu_delay import DEFAULT_CPU_DELAY_MS

DEMO_DATA = "zipf:z=1.1,keys=5000,messages=30000,seed=42"
TOPOLOGY_GROUPINGS = ("kg", "sg", "pkg")
#: The calibration profile the demo makes and its replay uses.
CALIBRATION = "demo"

NAME, HELP = command_summary(__doc__)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        NAME, help=HELP,
        description="Write a skewed Zipf corpus, simulate every grouping on it, run the word-count topology "
        "with KG, SG and PKG, replay the same file in Spark and compare the runs with the replay. "
        "Outputs go to DIR (default .keysplit/demo).",
        epilog="examples:\n"
        "  keysplit demo                      # what `make demo` runs (about 2 minutes)\n"
        "  keysplit demo --simulate-only      # the dataset and the simulation alone, in seconds\n"
        "  keysplit demo --out demo -W 16 -S 8 --cpu-delay 2",
        formatter_class=ExamplesHelpFormatter,
    )
    p.add_argument("--out", default=".keysplit/demo", metavar="DIR", help="output directory")
    p.add_argument("--workers", "-W", type=positive_int, default=8, help="workers (default 8)")
    p.add_argument("--sources", "-S", type=positive_int, default=4, help="sources (default 4)")
    p.add_argument("--cpu-delay", type=cpu_delay, default=DEFAULT_CPU_DELAY_MS, metavar="MS",
                   help="per-word work at the counters, ms (default 1: enough to saturate KG's hot worker)")
    p.add_argument("--simulate-only", action="store_true", help="stop after the simulation (no Redis, no Spark)")
    p.set_defaults(func=run)


def step(title: str, *argv: str) -> None:
    """Print the command like a shell session, then run it through the same entry point as the shell."""
    from keysplit.cli import main

    print(f"\n== {title}\n$ keysplit {shlex.join(argv)}", flush=True)
    status = main(list(argv))
    if status:
        raise KeysplitError(f"demo step failed: keysplit {shlex.join(argv)} (exit {status})")


def run(args: argparse.Namespace) -> int:
    # Step 2 simulates every grouping with -W/-S (and step 3 runs kg, sg and pkg with them): a shape one of
    # them refuses (W=1: pkg and dkg choose between 2 workers) fails now, not after the corpus is written.
    for spec in available():
        try:
            check_grouping(spec, args.workers, args.sources)
        except SpecError as exc:
            raise SpecError(f"demo -W {args.workers} -S {args.sources}: {exc}") from None
    out = Path(ensure_output_dir(args.out))
    corpus = out / "zipf.txt"
    dataset = f"text:{corpus}"
    shape = ["-W", str(args.workers), "-S", str(args.sources)]
    # the topology's knobs, given to the runs and to the replay alike (compare refuses a pair whose knobs differ)
    knobs = ["-A", "2", "--cpu-delay", f"{args.cpu_delay:g}", "--max-pending", "4000"]
    step("1. a skewed corpus: Zipf z=1.1 over 5,000 words, 10 words a line",
         "datasets", "generate", DEMO_DATA, "--out", str(corpus), "--words-per-line", "10", "--force")
    # the demo's own folder: its previous figure (perhaps drawn before figures carried keysplit's mark) goes
    (out / "simulate.png").unlink(missing_ok=True)
    step("2. every grouping in the simulator (imbalance and memory)",
         "simulate", "--dataset", dataset, *shape, "-g", ",".join(available()), "--plot", str(out / "simulate.png"))
    if args.simulate_only:
        return 0
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    runs = [f"demo-{stamp}-{g}" for g in TOPOLOGY_GROUPINGS]
    loads = [_load_average()]  # how busy the machine was around the runs the model is judged on
    for letter, grouping, run_id in zip("abc", TOPOLOGY_GROUPINGS, runs):
        step(f"3{letter}. the word-count topology with {grouping.upper()} (real multi-lang subprocesses, Redis feed)",
             "run", "wordcount", "--grouping", grouping, "--dataset", dataset, *shape, *knobs, "--run-id", run_id)
        loads.append(_load_average())
    # the model's costs from two of the runs just measured (kg's hot counter saturates, sg's load is even): pkg,
    # which the fit does not see, is the prediction the comparison checks
    step("4. the model calibrated on this machine from the kg and sg runs (pkg is held out)",
         "calibrate", "--run", ",".join(runs[:2]), "--name", CALIBRATION)
    step("5. the same file replayed in Spark, with the calibrated topology model's estimate of throughput and latency",
         "replay", "--dataset", dataset, "-g", ",".join(TOPOLOGY_GROUPINGS), *shape, *knobs,
         "--calibration", CALIBRATION, "--out", str(out / "replay"))
    step("6. measured runs next to the replay",
         "compare", "--run", ",".join(runs), "--replay", str(out / "replay"), "--out", str(out / "compare"))
    print_agreement(out / "compare" / "comparison.json", max(loads))
    print(f"\nplots: {out / 'simulate.png'} and {out / 'compare'}/*.png")
    return 0


#: The calibration's targets (docs/guides/calibrate.md): words/s within 15%, p50 and p99 latency within 25%.
TARGETS = {"throughput": ("words/s", 0.15), "latency_p50_ms": ("p50", 0.25), "latency_p99_ms": ("p99", 0.25)}


#: A 1-minute load average above this many times the cores while the runs ran: too busy to judge the model by them.
BUSY_LOAD = 1.5


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on every platform
        return None


def print_agreement(comparison: Path, load: float | None = None, cores: int | None = None) -> None:
    """One line a grouping: the model's estimate over the measured value, and whether it is within its target.

    How close the model comes depends on how busy the machine was while the runs ran (the calibration sees kg
    and sg; a load that changes between them and pkg's run moves pkg's ratio), so the demo reports the
    agreement and never fails on it; benchmarks/agreement.py measures it over more cells. ``load``, the highest
    1-minute load average seen around the runs: above :data:`BUSY_LOAD` x ``cores``, a last line says the
    machine was too busy to judge the model by this demo.
    """
    import json

    rows = json.loads(comparison.read_text(encoding="utf-8"))["rows"]
    print("\n== the model's agreement, model / measured (targets: words/s within 15%, latency within 25%)")
    for row in rows:
        cells = []
        for key, (label, bound) in TARGETS.items():
            ratio = row["ratio"].get(key)
            verdict = "n/a" if ratio is None else f"{ratio:.2f}" + ("" if abs(ratio - 1) <= bound else " (outside)")
            cells.append(f"{label} {verdict}")
        held_out = "" if row["grouping"] in TOPOLOGY_GROUPINGS[:2] else " (held out of the calibration)"
        print(f"{row['grouping']:>4}: " + ", ".join(cells) + held_out)
    cores = cores or os.cpu_count() or 1
    if load is not None and load > BUSY_LOAD * cores:
        print(f"note: the machine was too busy to judge the model by these runs (load average up to {load:.1f} on "
              f"{cores} cores while they ran: other work shared the cores, and unevenly between the runs); run the "
              "demo again when the machine is quieter (benchmarks/agreement.py measures the model over more cells)")
