"""Every figure the product draws stays readable: each drawn for real on small inputs, then checked.

- No two series of a figure share both color and line style (differently labelled series, across all its
  panels: the same label in two panels is the same series), so twelve groupings never collapse into one blue.
- Every legend sits off the data: its box overlaps no axes' area.
- Every axis is labelled, with its unit or kind in parentheses.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from keysplit import compare_plots
from keysplit.advise import advise
from keysplit.commands.advise import advice_figure
from keysplit.commands.partition import partition_figure
from keysplit.datasets import open_dataset
from keysplit.groupings import available
from keysplit.partitioning.experiment import ExperimentConfig, run_experiment
from keysplit.plots import imbalance_figure, pyplot, series_style
from keysplit.simulator import simulate

ROOT = Path(__file__).resolve().parents[2]
UNIT = re.compile(r"\(.+\)")


def series_styles(fig) -> dict[str, set[tuple[str, str]]]:
    """label -> the (color, line style) pairs its legend entries have, over every legend of the figure."""
    styles: dict[str, set[tuple[str, str]]] = {}
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            if isinstance(handle, Line2D):
                style = (to_hex(handle.get_color()), str(handle.get_linestyle()))
            elif isinstance(handle, Patch):
                style = (to_hex(handle.get_facecolor()), str(handle.get_linestyle()))
            else:
                raise AssertionError(f"a legend entry of an unexpected kind: {handle!r}")
            styles.setdefault(text.get_text(), set()).add(style)
    return styles


def check_readable(fig) -> None:
    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    owner: dict[tuple[str, str], str] = {}
    for label, styles in series_styles(fig).items():
        for style in styles:
            assert owner.setdefault(style, label) == label, f"{label!r} and {owner[style]!r} share {style}"
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends, "a figure with series has a legend"
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent(renderer)), f"legend over the data of {ax.get_title()!r}"
    for ax in fig.axes:
        for label in (ax.get_xlabel(), ax.get_ylabel()):
            assert UNIT.search(label), f"axis label {label!r} of {ax.get_title()!r} names no unit"
    pyplot().close(fig)


def test_twelve_groupings_have_twelve_styles():
    styles = {(series_style(i)["color"], series_style(i)["linestyle"]) for i in range(20)}
    assert len(styles) == 20
    assert series_style(0)["color"] == series_style(10)["color"]  # kg and gedik share blue, so the style differs
    assert series_style(0)["linestyle"] != series_style(10)["linestyle"]


def test_the_simulate_plot_of_every_grouping_is_readable():
    dataset = open_dataset("zipf:z=1.1,keys=300,messages=3000,seed=42")
    runs = [simulate(dataset, spec, 8, 4, engine="reference") for spec in available()]
    assert len(runs) == 12
    check_readable(imbalance_figure(runs, "demo-like"))


def test_the_check_catches_a_shared_style_and_a_legend_on_the_data():
    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], color="tab:blue", label="kg")
    ax.plot([0, 1], [1, 0], color="tab:blue", label="gedik")
    ax.set(xlabel="t (messages)", ylabel="I (fraction)")
    ax.legend(loc="center")
    with pytest.raises(AssertionError, match="share"):
        check_readable(fig)
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="kg")
    ax.set(xlabel="t (messages)", ylabel="I (fraction)")
    ax.legend(loc="center")
    with pytest.raises(AssertionError, match="legend over the data"):
        check_readable(fig)


def test_the_advise_plot_is_readable():
    advice, _ = advise(open_dataset("zipf:z=1.2,keys=300,messages=4000,seed=4"), [4, 8], sources=2, sample=2000)
    check_readable(advice_figure(advice, "advise"))


def test_the_partition_plot_is_readable():
    result = run_experiment(ExperimentConfig(domain=2000, max_workers=3))
    check_readable(partition_figure(result))


def comparison_rows() -> list[dict]:
    """Three comparison rows shaped as ``keysplit.compare.compare_one`` makes them."""
    rows = []
    for i, grouping in enumerate(("kg", "sg", "pkg")):
        rows.append({
            "grouping": grouping, "run_id": f"demo-{grouping}",
            "throughput": {"run_words_per_second": 3000.0 + 500 * i, "replay_estimate": 3100.0 + 450 * i},
            "latency_p50_ms": {"run": 1800.0 - 100 * i, "replay": 1750.0 - 90 * i},
            "latency_p99_ms": {"run": 2100.0 - 100 * i, "replay": 2150.0 - 80 * i},
            "loads": {"run": [40 + i, 30, 20, 10], "replay": [40 + i, 30, 20, 10]},
            "final_imbalance_fraction": {"run": 0.1 / (i + 1), "replay": 0.1 / (i + 1)},
        })
    return rows


def test_the_compare_plots_are_readable():
    rows = comparison_rows()
    series = {"grouping": [], "t": [], "imbalance_fraction": []}
    for i, row in enumerate(rows):
        for t in range(100, 1100, 100):
            series["grouping"].append(row["grouping"])
            series["t"].append(t)
            series["imbalance_fraction"].append(0.1 / (i + 1) + 1.0 / t)
    for fig in (compare_plots.throughput_latency_figure(rows), compare_plots.agreement_figure(rows),
                compare_plots.loads_figure(rows), compare_plots.imbalance_figure(rows, series)):
        check_readable(fig)


def test_the_topology_effect_plot_is_readable():
    spec = importlib.util.spec_from_file_location("topology_effect", ROOT / "benchmarks" / "topology_effect.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    rows = [{"grouping": g, "cpu_delay_ms": d, "words_per_second": 4000 / d / (2 if g == "kg" else 1),
             "latency_ms": {"mean": 2000.0 * d}} for g in ("kg", "sg", "pkg") for d in (1, 2, 4)]
    check_readable(module.effect_figure(rows, "effect"))


def test_the_simulate_plot_gives_a_grouping_one_color_and_a_w_one_line_style():
    dataset = open_dataset("zipf:z=1.1,keys=300,messages=3000,seed=42")
    specs = ["kg", "sg", "pkg", "pkg:d=4"]
    runs = [simulate(dataset, spec, w, 4, engine="reference") for w in (10, 50) for spec in specs]
    fig = imbalance_figure(runs)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    for spec in specs:
        assert to_hex(lines[f"{spec} (W=10)"].get_color()) == to_hex(lines[f"{spec} (W=50)"].get_color())
    assert len({to_hex(lines[f"{spec} (W=10)"].get_color()) for spec in specs}) == len(specs)
    for w in (10, 50):
        assert len({lines[f"{spec} (W={w})"].get_linestyle() for spec in specs}) == 1
    assert lines["kg (W=10)"].get_linestyle() != lines["kg (W=50)"].get_linestyle()
    check_readable(fig)


def test_the_compare_plots_tell_the_truth_about_scale():
    rows = comparison_rows()
    fig = compare_plots.throughput_latency_figure(rows)
    latency = fig.axes[1]
    assert latency.get_yscale() == "linear" and latency.get_ylim()[0] == 0  # bar heights in proportion
    pyplot().close(fig)
    fig = compare_plots.loads_figure(rows)
    first, *others = fig.axes
    assert all(first.get_shared_y_axes().joined(first, ax) for ax in others)
    pyplot().close(fig)
    fig = compare_plots.agreement_figure(rows)
    for ax in fig.axes:  # no label written on the data, where two groupings that agree would overlap
        assert len(ax.texts) == 0
        assert {"kg", "sg", "pkg"} <= {t.get_text() for t in ax.get_legend().get_texts()}
    pyplot().close(fig)


@pytest.mark.parametrize("name", ["imbalance.png", "imbalance.svg", "imbalance.pdf"])
def test_a_plot_replaces_only_a_figure_keysplit_drew(tmp_path, name):
    from keysplit.errors import SpecError
    from keysplit.plots import refuse_foreign_plot, save_figure

    path = tmp_path / name
    fig, ax = pyplot().subplots()
    ax.plot([0, 1], [0, 1])
    save_figure(fig, str(path))
    refuse_foreign_plot(str(path))  # keysplit's own figure: drawn again in place
    users = tmp_path / f"users-{name}"
    users.write_bytes(path.read_bytes().replace(b"keysplit plot", b"someone else"))
    with pytest.raises(SpecError, match="exists and keysplit did not draw it"):
        refuse_foreign_plot(str(users))
