"""FISH reference ``choose`` speed, against PKG's in the same process (target: >= 300,000 messages/s/core).

Usage: ``.venv/bin/python benchmarks/fish.py [MESSAGES] [KEYS] [W]`` (defaults 1,000,000 / 1,000,000 / 64).
Keys follow a Zipf(1.0) ranking over KEYS keys with the drift of the ``drift`` generator, pre-generated so
only routing is timed; one source; ``now`` advances at 10,000 messages/s of event time. Also times FISH with
heterogeneous capacities (the estimated-wait path with its interval drain) and the epoch counter alone.
"""

from __future__ import annotations

import sys
import time
import tracemalloc

from keysplit.datasets import open_dataset
from keysplit.execution import half_fast
from keysplit.groupings import build_grouping
from keysplit.sketches.epoch import EpochCounter


def rate(spec: str, keys: list[str], workers: int, capacities: list[float] | None = None) -> tuple[float, float]:
    [g] = build_grouping(spec, workers)
    if capacities is not None:
        g.set_capacities(capacities)
    choose = g.choose
    t = time.perf_counter()
    for i, k in enumerate(keys):
        choose(k, i * 1e-4)
    elapsed = time.perf_counter() - t
    return len(keys) / elapsed, state_mib(g)


def state_mib(g) -> float:
    """Memory the grouping's state holds (its dicts and lists, measured by copying them under tracemalloc)."""
    import copy

    tracemalloc.start()
    clone = copy.deepcopy(g)
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del clone
    return size / 2**20


def main() -> None:
    messages = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    nkeys = int(sys.argv[2]) if len(sys.argv) > 2 else 1_000_000
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    ds = open_dataset(f"drift:z=1.0,keys={nkeys},messages={messages},seed=1")
    keys = [k for _, ks in ds.records() for k in ks]
    print(f"{messages:,} messages over {len(set(keys)):,} distinct keys (of {nkeys:,}), W={workers}, 1 source")
    base, base_mem = rate("pkg", keys, workers)
    print(f"{'pkg (baseline)':34s} {base:>12,.0f} msgs/s  state {base_mem:6.2f} MiB")
    caps = half_fast(workers, 10_000.0)
    for label, spec, c in [("fish", "fish", None), ("fish, heterogeneous capacities", "fish", caps),
                           ("fish:placement=mod", "fish:placement=mod", None)]:
        r, mem = rate(spec, keys, workers, c)
        print(f"{label:34s} {r:>12,.0f} msgs/s  state {mem:6.2f} MiB  ({r / base:.2f}x pkg)")
    counter = EpochCounter()
    t = time.perf_counter()
    for k in keys:
        counter.update(k)
    r = len(keys) / (time.perf_counter() - t)
    print(f"{'EpochCounter.observe alone':34s} {r:>12,.0f} msgs/s  ({r / base:.2f}x pkg)")


if __name__ == "__main__":
    main()
