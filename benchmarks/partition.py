"""Construction time of Gedik's partitioning functions by algorithm, |D| and N, and lookup speed.

For each |D| (Zipf z=1, LCL, alpha=1.2, sigma=0.1, U^APM) the function is grown from N=1 to N=max one channel
at a time, as in the paper's §5; each construction N-1 -> N is timed. Baseline, measured in the same process:
``scan`` (the paper's cheapest algorithm, O(R N log N)); ratios are algorithm time / scan time. A second
block compares lookups (Alg. 1: explicit hash, then the bucketed consistent hash) with ``HashRing.lookup``
(binary search over the ring) on the same keys. The machine is shared: compare the ratios.

    .venv/bin/python benchmarks/partition.py [--domains 10000,100000,1000000] [--max-workers 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from keysplit.hashing import HashRing
from keysplit.partitioning.construct import ALGORITHMS, Config, construct
from keysplit.partitioning.experiment import key_name, zipf_frequencies
from keysplit.partitioning.function import PartitioningFunction
from keysplit.partitioning.threshold import frequency_threshold


def construction_times(domain: int, max_workers: int, sigma: float) -> dict:
    freq = zipf_frequencies(domain, 1.0)
    out = {}
    for algo in ALGORITHMS:
        cfg = Config(algo=algo, sigma=sigma, domain=domain)
        p = PartitioningFunction(1)
        per_n = {}
        for n in range(2, max_workers + 1):
            delta = frequency_threshold(cfg.resources, n, sigma, domain)
            top = int(np.searchsorted(-freq, -delta, side="right"))
            cands = {key_name(i): float(freq[i]) for i in range(top)}
            for d in p.explicit_hash:
                cands.setdefault(d, float(freq[int(d[1:]) - 1]))
            started = time.perf_counter()
            step = construct(p, cands, n, cfg)
            per_n[n] = {"seconds": time.perf_counter() - started, "explicit": len(step.function)}
            p = step.function
        out[algo] = per_n
    return out


def lookup_rates(workers: int, keys: int) -> dict:
    names = [f"k{i}" for i in range(keys)]
    p = PartitioningFunction(workers, {names[i]: i % workers for i in range(50)})
    ring = HashRing(range(workers), vnodes=p.vnodes)
    p.lookup(names[0])
    rates = {}
    for label, fn in (("HashRing.lookup (bisect)", ring.lookup), ("PartitioningFunction.lookup", p.lookup)):
        started = time.perf_counter()
        for k in names:
            fn(k)
        rates[label] = keys / (time.perf_counter() - started)
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", default="10000,100000,1000000")
    ap.add_argument("--max-workers", type=int, default=10)
    ap.add_argument("--sigma", type=float, default=0.1)
    ap.add_argument("--lookups", type=int, default=300_000)
    ap.add_argument("--lookup-workers", default="10,100", help="channel counts for the lookup comparison")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    domains = [int(d) for d in args.domains.split(",")]
    result = {"construction": {},
              "lookup": {int(w): lookup_rates(int(w), args.lookups) for w in args.lookup_workers.split(",")}}
    for domain in domains:
        result["construction"][domain] = construction_times(domain, args.max_workers, args.sigma)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"construction time N-1 -> N (ms), Zipf z=1, LCL, sigma={args.sigma}; ratio to scan in the same process")
    for domain, by_algo in result["construction"].items():
        print(f"\n|D| = {domain:,}")
        print(f"{'N':>3} {'|H_p|':>6} " + " ".join(f"{a + ' ms':>10} {a + '/scan':>12}" for a in ALGORITHMS))
        for n in range(2, args.max_workers + 1):
            scan = by_algo["scan"][n]["seconds"]
            cells = " ".join(f"{by_algo[a][n]['seconds'] * 1e3:>10.2f} {by_algo[a][n]['seconds'] / scan:>12.2f}"
                             for a in ALGORITHMS)
            print(f"{n:>3} {by_algo['scan'][n]['explicit']:>6} {cells}")
        totals = {a: sum(v["seconds"] for v in by_algo[a].values()) for a in ALGORITHMS}
        print("all " + " ".join(f"{a}={totals[a] * 1e3:.1f}ms ({totals[a] / totals['scan']:.2f}x)" for a in ALGORITHMS))
    for workers, rates in result["lookup"].items():
        base = rates["HashRing.lookup (bisect)"]
        print(f"\nlookups, {workers} channels x 1000 replicas, {args.lookups:,} keys (ratio to bisect ring):")
        for label, rate in rates.items():
            print(f"  {label:<30} {rate:>12,.0f} lookups/s  {rate / base:.2f}x")


if __name__ == "__main__":
    main()
