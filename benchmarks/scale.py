"""Scale: 10 million messages over 1 million distinct keys through every available grouping.

Usage::

    .venv/bin/python benchmarks/scale.py                       # 10M messages, 1M keys, every grouping
    .venv/bin/python benchmarks/scale.py --messages 1000000 --keys 100000 --groupings kg,pkg,dkg

Keys follow ``zipf:z=Z,keys=KEYS,seed=SEED`` (the same stream as that dataset spec). Each grouping runs in a
fresh subprocess, so peak memories do not mix: the child draws the key indices (numpy, int32) and creates the
key names once, records its resident set size (the baseline), then routes every message through ONE source's
reference ``choose`` with ``now = seq / rate``; only the ``choose`` loop is timed (the key strings of each
64K chunk are looked up before the clock starts). It reports messages/s, the peak RSS (``ru_maxrss``) and the
growth of the peak over the baseline (what the grouping's state costs), and the speed as a ratio to ``kg``
run the same way in the same invocation (the floor: one hash per message). Groupings that need a full pass
(``offgreedy``) get the exact key counts first, outside the timing. Timings are wall-clock on a shared
machine: compare the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

CHUNK = 1 << 16


def key_indices(z: float, keys: int, messages: int, seed: int):
    """The rank (1..keys) of every message of ``zipf:z,keys,messages,seed``, as the generator draws them."""
    import numpy as np

    from keysplit.datasets import open_dataset
    from keysplit.datasets.generators import _CHUNK

    ds = open_dataset(f"zipf:z={z},keys={keys},messages={messages},seed={seed}")
    rng = np.random.Generator(np.random.PCG64(seed))
    out = np.empty(messages, dtype=np.int32)
    done = 0
    while done < messages:  # the generator's own chunking, so the stream equals the dataset's
        n = min(_CHUNK, messages - done)
        out[done : done + n] = ds.key_indices(rng, n, done)
        done += n
    return out


def rss_mib() -> float:
    """Peak resident set size of this process so far, MiB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    """Current resident set size, MiB."""
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def keys_held(g) -> int | None:
    """How many per-key entries the grouping keeps (DKG key items, routing tables), when it has such a table."""
    for attr in ("key_items", "routing_table"):
        table = getattr(g, attr, None)
        if isinstance(table, dict):
            return len(table)
    return None


def run_one(spec: str, args: argparse.Namespace) -> dict:
    """Route the whole stream through one grouping in this process; returns the measurements."""
    import numpy as np

    from keysplit.groupings import build_grouping

    ranks = key_indices(args.z, args.keys, args.messages, args.seed)
    names = [f"k{i}" for i in range(args.keys + 1)]
    [g] = build_grouping(spec, args.workers, 1)
    if g.needs_full_pass:
        counts = np.bincount(ranks, minlength=args.keys + 1)
        g.fit({names[i]: int(counts[i]) for i in np.nonzero(counts)[0].tolist()})
        del counts
    choose = g.choose
    inv_rate = 1.0 / args.rate
    baseline = current_rss_mib()
    elapsed = 0.0
    seq = 0
    for start in range(0, args.messages, CHUNK):
        keys = [names[i] for i in ranks[start : start + CHUNK].tolist()]
        t = time.perf_counter()
        for key in keys:
            choose(key, seq * inv_rate)
            seq += 1
        elapsed += time.perf_counter() - t
    peak = rss_mib()
    return {
        "grouping": g.describe(),
        "messages": seq,
        "seconds": elapsed,
        "messages_per_second": seq / elapsed if elapsed else 0.0,
        "baseline_rss_mib": baseline,
        "peak_rss_mib": peak,
        "state_growth_mib": max(0.0, peak - baseline),
        "distinct_keys_held": keys_held(g),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=10_000_000)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--z", type=float, default=1.0, help="Zipf exponent (default 1.0)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--workers", "-W", type=int, default=10)
    p.add_argument("--rate", type=float, default=10_000.0, help="event-time messages per second (default 10000)")
    p.add_argument("--groupings", "-g", default="", help="comma-separated specs (default: every available one)")
    p.add_argument("--one", metavar="SPEC", help=argparse.SUPPRESS)  # child mode: one grouping, JSON out
    args = p.parse_args(argv)
    if args.messages < 1 or args.keys < 1 or args.workers < 1 or args.rate <= 0:
        p.error("--messages, --keys, --workers and --rate must be positive")
    if args.one:
        print(json.dumps(run_one(args.one, args)))
        return 0

    from keysplit.groupings import available

    specs = [s for s in args.groupings.split(",") if s] or available()
    if "kg" not in specs:
        specs.insert(0, "kg")  # the baseline of the ratios
    print(f"zipf:z={args.z},keys={args.keys},messages={args.messages},seed={args.seed}; W={args.workers}, "
          f"1 source, reference choose, now = seq/{args.rate:g}; one fresh process per grouping", flush=True)
    header = (f"{'grouping':<12} {'msgs/s':>12} {'vs kg':>7} {'seconds':>8} {'peak RSS MiB':>13} "
              f"{'growth MiB':>11} {'keys held':>10}")
    print(header)
    print("-" * len(header), flush=True)
    results: dict[str, dict] = {}
    child = [sys.executable, __file__, "--messages", str(args.messages), "--keys", str(args.keys), "--z",
             str(args.z), "--seed", str(args.seed), "--workers", str(args.workers), "--rate", str(args.rate)]
    for spec in specs:
        proc = subprocess.run([*child, "--one", spec], capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"{spec:<12} failed: {last}", flush=True)
            continue
        r = results[spec] = json.loads(proc.stdout.strip().splitlines()[-1])
        base = results.get("kg", r)["messages_per_second"]
        print(f"{spec:<12} {r['messages_per_second']:>12,.0f} {r['messages_per_second'] / base:>6.2f}x "
              f"{r['seconds']:>8.1f} {r['peak_rss_mib']:>13.1f} {r['state_growth_mib']:>11.1f} "
              f"{'-' if r['distinct_keys_held'] is None else format(r['distinct_keys_held'], ','):>10}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
