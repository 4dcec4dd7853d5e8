"""Routing speed: messages per second of every grouping's reference ``choose``, of whole simulations (the
reference loop and the numba fast path), each with its ratio to a floor measured in the same process.

The floor is ``np.bincount`` of the precomputed key-grouping assignment of the same messages: the cost of
counting loads when every decision is already known. Ratios to it are comparable across runs on a shared,
noisy machine; the absolute numbers are not. Issue 2's targets: the reference ``choose`` of kg, sg and pkg
at least 1 million messages/s on one core; the fast path at least 20 million messages/s.

Sections of the output:

- ``floor``: np.bincount of the KG assignment; a Python loop making one no-op call per message (the
  interpreter's own floor for any per-message ``choose``).
- ``choose``: ``Grouping.choose(key, now)`` of one source (S=1), every grouping in
  ``keysplit.groupings.available()`` plus pkg variants, over the first ``--messages`` keys, ``now = i/rate``
  (so probing groupings probe; the probe reads a fixed load vector). Stops early after ``--budget`` seconds.
- ``simulate``: ``simulate(engine="reference")`` end to end (W workers, S sources, metrics included).
- ``fast``: on ``--fast-messages`` messages: the dataset's own sampling (``draw``), sampling plus naming keys
  (``encode``), the kernel alone over encoded key ids (``kernel``), and ``fast_simulate`` end to end
  (``fast_simulate``, which includes the sampling). The kernel's compile (or cache-load) time is separate.

Run: ``make bench`` or ``.venv/bin/python benchmarks/routing.py [--messages N] [--keys K] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable

import numpy as np

from keysplit.datasets import open_dataset
from keysplit.groupings import available
from keysplit.groupings.hosting import prepare_groupings
from keysplit.simulator import fast, simulate

PKG_VARIANTS = ["pkg:d=4", "pkg:d=8", "pkg:load=global", "pkg:probe=1", "pkg:probe=1,probe_scale=total"]
FAST_SPECS = ["kg", "sg", "pkg", *PKG_VARIANTS]
CHOOSE_TARGET = 1e6  # docs/benchmarks/index.md: reference choose of kg, sg, pkg
FAST_TARGET = 20e6  # docs/benchmarks/index.md: the fast path
BLOCK = 1 << 14


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    """The shortest wall time of ``repeat`` calls of ``fn`` (the least disturbed by other processes)."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def floor_rate(assignment: np.ndarray, workers: int, repeat: int) -> float:
    """Messages/s of np.bincount over a precomputed assignment: the floor every other number is divided by."""
    return len(assignment) / best_of(max(repeat, 5), lambda: np.bincount(assignment, minlength=workers))


def choose_rate(
    spec: str, workers: int, dataset, keys: list[str], nows: list[float], budget: float
) -> tuple[int, float]:
    """Messages routed by one source's ``choose`` and their wall time (stops after ``budget`` seconds)."""
    loads = [0] * workers
    [g] = prepare_groupings(spec, workers, 1, dataset, lambda: loads)
    choose = g.choose
    done = 0
    started = time.perf_counter()
    elapsed = 0.0
    for start in range(0, len(keys), BLOCK):
        for key, now in zip(keys[start : start + BLOCK], nows[start : start + BLOCK]):
            choose(key, now)
        done = min(start + BLOCK, len(keys))
        elapsed = time.perf_counter() - started
        if elapsed > budget:
            break
    return done, elapsed


