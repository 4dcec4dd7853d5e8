"""The demo's figures in the docs (docs/img/demo/): drawn again from their inputs, and checked against the commit.

    .venv/bin/python docs_hooks/demo_figures.py --from .keysplit/demo   # after `make demo`: take its data, redraw
    .venv/bin/python docs_hooks/demo_figures.py                         # redraw every figure from the committed data
    .venv/bin/python docs_hooks/demo_figures.py --check                 # exit 1 when a committed figure is stale

``simulate.png`` is ``keysplit simulate`` of the demo's corpus, which its generator spec fixes, so it is drawn
again from nothing but that spec; so is ``docs/img/pkg_imbalance.png``, by the command the PKG page quotes.
The compare figures show measured runs, which only ``make demo`` makes: their inputs are committed beside
them, ``comparison.json`` (what ``keysplit compare`` wrote) and ``timeseries.json`` (the replay's I(t)/t), and
the captions on the getting-started page are :func:`caption`'s sentences of that data.
``tests/cli/test_docs_figures.py`` runs the check and the captions' comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "img" / "demo"
COMPARE_FIGURES = ("throughput_latency.png", "agreement.png", "loads.png", "imbalance.png")


def draw_simulate(out: Path) -> None:
    """``simulate.png`` as the demo draws it: its corpus written under the relative path the demo uses (the
    figure's title names it), then ``keysplit simulate`` of every grouping at the demo's W and S."""
    from keysplit.cli import main
    from keysplit.commands.demo import DEMO_DATA
    from keysplit.groupings import available

    (out / "simulate.png").unlink(missing_ok=True)  # this script's own figure, drawn again
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)
        try:
            corpus = os.path.join(".keysplit", "demo", "zipf.txt")
            os.makedirs(os.path.dirname(corpus))
            with open(os.devnull, "w") as quiet:
                stdout, sys.stdout = sys.stdout, quiet
                try:
                    assert main(["datasets", "generate", DEMO_DATA, "--out", corpus, "--words-per-line", "10"]) == 0
                    assert main(["simulate", "--dataset", f"text:{corpus}", "-W", "8", "-S", "4", "-g",
                                 ",".join(available()), "--plot", str(out / "simulate.png")]) == 0
                finally:
                    sys.stdout = stdout
        finally:
            os.chdir(cwd)


#: The other figures of the docs drawn by one command from a generator spec: (file in docs/img, the command).
SIMULATED = {"pkg_imbalance.png": ["simulate", "--dataset", "zipf:z=1.0,keys=10000,messages=1000000,seed=1",
                                   "-W", "10,50", "-S", "5", "-g", "kg,pkg,pkg:d=4,sg"]}


def draw_simulated(out: Path) -> None:
    """Each :data:`SIMULATED` figure, drawn by its ``keysplit simulate`` (the command its page quotes)."""
    from keysplit.cli import main

    for name, argv in SIMULATED.items():
        (out / name).unlink(missing_ok=True)  # this script's own figure, drawn again
        with open(os.devnull, "w") as quiet:
            stdout, sys.stdout = sys.stdout, quiet
            try:
                assert main([*argv, "--plot", str(out / name)]) == 0
            finally:
                sys.stdout = stdout


def draw_compare(data: Path, out: Path) -> None:
    """The four compare figures from ``comparison.json`` and ``timeseries.json`` in ``data``."""
    from keysplit import compare_plots
    from keysplit.plots import save_figure

    rows = json.loads((data / "comparison.json").read_text(encoding="utf-8"))["rows"]
    series = json.loads((data / "timeseries.json").read_text(encoding="utf-8"))
    figures = {"throughput_latency.png": compare_plots.throughput_latency_figure(rows),
               "agreement.png": compare_plots.agreement_figure(rows), "loads.png": compare_plots.loads_figure(rows),
               "imbalance.png": compare_plots.imbalance_figure(rows, series)}
    for name, fig in figures.items():
        save_figure(fig, str(out / name))


def take(demo: Path) -> None:
    """Copy a demo's comparison and the replay's series (4 significant digits: the figure needs no more) here."""
    import pyarrow.parquet as pq

    # the demo's folder as a user's `make demo` names it, not this machine's absolute path
    text = (demo / "compare" / "comparison.json").read_text(encoding="utf-8")
    (FIGURES / "comparison.json").write_text(text.replace(str(demo.resolve()), ".keysplit/demo"), encoding="utf-8")
    table = pq.read_table(demo / "replay" / "timeseries.parquet", columns=["grouping", "t", "imbalance_fraction"])
    series = table.to_pydict()
    series["imbalance_fraction"] = [float(f"{v:.4g}") for v in series["imbalance_fraction"]]
    (FIGURES / "timeseries.json").write_text(json.dumps(series, separators=(",", ":")) + "\n", encoding="utf-8")


def caption(comparison: dict) -> str:
    """The sentence the getting-started page prints under the compare figures: each run's measured words/s and
    p99 next to the model's, from the data the figures are drawn from."""
    parts = []
    for row in comparison["rows"]:
        tp, p99 = row["throughput"], row["latency_p99_ms"]
        parts.append(f"{row['grouping']} {tp['run_words_per_second']:,.0f} words/s measured, "
                     f"{tp['replay_estimate']:,.0f} predicted (p99 {p99['run']:,.0f} ms, {p99['replay']:,.0f} ms)")
    return (f"The demo's runs, calibrated on kg and sg (profile `{comparison['calibration']}`): "
            + "; ".join(parts) + ".")


def stale(out: Path) -> list[str]:
    """The committed figures whose pixels differ from the ones just drawn into ``out``."""
    import numpy as np
    from matplotlib.image import imread

    differ = []
    for name in ("simulate.png", *COMPARE_FIGURES, *SIMULATED):
        committed = imread((FIGURES.parent if name in SIMULATED else FIGURES) / name)
        drawn = imread(out / name)
        if committed.shape != drawn.shape or float(np.abs(committed - drawn).max()) > 0.02:
            differ.append(name)
    return differ


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--from", dest="demo", metavar="DIR", help="take the compare data of this demo output first")
    p.add_argument("--check", action="store_true", help="draw into a temporary folder and compare; exit 1 if stale")
    args = p.parse_args(argv)
    if args.demo:
        take(Path(args.demo))
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            draw_simulate(Path(tmp))
            draw_simulated(Path(tmp))
            draw_compare(FIGURES, Path(tmp))
            differ = stale(Path(tmp))
        print(f"stale: {', '.join(differ)}; run python docs_hooks/demo_figures.py" if differ else "figures current")
        return 1 if differ else 0
    draw_simulate(FIGURES)
    draw_simulated(FIGURES.parent)
    draw_compare(FIGURES, FIGURES)
    print(caption(json.loads((FIGURES / "comparison.json").read_text(encoding="utf-8"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
