"""A toolkit topology's merge pays for each partial-state entry it receives: a grouping that splits a key sends the
merge that key's state from every partial task holding it, so on a skewed stream shuffle grouping costs the merges
more than key grouping, and calibrate reads that cost from the merge tasks' own counters (pure computation, no
processes)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from keysplit.topology_model import TopologyParams, line_starts, run_model

ROWS, KEYS, PARTIALS, MERGES = 8000, 400, 4, 2


def rows(grouping: str, seed: int = 7) -> tuple:
    """One key a row (a toolkit row is a line of one word), Zipf-skewed; ``kg`` puts a key on one partial task,
    ``sg`` deals the rows round-robin (every hot key on every partial), ``pkg`` on the less loaded of two."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, KEYS + 1) ** 1.1
    keys = rng.choice(KEYS, size=ROWS, p=weights / weights.sum()).astype(np.int64)
    if grouping == "kg":
        workers = keys % PARTIALS
    elif grouping == "sg":
        workers = np.arange(ROWS) % PARTIALS
    else:
        loads, workers = np.zeros(PARTIALS), np.empty(ROWS, dtype=np.int64)
        for i, k in enumerate(keys):
            a, b = k % PARTIALS, (k * 7 + 3) % PARTIALS
            workers[i] = a if loads[a] <= loads[b] else b
            loads[workers[i]] += 1
    return line_starts(np.ones(ROWS, dtype=np.int64)), workers, keys, keys % MERGES


#: Costs of a CPU-bound toolkit run (the shape a calibration of `keysplit run FILE` gives): the stages' time per row in
#: the serial stage, the spout's, a return after the merge's commit, a window wide enough not to bind.
TOOLKIT = TopologyParams(workers=PARTIALS, aggregators=MERGES, shape="toolkit", cpu_delay_ms=0.0, overhead_us=300.0,
                         spout_us=200.0, ack_delay_ms=20.0, max_pending=20_000, flush_secs=1.0)


def test_without_an_entry_cost_the_merges_cost_nothing_and_kg_and_sg_run_alike():
    kg, sg = run_model(TOOLKIT, *rows("kg")), run_model(TOOLKIT, *rows("sg"))
    assert not kg.aggregator_busy.any() and not sg.aggregator_busy.any()
    assert sg.words_per_second == pytest.approx(kg.words_per_second, rel=0.01)
    # ... though sg sends the merges more entries: a hot key's state from every partial task
    assert sg.aggregator_entries.sum() > 1.3 * kg.aggregator_entries.sum()


def test_an_entry_cost_makes_the_merges_busier_and_sg_slower_than_kg():
    # 5 ms an entry: each of sg's merges gets ~1,000 entries, 5 s of work in a run whose rows take 4 s, while kg's
    # ~450 fit between its commits (a merge is a process of its own: its time delays its commits, not the rows'
    # stages; and the run's throughput moves in steps, as rows complete at the merges' commits, once a period)
    costly = replace(TOOLKIT, merge_entry_us=5000.0)
    free = {g: run_model(TOOLKIT, *rows(g)) for g in ("kg", "sg")}
    paid = {g: run_model(costly, *rows(g)) for g in ("kg", "sg")}
    for g in ("kg", "sg"):  # the merges' time is the entry cost for each entry they received
        assert paid[g].aggregator_busy == pytest.approx(5e-3 * paid[g].aggregator_entries)
    assert paid["sg"].percentile(50) > free["sg"].percentile(50)
    assert paid["sg"].aggregator_busy.sum() > 1.3 * paid["kg"].aggregator_busy.sum()
    assert paid["sg"].words_per_second < 0.9 * paid["kg"].words_per_second
    assert paid["sg"].percentile(99) > paid["kg"].percentile(99)


def test_the_word_counts_model_ignores_the_merge_entry_cost():
    starts, workers, keys, aggs = rows("sg")
    p = TopologyParams(workers=PARTIALS, aggregators=MERGES, cpu_delay_ms=0.2, batch=10)
    plain, priced = run_model(p, starts, workers, keys, aggs), run_model(replace(p, merge_entry_us=400.0), starts,
                                                                        workers, keys, aggs)
    assert plain.summary() == priced.summary()
    assert not priced.aggregator_entries.any()


