"""A calibration profile: the topology model's unknown costs fitted to runs already measured and stored in Redis,
wherever they ran (``keysplit run``, or a cluster run summarised by ``keysplit run wordcount --collect``).

Three numbers are fitted (:data:`FITTED`), few enough that two or three runs determine them:

- ``tuple_us``: the serial cost of one tuple between components -- on Storm ShellBolt's JSON both ways on the
  worker's threads, in ``keysplit run`` the runner's protocol (:mod:`~keysplit.topology_model.storm_terms`); the
  kernel's ``overhead_us`` (a tuple to a counter) and ``tuple_us`` (a tuple a tick emits or acks);
- ``counter_tuple_us``: what a counter spends per input tuple beyond the CPU delay (reading and parsing it, the
  sleep's overshoot when the cores are shared); the kernel's ``counter_overhead_us``;
- ``return_ms``: from the aggregators' ack to the spout's completion of the line (the top-k bolt, the acker's two
  hops, the hops between worker JVMs), net of executor batching; the kernel's ``ack_delay_ms``.

Three more are read from what the runs measured, never fitted: ``commit_us`` (the aggregators' own time per
partial count, a run's ``aggregator_us``), the first hop (``first_hop_ms``: first emit to the first word at a
counter, net of executor batching) and the tick phase (``tick_phase_s``); each the mean over the runs. Runs of a
toolkit topology add ``merge_entry_us``, a merge task's time per partial-state entry, from the merge tasks' own work
counters (:func:`merge_entry_us`): a cost the groupings differ in (one that splits a key sends the merge its state
from every partial task that holds it), which two runs' end-to-end timings could not tell from their noise. The
configured terms (executor batching and flushing, ackers, worker processes: :class:`ClusterTerms`) are added
for each run from its own configuration.

The fit minimises the squared log errors of each run's words/s, p50 and p99 (each over its target: 15% and 25%;
errors within :data:`NOISE` count as none)
by a grid search one parameter at a time (the model's latency moves in steps of a tick, so it has no gradient),
each model run taking milliseconds.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from keysplit.errors import KeysplitError
from keysplit.topology_model.driver import run_model
from keysplit.topology_model.params import COST_LIMITS, TopologyParams, params_of_run
from keysplit.topology_model.storm_terms import ClusterTerms

#: The fitted parameters and the range searched for each.
FITTED: dict[str, tuple[float, float]] = {"tuple_us": (0.0, 20_000.0), "counter_tuple_us": (0.0, 50_000.0),
                                          "return_ms": (0.0, 2_000.0)}
#: The fitted parameters of a toolkit topology's runs (``shape`` toolkit, docs/design/topology-model.md), whose stages
#: have no CPU delay: ``tuple_us`` is a row's time in the stages (router, partial, merge, the runner's protocol: every
#: process on the cores they share), ``spout_us`` the feed spout's own time per row (it emits ahead of the stages,
#: within its window, so rows queue), ``return_ms`` as above.
FITTED_TOOLKIT: dict[str, tuple[float, float]] = {"tuple_us": (0.0, 20_000.0), "spout_us": (0.0, 20_000.0),
                                                  "return_ms": (0.0, 2_000.0)}


def fitted_ranges(shape: str) -> dict[str, tuple[float, float]]:
    """The fitted parameters of runs of ``shape`` (:data:`FITTED`, :data:`FITTED_TOOLKIT`) and their ranges."""
    return FITTED_TOOLKIT if shape == "toolkit" else FITTED


#: Targets of agreement (relative): words/s, p50, p99.
TARGETS = {"words_per_second": 0.15, "p50_ms": 0.25, "p99_ms": 0.25}
#: Relative differences the fit ignores: a repeated run differs by this much, so a cost that only moves the model
#: within it is not seen by the runs, and the search (from 0 upwards, keeping only strict improvements, then each
#: cost down to the smallest that fits as well) leaves it at its smallest value instead of inventing one (kg at 1 ms
#: alone once "fitted" a counter cost of 6.7 ms a tuple to move its p50 from 0.98 to 0.99 of the run's, which then
#: cost dkg at 2 ms a tick: p99 1.32; a search that climbed to the top of a range before another cost brought the
#: loss to 0 stayed there: 50 ms a tuple, pkg's p50 1.24 where the runs fitted 1.00).
NOISE = 0.03
#: What a set of runs must hold to be fitted (the one line a refusal says).
NEEDS = ("needs two finished runs or more that differ in grouping, CPU delay or rate, one of them closed loop with "
         "a CPU delay that saturates a counter (e.g. `keysplit run wordcount -g kg --cpu-delay 1` and `-g sg "
         "--cpu-delay 1`)")
#: The run summary fields a profile keeps for each of its runs.
RUN_FIELDS = ("run_id", "grouping", "dataset", "workers", "sources", "aggregators", "spouts", "cpu_delay_ms",
              "max_pending", "flush_secs", "rate", "batch", "batch_ms", "worker_processes", "words_per_second",
              "tick_phase_s", "aggregator_us", "first_hop_ms", "shape", "topology", "merge_entries", "merge_busy_s")


def check_fittable(runs: list[dict]) -> None:
    """A one-line KeysplitError when ``runs`` (summaries) cannot determine the fitted parameters."""
    if len(runs) < 2:
        needs = NEEDS_TOOLKIT if runs and runs[0].get("shape") == "toolkit" else NEEDS
        raise KeysplitError(f"calibrate {needs}; got {len(runs)} run")
    for run in runs:
        if int(run.get("replayed") or 0):
            raise KeysplitError(f"run {run.get('run_id')} replayed {run['replayed']} tuples (message timeouts), "
                                "which the model does not follow; calibrate from runs that completed without replays")
        problem = ClusterTerms.of_run(run).problem()
        if problem:
            raise KeysplitError(f"run {run.get('run_id')} {problem}")
    shapes = {r.get("shape") or "wordcount" for r in runs}
    if len(shapes) > 1:
        raise KeysplitError("calibrate needs runs of one topology shape (the model's mechanics differ): got word-count "
                            "runs and topology-file runs")
    kinds = {ClusterTerms.of_run(r).key() for r in runs}
    if len(kinds) > 1:
        raise KeysplitError("calibrate needs runs of one runtime with one number of worker processes (the costs it "
                            f"fits depend on both); got {', '.join(f'{k[0]} with {k[1]}' for k in sorted(kinds))}")
    if shapes == {"toolkit"}:  # no CPU delay: a row's cost at each stage is what the fit finds
        check_fittable_toolkit(runs)
        return
    cells = {(r.get("grouping"), float(r.get("cpu_delay_ms") or 0), r.get("rate") or None) for r in runs}
    if not any(float(r.get("cpu_delay_ms") or 0) > 0 and not r.get("rate") for r in runs) or len(cells) < 2:
        shown = ", ".join(f"{r.get('run_id')} ({r.get('grouping')}, {float(r.get('cpu_delay_ms') or 0):g} ms, "
                          + (f"rate {r['rate']:g})" if r.get("rate") else "closed loop)") for r in runs)
        raise KeysplitError(f"calibrate {NEEDS}; got {shown}")


#: What a set of topology-file runs must hold to be fitted.
NEEDS_TOOLKIT = ("needs two finished runs or more of a topology file that differ in grouping, parallelism or dataset "
                 "(e.g. `KEYSPLIT_GROUPING=kg keysplit run topologies/pageviews.py ...` and the same with pkg)")


def check_fittable_toolkit(runs: list[dict]) -> None:
    """Topology-file runs have no CPU delay: the fit reads the rows' cost from their throughput and the return from
    their latency, so two runs of different cells (grouping, parallelism, dataset) determine it."""
    cells = {(r.get("topology"), r.get("grouping"), r.get("dataset"), r.get("workers"), r.get("sources"),
              r.get("aggregators")) for r in runs}
    if len(cells) < 2:
        shown = ", ".join(f"{r.get('run_id')} ({r.get('grouping')})" for r in runs)
        raise KeysplitError(f"calibrate {NEEDS_TOOLKIT}; got {shown}")


def measured(runs: list[dict]) -> dict:
    """What the runs measured that the model uses as is: means over the runs (missing ones skipped)."""
    def mean(field: str, default: float, minus=lambda r: 0.0) -> float:
        values = [float(r[field]) - minus(r) for r in runs if r.get(field) is not None]
        return max(0.0, float(np.mean(values))) if values else default

    seen = {"commit_us": mean("aggregator_us", 0.0),
            "hop_ms": mean("first_hop_ms", 0.0, lambda r: ClusterTerms.of_run(r).forward_ms()),
            "tick_phase_s": float(np.mean([float(r.get("tick_phase_s") or 0.0) for r in runs]))}
    if any(r.get("shape") == "toolkit" for r in runs):
        seen["merge_entry_us"] = merge_entry_us(runs)
    return seen


def merge_entry_us(runs: list[dict]) -> float:
    """A merge task's time per partial-state entry, from the merges' own counters (``merge_busy_s`` over
    ``merge_entries``, summed over the runs that counted): the CPU the merges spent over the entries they received.
    It charges their work per row and per commit to the entries too -- the runs of one topology cannot tell those
    apart (their rows per merge task are the same under every grouping, and a fit of busy time on entries and rows
    over two runs followed the noise of a ~0.1 s CPU count, not the entries) -- so it is an upper bound. 0 when no
    run counted (a run stored before merges counted their work)."""
    counted = [r for r in runs if r.get("merge_entries") and r.get("merge_busy_s") is not None]
    entries = sum(int(r["merge_entries"]) for r in counted)
    if not entries:
        return 0.0
    # a damaged count is bounded as a profile's costs are (params.COST_LIMITS), never simulated for ever
    return max(0.0, min(COST_LIMITS["merge_entry_us"], 1e6 * sum(float(r["merge_busy_s"]) for r in counted) / entries))


def kernel_overheads(fitted: dict, seen: dict, terms: ClusterTerms) -> dict:
    """The kernel's overheads (``TopologyParams`` fields) for a run with ``terms``; a toolkit profile's (it fitted
    ``spout_us``) puts a row's whole cost in the serial stage and none in the ticks' tuples, which that cost holds."""
    if "spout_us" in fitted:
        return {"overhead_us": fitted["tuple_us"], "tuple_us": 0.0, "word_us": 0.0, "counter_overhead_us": 0.0,
                "spout_us": fitted["spout_us"], "commit_us": seen["commit_us"],
                "merge_entry_us": seen.get("merge_entry_us", 0.0),
                "hop_delay_ms": seen["hop_ms"] + terms.forward_ms(),
                "ack_delay_ms": fitted["return_ms"] + terms.return_ms(), "tick_phase_s": seen["tick_phase_s"]}
    return {"overhead_us": fitted["tuple_us"], "tuple_us": fitted["tuple_us"], "word_us": 0.0,
            "counter_overhead_us": fitted["counter_tuple_us"], "commit_us": seen["commit_us"],
            "hop_delay_ms": seen["hop_ms"] + terms.forward_ms(),
            "ack_delay_ms": fitted["return_ms"] + terms.return_ms(), "tick_phase_s": seen["tick_phase_s"]}


def params_for(run: dict, profile: dict) -> TopologyParams:
    """The model's parameters for ``run`` (a summary, or a replay's knobs in its names) under ``profile``."""
    return params_of_run(run, **kernel_overheads(profile["fitted"], profile["measured"], ClusterTerms.of_run(run)))


def predict(params: TopologyParams, arrays: tuple) -> dict:
    """The model's words/s, p50 and p99 for a routed stream (:func:`~keysplit.topology_model.route_dataset`)."""
    s = run_model(params, *arrays).summary()
    return {"words_per_second": s["throughput_estimate"], "p50_ms": s["latency_p50_ms"], "p99_ms": s["latency_p99_ms"]}


