"""Issue 14's speed targets, end to end through the installed ``keysplit`` command (wall clock, subprocesses):

- ``keysplit --help``: CLI start (target <= 0.3 s; subcommand modules are imported lazily);
- ``keysplit simulate --dataset zipf:z=1.0,keys=100000,messages=5000000,seed=2 -W 10 -S 5 -g pkg --json``: wall time
  against the routing time it reports (messages / messages_per_second; target wall <= 1.5x routing);
- ``keysplit advise --dataset zipf:z=1.0,keys=100000,messages=10000000,seed=2 -W 10 --json``: wall time
  (target <= 20 s), with advise's own split into measuring and simulating.

Where simulate's wall time goes outside routing: the start-up of a one-message ``simulate`` (interpreter,
imports, loading the kernels), split in a fresh process into importing the ``simulate`` command, importing the
fast path and loading its kernels; and the same simulate command at more messages (``--scale``), to show the
ratio fall as the fixed start-up is spread over a longer run. The kernels come from the ahead-of-time build
(``keysplit.simulator.compiled``, made by ``make install``); the 5M simulate also runs with ``KEYSPLIT_KERNELS=jit``,
numba's JIT loading them from its on-disk cache, as the baseline.

Each command runs ``--repeat`` times (default 3) and the best wall time is kept (the machine is shared).
Run: ``.venv/bin/python benchmarks/advise.py [--repeat N] [--scale M,M...] [--skip-advise] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

KEYSPLIT = [os.path.join(os.path.dirname(sys.executable), "keysplit")]
SIMULATE = ["simulate", "--dataset", "zipf:z=1.0,keys=100000,messages={m},seed=2", "-W", "10", "-S", "5",
            "-g", "pkg", "--json"]
TINY = ["simulate", "--dataset", "zipf:keys=10,messages=1", "-g", "pkg", "--json"]
# The start-up, phase by phase, in a fresh process (as the CLI pays it).
PHASES = """
import json, time
t0 = time.perf_counter()
import keysplit.commands.simulate
t1 = time.perf_counter()
import keysplit.simulator.fast
t2 = time.perf_counter()
keysplit.simulator.fast.warmup()
t3 = time.perf_counter()
print(json.dumps({"import_simulate_command": t1 - t0, "import_fast_path": t2 - t1, "kernel_load": t3 - t2}))
"""
ADVISE = ["advise", "--dataset", "zipf:z=1.0,keys=100000,messages=10000000,seed=2", "-W", "10", "--json"]


def timed(args: list[str], kernels: str = "auto") -> tuple[float, str]:
    env = {**os.environ, "KEYSPLIT_KERNELS": kernels}
    started = time.perf_counter()
    out = subprocess.run(KEYSPLIT + args, check=True, capture_output=True, text=True, env=env).stdout
    return time.perf_counter() - started, out


def best(args: list[str], repeat: int, kernels: str = "auto") -> tuple[float, str]:
    return min((timed(args, kernels) for _ in range(repeat)), key=lambda r: r[0])


def simulate_at(messages: int, repeat: int, kernels: str = "auto") -> dict:
    """Best wall time of the simulate command at ``messages``, with the routing time that run reported."""
    wall, out = best([a.format(m=messages) for a in SIMULATE], repeat, kernels)
    routing = messages / json.loads(out)["runs"][0]["messages_per_second"]
    return {"messages": messages, "wall_seconds": wall, "routing_seconds": routing, "wall_over_routing": wall / routing}


def startup_phases(repeat: int) -> dict:
    """The fastest of ``repeat`` fresh processes, phase by phase (each phase its own minimum)."""
    runs = [json.loads(subprocess.run([sys.executable, "-c", PHASES], check=True, capture_output=True,
                                      text=True).stdout) for _ in range(repeat)]
    return {k: min(r[k] for r in runs) for k in runs[0]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--scale", default="20000000",
                    help="comma-separated message counts of further simulate runs (empty: none)")
    ap.add_argument("--skip-advise", action="store_true", help="leave out the advise run (about a minute)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    from keysplit.simulator import compiled

    timed(["simulate", "--dataset", "zipf:messages=10", "-g", "pkg,salt"], "jit")  # fill numba's cache, once
    help_s, _ = best(["--help"], args.repeat)
    sim = simulate_at(5_000_000, args.repeat)
    jit = simulate_at(5_000_000, args.repeat, "jit")
    tiny_s, _ = best(TINY, args.repeat)
    phases = startup_phases(args.repeat)
    scale = [simulate_at(int(m), args.repeat) for m in args.scale.split(",") if m.strip()]
    result = {
        "kernels": compiled.mode(),
        "help_seconds": help_s,
        "simulate_wall_seconds": sim["wall_seconds"],
        "simulate_routing_seconds": sim["routing_seconds"],
        "simulate_wall_over_routing": sim["wall_over_routing"],
        "simulate_jit": jit,
        "simulate_startup_seconds": tiny_s,
        "simulate_startup_phases": phases,
        "simulate_scale": scale,
    }
    if not args.skip_advise:
        adv_s, adv_out = best(ADVISE, args.repeat)
        adv = json.loads(adv_out)
        result.update(advise_wall_seconds=adv_s, advise_timing=adv["timing"],
                      advise_recommended=adv["advice"][0]["recommended"])
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"keysplit --help                 {help_s:6.2f} s   (target <= 0.3 s)")
    print(f"keysplit simulate (5M, pkg)     {sim['wall_seconds']:6.2f} s wall, {sim['routing_seconds']:.2f} s routing "
          f"reported: {sim['wall_over_routing']:.2f}x   (target <= 1.5x; kernels: {result['kernels']})")
    print(f"  baseline, numba's JIT         {jit['wall_seconds']:6.2f} s wall, {jit['routing_seconds']:.2f} s routing "
          f"reported: {jit['wall_over_routing']:.2f}x; wall {sim['wall_seconds'] / jit['wall_seconds']:.2f}x the JIT's")
    print(f"  start-up (1-message simulate) {tiny_s:6.2f} s wall; in a fresh process: "
          + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    for r in scale:
        print(f"  simulate at {r['messages']:>11,}  {r['wall_seconds']:6.2f} s wall, "
              f"{r['routing_seconds']:.2f} s routing: {r['wall_over_routing']:.2f}x")
    if not args.skip_advise:
        print(f"keysplit advise (10M, W=10)     {adv_s:6.2f} s wall (measuring {adv['timing']['measure_seconds']:.1f} "
              f"s, simulating {adv['timing']['simulate_seconds']:.1f} s): {result['advise_recommended']}   "
              "(target <= 20 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