def made_run(grouping: str, truth: TopologyParams) -> tuple[dict, tuple]:
    """A toolkit run the model makes with known costs, with the merge tasks' counters as view_of reads them."""
    arrays = rows(grouping)
    result = run_model(truth, *arrays)
    s = result.summary()
    run = {"run_id": grouping, "shape": "toolkit", "topology": "t.py", "grouping": grouping, "dataset": "x",
           "workers": PARTIALS, "sources": 1, "aggregators": MERGES, "spouts": 1, "cpu_delay_ms": 0.0,
           "max_pending": truth.max_pending, "flush_secs": 1.0, "batch": 1, "batch_ms": 20.0,
           "messages": ROWS, "lines": ROWS, "words_per_second": s["throughput_estimate"], "replayed": 0,
           "latency_ms": {"p50": s["latency_p50_ms"], "p99": s["latency_p99_ms"]}, "tick_phase_s": 0.0,
           "worker_processes": 2, "merge_entries": int(result.aggregator_entries.sum()),
           "merge_records": ROWS, "merge_busy_s": float(result.aggregator_busy.sum())}
    return run, arrays


def test_calibrate_reads_the_entry_cost_from_the_merges_counters():
    from keysplit.topology_model.profile import kernel_overheads, measured, merge_entry_us
    from keysplit.topology_model.storm_terms import ClusterTerms

    runs = [{"shape": "toolkit", "merge_entries": 6000, "merge_busy_s": 0.24},
            {"shape": "toolkit", "merge_entries": 10_000, "merge_busy_s": 0.40},
            {"shape": "toolkit", "merge_entries": None, "merge_busy_s": None}]  # stored before merges counted
    assert merge_entry_us(runs) == pytest.approx(40.0)
    assert merge_entry_us(runs[2:]) == 0.0
    seen = measured(runs)
    assert seen["merge_entry_us"] == pytest.approx(40.0)
    fitted = {"tuple_us": 300.0, "spout_us": 200.0, "return_ms": 1.0}
    assert kernel_overheads(fitted, seen, ClusterTerms.of_run(runs[0]))["merge_entry_us"] == pytest.approx(40.0)
    assert "merge_entry_us" not in measured([{"grouping": "kg"}])  # the word count's profile is as it was


def test_calibrate_recovers_the_entry_cost_and_predicts_sg_from_kg_and_pkg():
    """Runs the model made with a merge cost of 5 ms an entry (sg's merges cannot keep up, kg's can): the profile
    measures it from the counters, and with it predicts the sg run it did not see; the same fit with the cost left
    out (the profile before merges had one) misses sg's throughput by more."""
    from keysplit.topology_model.profile import fit, observed, params_for, predict, ratios

    truth = replace(TOOLKIT, merge_entry_us=5000.0)
    (kg, kga), (pkg, pkga), (sg, sga) = made_run("kg", truth), made_run("pkg", truth), made_run("sg", truth)
    result = fit([kg, pkg], [kga, pkga])
    assert result["measured"]["merge_entry_us"] == pytest.approx(5000.0)
    profile = {"fitted": result["fitted"], "measured": result["measured"]}
    held_out = ratios(predict(params_for(sg, profile), sga), observed(sg))
    assert all(abs(v - 1) <= 0.05 for v in held_out.values()), held_out
    blind = [{**r, "merge_entries": None, "merge_busy_s": None} for r in (kg, pkg)]
    before = fit(blind, [kga, pkga])
    assert before["measured"]["merge_entry_us"] == 0.0
    missed = ratios(predict(params_for({**sg, "merge_entries": None}, {"fitted": before["fitted"],
                                                                       "measured": before["measured"]}), sga),
                    observed(sg))
    assert missed["words_per_second"] > held_out["words_per_second"] + 0.1, (missed, held_out)
