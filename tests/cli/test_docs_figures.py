"""The demo's figures in the docs are current: drawn again from their committed inputs, they are the committed
PNGs, and the getting-started page's numbers are those of the data the figures show."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs_hooks"))

import demo_figures  # noqa: E402  (docs_hooks is not a package)


def test_every_committed_demo_figure_is_what_its_command_draws(tmp_path):
    demo_figures.draw_simulate(tmp_path)
    demo_figures.draw_simulated(tmp_path)
    demo_figures.draw_compare(demo_figures.FIGURES, tmp_path)
    assert demo_figures.stale(tmp_path) == [], "run: python docs_hooks/demo_figures.py"


def test_the_pages_quote_the_commands_that_draw_their_figures():
    import shlex

    page = (ROOT / "docs" / "groupings" / "pkg.md").read_text(encoding="utf-8")
    for name, argv in demo_figures.SIMULATED.items():
        assert f"`keysplit {shlex.join(argv)} --plot docs/img/{name}`" in page


def test_a_changed_figure_is_caught(tmp_path):
    demo_figures.draw_compare(demo_figures.FIGURES, tmp_path)
    demo_figures.draw_simulate(tmp_path)
    demo_figures.draw_simulated(tmp_path)
    data = json.loads((demo_figures.FIGURES / "comparison.json").read_text(encoding="utf-8"))
    data["rows"][0]["throughput"]["replay_estimate"] *= 2
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "comparison.json").write_text(json.dumps(data), encoding="utf-8")
    (tmp_path / "data" / "timeseries.json").write_bytes((demo_figures.FIGURES / "timeseries.json").read_bytes())
    demo_figures.draw_compare(tmp_path / "data", tmp_path)
    assert "throughput_latency.png" in demo_figures.stale(tmp_path)


def test_the_captions_numbers_are_the_figures_data():
    comparison = json.loads((demo_figures.FIGURES / "comparison.json").read_text(encoding="utf-8"))
    page = " ".join((ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8").split())
    assert demo_figures.caption(comparison) in page
    assert comparison["calibration"] == "demo" and all(row["counts_equal"] for row in comparison["rows"])