def observed(run: dict) -> dict:
    lat = run.get("latency_ms") or {}
    return {"words_per_second": float(run["words_per_second"]), "p50_ms": float(lat.get("p50") or 0.0),
            "p99_ms": float(lat.get("p99") or 0.0)}


def ratios(pred: dict, meas: dict) -> dict:
    """Predicted over measured, per target; None where the run measured 0 (no ratio: JSON has no infinity)."""
    return {k: (pred[k] / meas[k] if meas[k] else None) for k in TARGETS}


def within(r: dict) -> bool:
    return all(r[k] is not None and abs(r[k] - 1.0) <= tol for k, tol in TARGETS.items())


def _loss(fitted: dict, cases: list[tuple[TopologyParams, tuple, dict]]) -> float:
    """Sum over the runs of the squared log errors, each over its target."""
    total = 0.0
    for params, arrays, meas in cases:
        if "spout_us" in fitted:  # a toolkit topology (kernel_overheads)
            trial = replace(params, overhead_us=fitted["tuple_us"], spout_us=fitted["spout_us"],
                            ack_delay_ms=params.ack_delay_ms + fitted["return_ms"])
        else:
            trial = replace(params, overhead_us=fitted["tuple_us"], tuple_us=fitted["tuple_us"],
                            counter_overhead_us=fitted["counter_tuple_us"],
                            ack_delay_ms=params.ack_delay_ms + fitted["return_ms"])
        pred = predict(trial, arrays)
        for k, tol in TARGETS.items():
            if meas[k] > 0:
                miss = max(0.0, abs(math.log(max(pred[k], 1e-9) / meas[k])) - NOISE)
                total += (miss / tol) ** 2
    return total


