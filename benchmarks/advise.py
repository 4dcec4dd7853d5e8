"""Issue 14's speed targets, end to end through the installed ``keysplit`` command (wall clock, subprocesses):

- ``keysplit --help``: CLI start (target <= 0.3 s; subcommand modules are imported lazily);
- ``keysplit simulate --dataset zipf:z=1.0,keys=100000,messages=5000000,seed=2 -W 10 -S 5 -g pkg --json``: wall time
  against the routing time it reports (messages / messages_per_second; target wall <= 1.5x routing);
- ``keysplit advise --dataset zipf:z=1.0,keys=100000,messages=10000000,seed=2 -W 10 --json``: wall time
  (target <= 20 s), with advise's own split into measuring and simulating.

Each command runs ``--repeat`` times (default 3) and the best wall time is kept (the machine is shared).
Run: ``.venv/bin/python benchmarks/advise.py [--repeat N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

KEYSPLIT = [os.path.join(os.path.dirname(sys.executable), "keysplit")]
SIMULATE = ["simulate", "--dataset", "zipf:z=1.0,keys=100000,messages=5000000,seed=2", "-W", "10", "-S", "5",
            "-g", "pkg", "--json"]
ADVISE = ["advise", "--dataset", "zipf:z=1.0,keys=100000,messages=10000000,seed=2", "-W", "10", "--json"]


def timed(args: list[str]) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(KEYSPLIT + args, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - started, out


def best(args: list[str], repeat: int) -> tuple[float, str]:
    return min((timed(args) for _ in range(repeat)), key=lambda r: r[0])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    timed(["simulate", "--dataset", "zipf:messages=10", "-g", "pkg,salt"])  # numba's cache, once
    help_s, _ = best(["--help"], args.repeat)
    sim_s, sim_out = best(SIMULATE, args.repeat)
    run = json.loads(sim_out)["runs"][0]
    routing_s = json.loads(sim_out)["dataset"]["messages"] / run["messages_per_second"]
    adv_s, adv_out = best(ADVISE, args.repeat)
    adv = json.loads(adv_out)
    result = {
        "help_seconds": help_s,
        "simulate_wall_seconds": sim_s,
        "simulate_routing_seconds": routing_s,
        "simulate_wall_over_routing": sim_s / routing_s,
        "advise_wall_seconds": adv_s,
        "advise_timing": adv["timing"],
        "advise_recommended": adv["advice"][0]["recommended"],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"keysplit --help                 {help_s:6.2f} s   (target <= 0.3 s)")
    print(f"keysplit simulate (5M, pkg)     {sim_s:6.2f} s wall, {routing_s:.2f} s routing reported: "
          f"{sim_s / routing_s:.2f}x   (target <= 1.5x)")
    print(f"keysplit advise (10M, W=10)     {adv_s:6.2f} s wall (measuring {adv['timing']['measure_seconds']:.1f} s, "
          f"simulating {adv['timing']['simulate_seconds']:.1f} s): {result['advise_recommended']}   (target <= 20 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