def python_call_floor(keys: list[str], nows: list[float]) -> float:
    def noop(key: str, now: float) -> int:
        return 0

    started = time.perf_counter()
    for key, now in zip(keys, nows):
        noop(key, now)
    return len(keys) / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000, help="messages for choose and reference simulations")
    p.add_argument("--fast-messages", type=int, default=None,
                   help="messages for the fast path (default 10x --messages)")
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys of the Zipf stream (default 10000)")
    p.add_argument("--z", type=float, default=1.0, help="Zipf exponent (default 1.0)")
    p.add_argument("--workers", "-W", type=int, default=10)
    p.add_argument("--sources", "-S", type=int, default=5, help="sources of the whole simulations (default 5)")
    p.add_argument("--rate", type=float, default=10_000.0, help="event-time rate, messages/s (default 10000)")
    p.add_argument("--budget", type=float, default=10.0, help="seconds at most per grouping's choose loop")
    p.add_argument("--repeat", type=int, default=3, help="fast-path measurements keep the best of this many")
    p.add_argument("--groupings", default=None, help="comma-separated names instead of every available grouping")
    p.add_argument("--skip-reference-simulate", action="store_true", help="skip the reference whole simulations")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    args = p.parse_args(argv)
    fast_messages = args.fast_messages or 10 * args.messages
    workers, sources = args.workers, args.sources
    say = (lambda *a: print(*a, file=sys.stderr, flush=True)) if args.json else (lambda *a: print(*a, flush=True))

    compile_s = fast.warmup()  # first thing: the kernel's compile or cache-load, kept out of every rate
    names = args.groupings.split(",") if args.groupings else available()
    specs = names + [v for v in PKG_VARIANTS if "pkg" in names]
    rows: list[dict] = []

    def row(section: str, what: str, messages: int, seconds: float, floor: float, target: float | None = None,
            error: str | None = None) -> None:
        rate = messages / seconds if seconds > 0 else 0.0
        r = {"section": section, "what": what, "messages": messages, "seconds": seconds,
             "messages_per_second": rate, "ratio_to_floor": rate / floor if floor else 0.0}
        if target is not None:
            r["target"] = target
            r["meets_target"] = rate >= target
        if error:
            r["error"] = error
        rows.append(r)
        flag = "" if target is None else ("  ok" if rate >= target else f"  BELOW target {target:,.0f}")
        shown = f"error: {error}" if error else f"{rate:>14,.0f} msgs/s  {rate / floor:9.5f} x floor{flag}"
        say(f"{section:<12} {what:<50} {shown}")

    # The reference side: N messages, Python keys, the floors.
    spec = f"zipf:z={args.z},keys={args.keys},messages={args.messages},seed=1"
    dataset = open_dataset(spec)
    keys = [k for _, ks in dataset.records() for k in ks]
    nows = [i / args.rate for i in range(len(keys))]
    kg_assignment = fast.fast_route(dataset, "kg", workers)
    floor = floor_rate(kg_assignment, workers, args.repeat)
    say(f"dataset {spec}; W={workers}; kernel compile/cache-load {compile_s:.3f} s; load average "
        f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    row("floor", "np.bincount(KG assignment)", len(keys), len(keys) / floor, floor)
    row("floor", "python loop, one no-op call", len(keys), len(keys) / python_call_floor(keys, nows), floor)

    for s in specs:
        target = CHOOSE_TARGET if s in ("kg", "sg", "pkg") else None
        try:
            done, elapsed = choose_rate(s, workers, dataset, keys, nows, args.budget)
        except Exception as exc:  # another engineer's grouping may be half-written: report, keep measuring
            row("choose", s, 0, 0.0, floor, target, error=f"{type(exc).__name__}: {exc}")
            continue
        row("choose", s, done, elapsed, floor, target)

    if not args.skip_reference_simulate:
        for s in specs:
            try:
                started = time.perf_counter()
                simulate(dataset, s, workers, sources, rate=args.rate, messages_hint=len(keys), engine="reference")
                elapsed = time.perf_counter() - started
            except Exception as exc:
                row("simulate", f"{s} S={sources}", 0, 0.0, floor, error=f"{type(exc).__name__}: {exc}")
                continue
            row("simulate", f"{s} S={sources}", len(keys), elapsed, floor)

    # The fast path, on longer streams so fixed costs (naming keys) do not dominate: the Zipf stream (its
    # sampling, a searchsorted per message, bounds fast_simulate) and DKG's country-skew (cheap sampling).
    fast_datasets = {
        "zipf": f"zipf:z={args.z},keys={args.keys},messages={fast_messages},seed=1",
        "country": f"country-skew:ratio=0.3,messages={fast_messages},seed=1",
    }
    fast_floors = {}
    for label, fspec in fast_datasets.items():
        big = open_dataset(fspec)
        section = f"fast:{label}"
        big_floor = fast_floors[label] = floor_rate(fast.fast_route(big, "kg", workers), workers, args.repeat)
        say(f"fast path on {fspec}; S={sources}")
        row(section, "floor np.bincount(KG assignment)", fast_messages, fast_messages / big_floor, big_floor)

        def draw(big=big) -> None:
            rng = np.random.Generator(np.random.PCG64(1))
            done = 0
            while done < fast_messages:
                n = min(1 << 16, fast_messages - done)
                big.key_indices(rng, n, done)
                done += n

        row(section, "draw (the generator's own sampling)", fast_messages, best_of(args.repeat, draw), big_floor)
        for s in FAST_SPECS if label == "zipf" else []:
            fs = fast.fast_spec(s, workers, sources)
            state = fast.RouteState(fs, workers, sources, "shuffle", args.rate, max(1, fast_messages // 1000))
            started = time.perf_counter()
            chunks = list(state.chunks(big))
            if s == "kg":
                row(section, "encode (draw + key ids)", fast_messages, time.perf_counter() - started, big_floor)

            def kernel(state=state, chunks=chunks) -> None:
                fresh = state.fresh()
                for chunk in chunks:
                    fresh.run(chunk)

            row(section, f"kernel {s} S={sources}", fast_messages, best_of(args.repeat, kernel), big_floor,
                FAST_TARGET)
        for s in FAST_SPECS:
            elapsed = best_of(args.repeat, lambda s=s, big=big: fast.fast_simulate(
                big, s, workers, sources, rate=args.rate, messages_hint=fast_messages))
            row(section, f"fast_simulate {s} S={sources}", fast_messages, elapsed, big_floor, FAST_TARGET)

    if args.json:
        json.dump({
            "config": {"dataset": spec, "fast_datasets": fast_datasets, "workers": workers, "sources": sources,
                       "rate": args.rate, "repeat": args.repeat, "python": platform.python_version(),
                       "cpus": os.cpu_count(), "load_average": os.getloadavg()[0]},
            "compile_seconds": compile_s,
            "floor_messages_per_second": floor,
            "fast_floor_messages_per_second": fast_floors,
            "rows": rows,
        }, sys.stdout, indent=2)
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
