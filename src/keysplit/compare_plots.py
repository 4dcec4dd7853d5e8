"""The PNG plots of ``keysplit compare``: each figure is built by a function of its own (so a test can draw it
from a small comparison and check it stays readable), then written whole by :func:`keysplit.plots.save_figure`.

Every series has its own color and line style (``keysplit.plots.series_style``), every legend sits right of
its axes, off the data, and every axis names its unit.
"""

from __future__ import annotations

import os
from typing import Any

#: Metric -> (label, tolerance of the agreement target of benchmarks/agreement.py).
AGREEMENT = {"throughput": ("throughput, words/s", 0.15), "latency_p50_ms": ("p50 complete latency, ms", 0.25),
             "latency_p99_ms": ("p99 complete latency, ms", 0.25)}


def measured_predicted(row: dict, metric: str) -> tuple[float | None, float | None]:
    """(run, replay) of one metric of a comparison row."""
    if metric == "throughput":
        return row["throughput"]["run_words_per_second"], row["throughput"]["replay_estimate"]
    return row[metric]["run"], row[metric]["replay"]


def throughput_latency_figure(rows: list[dict]) -> Any:
    """Throughput and latency p50/p99, run next to replay, one group of bars per grouping."""
    import numpy as np

    from keysplit.plots import legend_outside, pyplot, series_style

    plt = pyplot()
    names = [r["grouping"] for r in rows]  # run ids are long; the loads panels' titles carry them
    x = np.arange(len(rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(max(10, 3 * len(rows)), 4.5))
    run_tp = [r["throughput"]["run_words_per_second"] or 0 for r in rows]
    est_tp = [r["throughput"]["replay_estimate"] or 0 for r in rows]
    ax1.bar(x - 0.2, run_tp, 0.4, label="topology run (measured)", color=series_style(0)["color"])
    ax1.bar(x + 0.2, est_tp, 0.4, label="replay (model's estimate)", color=series_style(1)["color"])
    for i, value in enumerate(est_tp):
        if not value:
            ax1.annotate("no estimate\n(cpu delay 0)", (i + 0.2, 0), ha="center", va="bottom", fontsize=7)
    ax1.set_xticks(x, names, fontsize=8)
    ax1.set_xlabel("grouping (spec)")
    ax1.set_ylabel("throughput (words/s)")
    ax1.set_title("throughput")
    legend_outside(ax1)
    for i, (q, quantile) in enumerate((("latency_p50_ms", "p50"), ("latency_p99_ms", "p99"))):
        ax2.bar(x - 0.3 + 0.2 * i, [r[q]["run"] or 0 for r in rows], 0.2, label=f"run {quantile}",
                color=series_style(2 + 2 * i)["color"])
        ax2.bar(x + 0.1 + 0.2 * i, [r[q]["replay"] or 0 for r in rows], 0.2, label=f"replay {quantile}",
                color=series_style(3 + 2 * i)["color"])
    ax2.set_xticks(x, names, fontsize=8)
    ax2.set_xlabel("grouping (spec)")
    ax2.set_ylabel("complete latency (ms)")
    ax2.set_ylim(bottom=0)  # linear from 0, so that a bar twice as tall is twice the latency
    ax2.set_title("latency")
    legend_outside(ax2)
    return fig


def agreement_figure(rows: list[dict]) -> Any:
    """Predicted (replay) against measured (run), one panel per metric, the diagonal and the target band around
    it, a point per run in its grouping's color and marker, named in the legend (labels written beside the points
    overlap where two groupings agree, as sg and pkg do)."""
    import numpy as np

    from keysplit.plots import legend_outside, pyplot, series_style

    plt = pyplot()
    styles = {name: series_style(i) for i, name in enumerate(dict.fromkeys(r["grouping"] for r in rows))}
    fig, axes = plt.subplots(1, len(AGREEMENT), figsize=(5.2 * len(AGREEMENT), 4.3))
    for ax, (metric, (label, tol)) in zip(axes, AGREEMENT.items()):
        pts = [(m, p, r["grouping"]) for r in rows for m, p in [measured_predicted(r, metric)] if m and p]
        top = max([max(m, p) for m, p, _ in pts], default=1.0) * 1.15
        line = np.array([0.0, top])
        ax.plot(line, line, color="black", linewidth=0.8, label="predicted = measured")
        ax.fill_between(line, line * (1 - tol), line * (1 + tol), color="grey", alpha=0.2, label="target band")
        ax.set_title(f"{label}: target ±{tol:.0%}", fontsize=9)
        for m, p, name in pts:
            ax.plot([m], [p], linestyle="none", marker=styles[name]["marker"], color=styles[name]["color"],
                    markersize=6, alpha=0.8, label=name)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_xlabel(f"measured (keysplit run): {label}", fontsize=8)
        ax.set_ylabel(f"predicted (keysplit replay): {label}", fontsize=8)
        legend_outside(ax)
    fig.suptitle("replay against run", fontsize=10)
    return fig


def loads_figure(rows: list[dict]) -> Any:
    """Messages per worker, run next to replay, one panel per run."""
    import numpy as np

    from keysplit.plots import legend_outside, pyplot, series_style

    plt = pyplot()
    # one y axis for every panel: KG's hot counter must look as hot next to PKG's as it is
    fig, axes = plt.subplots(1, len(rows), figsize=(max(7, 5 * len(rows)), 4), squeeze=False, sharey=True)
    for ax, r in zip(axes[0], rows):
        run_loads, est_loads = r["loads"]["run"] or [], r["loads"]["replay"] or []
        w = np.arange(max(len(run_loads), len(est_loads)))
        ax.bar(w[: len(run_loads)] - 0.2, run_loads, 0.4, label="run", color=series_style(0)["color"])
        ax.bar(w[: len(est_loads)] + 0.2, est_loads, 0.4, label="replay", color=series_style(1)["color"])
        ax.set_title(f"{r['grouping']} ({r['run_id']})", fontsize=9)
        ax.set_xlabel("worker (counter index)")
        ax.set_ylabel("load (messages)")
        legend_outside(ax)
    return fig


#: The share of a series each point of the imbalance figure stands for (its worst value): I(t) of a balanced
#: grouping rises and falls with every round of W messages, so a line through every checkpoint is a comb.
ENVELOPE = 0.01


def envelope(pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The largest value of each consecutive run of ``ENVELOPE`` of the points, at the run's last t."""
    size = max(1, round(len(pts) * ENVELOPE))
    return [(pts[min(i + size, len(pts)) - 1][0], max(f for _, f in pts[i:i + size])) for i in range(0, len(pts), size)]


def imbalance_figure(rows: list[dict], series: dict) -> Any:
    """The replay's I(t)/t over time per grouping (solid, its own style) and the run's final value (dotted,
    same color); ``series`` is ``timeseries.parquet`` as columns. The y axis is logarithmic, a checkpoint where
    I(t) = 0 (a perfect balance, frequent for sg) is left out, and each point is the worst of its stretch of the
    series (:func:`envelope`): sg's I(t)/t swings by 10x with every round of W messages, and a line through
    every checkpoint was a dense comb that hid its level."""
    from keysplit.plots import legend_outside, pyplot, series_style

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for index, r in enumerate(rows):
        pts = envelope([(t, f) for g, t, f in zip(series["grouping"], series["t"], series["imbalance_fraction"])
                        if g == r["grouping"] and f > 0])
        if pts:
            style = series_style(index)
            ax.plot([t for t, _ in pts], [f for _, f in pts], label=f"{r['grouping']} replay I(t)/t",
                    color=style["color"], linestyle="-")
            final = r["final_imbalance_fraction"]["run"]
            if final:
                ax.axhline(final, color=style["color"], linestyle=":", label=f"{r['grouping']} run, final")
    ax.set_xlabel("messages routed, t (count)")
    ax.set_ylabel(f"imbalance fraction I(t)/t\n(max − mean load, per message;\nworst of each {ENVELOPE:.0%} of t)")
    ax.set_yscale("log")
    ax.set_title("imbalance over time")
    legend_outside(ax)
    return fig


def plot(result: dict, replay_dir: str, out: str) -> list[str]:
    """The PNG plots into ``out``: throughput and latency by grouping, the agreement, loads per worker,
    imbalance over time; each written whole or not at all."""
    import pyarrow.parquet as pq

    from keysplit.plots import save_figure

    rows = result["rows"]
    series = pq.read_table(os.path.join(replay_dir, "timeseries.parquet")).to_pydict()
    figures = [("throughput_latency.png", throughput_latency_figure(rows)), ("agreement.png", agreement_figure(rows)),
               ("loads.png", loads_figure(rows)), ("imbalance.png", imbalance_figure(rows, series))]
    return [save_figure(fig, os.path.join(out, name)) for name, fig in figures]