def _grid(lo: float, hi: float, around: float | None) -> list[float]:
    """Candidates: 0 and a geometric grid over the range, or, around a value, a finer one within a factor 2."""
    if around is None:
        return [0.0, *np.geomspace(max(hi / 1e4, 1e-3), hi, 33).tolist()]
    if around <= 0:
        return [0.0, *np.geomspace(max(hi / 1e4, 1e-3) / 4, max(hi / 1e4, 1e-3) * 4, 9).tolist()]
    return [around * f for f in np.geomspace(0.5, 2.0, 17)] + [0.0]


def toolkit_start(runs: list[dict]) -> dict | None:
    """Where the search of a toolkit profile starts (the search goes one cost at a time, and from all zeros it can
    settle where the spout, not the stages, holds the rows back): the stages' time per row from the runs' rows/s,
    and the spout's from how the latency spreads, as a queue that grows steadily: the p99's row waited about twice
    the p50's, p99 - p50 = n / 2 x (stages - spout) for n rows."""
    rates = [float(r["words_per_second"]) for r in runs if r.get("words_per_second")]
    if not rates:
        return None
    stages = 1e6 / float(np.median(rates))
    lead = []
    for r in runs:
        lat, n = r.get("latency_ms") or {}, float(r.get("messages") or 0)
        if n and lat.get("p99") and lat.get("p50"):
            lead.append(2000.0 * (float(lat["p99"]) - float(lat["p50"])) / n)
    spout = max(0.0, stages - float(np.median(lead))) if lead else stages
    return {"tuple_us": stages, "spout_us": spout, "return_ms": 0.0}


def fit(runs: list[dict], arrays: list[tuple]) -> dict:
    """The profile's fitted and measured values from ``runs`` (summaries) and their routed streams."""
    check_fittable(runs)
    seen = measured(runs)
    # each run's parameters with the measured values and its configured terms; the fitted ones vary in _loss
    ranges = fitted_ranges(runs[0].get("shape") or "wordcount")  # one shape (check_fittable)
    zero = {name: 0.0 for name in ranges}
    cases = [(params_for(r, {"fitted": zero, "measured": seen}), a, observed(r)) for r, a in zip(runs, arrays)]
    best = dict(zero)
    best_loss = _loss(best, cases)
    start = toolkit_start(runs) if "spout_us" in ranges else None
    if start is not None and _loss(start, cases) < best_loss:
        best, best_loss = start, _loss(start, cases)
    for rnd in range(4):  # coarse cycles, then fine ones around the best
        for name, (lo, hi) in ranges.items():
            for value in _grid(lo, hi, None if rnd < 2 else best[name]):
                trial = best | {name: min(hi, max(lo, value))}
                loss = _loss(trial, cases)
                if loss < best_loss - 1e-12:
                    best, best_loss = trial, loss
    for name, (lo, hi) in ranges.items():  # each cost down to the smallest the runs cannot tell from the best
        for value in sorted(v for v in _grid(lo, hi, None) + _grid(lo, hi, best[name]) if v < best[name]):
            trial = best | {name: max(lo, float(value))}
            loss = _loss(trial, cases)
            if loss <= best_loss + 1e-12:
                best, best_loss = trial, loss
                break
    return {"fitted": best, "measured": seen, "loss": best_loss}


def reproduction(runs: list[dict], arrays: list[tuple], profile: dict) -> list[dict]:
    """How well the profile reproduces each run: measured, predicted, their ratios and whether within target."""
    rows = []
    for run, arr in zip(runs, arrays):
        pred, meas = predict(params_for(run, profile), arr), observed(run)
        r = ratios(pred, meas)
        rows.append({"run_id": run.get("run_id"), "measured": meas, "predicted": pred, "ratio": r,
                     "within": within(r)})
    return rows


def describe(profile: dict) -> str:
    """The profile's values in one phrase (what ``keysplit calibrate`` and the agreement benchmark print)."""
    f, m = profile["fitted"], profile["measured"]
    if "spout_us" in f:
        return (f"a row {f['tuple_us']:.0f} us in the stages, {f['spout_us']:.0f} us in the spout, return "
                f"{f['return_ms']:.1f} ms (fitted); a merge {m.get('merge_entry_us', 0.0):.0f} us a partial-state "
                f"entry, tick phase {m['tick_phase_s']:.3f} s (measured)")
    return (f"tuple {f['tuple_us']:.0f} us, counter {f['counter_tuple_us']:.0f} us a tuple beyond the delay, return "
            f"{f['return_ms']:.1f} ms (fitted); first hop {m['hop_ms']:.1f} ms, commit {m['commit_us']:.0f} us a "
            f"partial count, tick phase {m['tick_phase_s']:.3f} s (measured)")


def run_record(run: dict) -> dict:
    """What a profile keeps of one of its runs: its id, its knobs, what it measured, its runtime's terms."""
    return {k: run.get(k) for k in RUN_FIELDS} | {"terms": ClusterTerms.of_run(run).as_dict()}


def dataset_here(spec: str) -> str:
    """``spec`` as this folder reads it: a file path that is relative, not found from here but found from the
    project's root (the folder of its ``.keysplit/``, where ``make demo`` and most runs start) is read from there,
    so ``calibrate`` works from a subfolder as ``keysplit runs`` does. Anything else is left as it is."""
    import os

    from keysplit.datasets.readers import READERS
    from keysplit.home import keysplit_home

    kind, sep, rest = spec.partition(":")
    path, comma, options = rest.partition(",")
    if not sep or kind.strip().lower() not in READERS or not path.strip():
        return spec
    path = path.strip()
    if os.path.isabs(os.path.expanduser(path)) or os.path.exists(os.path.expanduser(path)):
        return spec
    candidate = keysplit_home().parent / path
    return f"{kind}:{candidate}{comma}{options}" if candidate.exists() else spec


def arrays_of_run(run: dict) -> tuple:
    """The model's input for a stored run: its dataset routed as its routers route it (FISH with the capacities
    the topology's router gives it, 1000 / D per counter); a one-line KeysplitError when the dataset cannot be
    read here."""
    from keysplit.topology_model.driver import route_dataset

    delay = float(run.get("cpu_delay_ms") or 0)
    workers = int(run["workers"])
    caps = [1000.0 / delay] * workers if delay > 0 and str(run["grouping"]).startswith("fish") else None
    spec = run.get("dataset")
    if not spec:
        raise KeysplitError(f"run {run.get('run_id')} does not record its dataset; it cannot calibrate the model")
    spec = dataset_here(spec)
    try:
        return route_dataset(spec, run["grouping"], workers, int(run.get("sources") or 1),
                             int(run.get("aggregators") or 2), rate=run.get("rate") or None, capacities=caps,
                             split=run.get("split") or "shuffle", shape=run.get("shape") or "wordcount")
    except KeysplitError as exc:
        raise KeysplitError(f"run {run.get('run_id')}: its dataset {spec} cannot be read here ({exc}); calibrate "
                            "where the file is, at the same path") from None
