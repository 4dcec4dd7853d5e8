"""The demo's figures in the docs (docs/img/demo/): drawn again from their inputs, and checked against the commit.

    .venv/bin/python docs_hooks/demo_figures.py --from .keysplit/demo   # after `make demo`: take its data, redraw
    .venv/bin/python docs_hooks/demo_figures.py                         # redraw every figure from the committed data
    .venv/bin/python docs_hooks/demo_figures.py --check                 # exit 1 when a figure or number is stale

``simulate.png`` is ``keysplit simulate`` of the demo's corpus, which its generator spec fixes, so it is drawn
again from nothing but that spec; so is ``docs/img/pkg_imbalance.png``, by the command the PKG page quotes.
The compare figures show measured runs, which only ``make demo`` makes: their inputs are committed beside
them, ``comparison.json`` (what ``keysplit compare`` wrote), ``timeseries.json`` (the replay's I(t)/t) and
``calibration.json`` (the profile ``demo`` that ``keysplit calibrate`` fitted to the kg and sg runs), and the
captions on the getting-started page are :func:`caption`'s sentences of that data.

The measured numbers cannot be measured again in a test, but what the code would make of them can:
:func:`model_estimates` runs the topology model (deterministic, no Spark, a second or two) on the demo's corpus
with the committed profile, which is what ``keysplit replay ... --calibration demo`` estimates. :func:`stale_numbers`
then says where the committed replay estimates are no longer what the model gives (the code moved: the model's
flush clock, its routing, the profile's use) and where a measured number is further from the model than a run's
noise (the calibration's targets: words/s 15%, latency 25%), i.e. where a ``make demo`` today would print other
numbers. ``tests/cli/test_docs_figures.py`` runs both checks and the captions' comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "docs" / "img" / "demo"
COMPARE_FIGURES = ("throughput_latency.png", "agreement.png", "loads.png", "imbalance.png")
#: The demo's calibration profile, committed beside the comparison it made.
PROFILE = FIGURES / "calibration.json"
#: The demo's corpus as ``keysplit demo`` writes it, relative to the folder it runs in (the runs record this path).
CORPUS = os.path.join(".keysplit", "demo", "zipf.txt")
#: A committed replay estimate and the model's today differ by less than this (relative): the model is
#: deterministic, and the replay reports its quantiles to the hundredth of a ms.
SAME = 1e-3


def draw_simulate(out: Path) -> None:
    """``simulate.png`` as the demo draws it: its corpus written under the relative path the demo uses (the
    figure's title names it), then ``keysplit simulate`` of every grouping at the demo's W and S."""
    from keysplit.cli import main
    from keysplit.groupings import available

    (out / "simulate.png").unlink(missing_ok=True)  # this script's own figure, drawn again
    with tempfile.TemporaryDirectory() as tmp, _in_folder(tmp):
        write_corpus()
        with _quiet():
            assert main(["simulate", "--dataset", f"text:{CORPUS}", "-W", "8", "-S", "4", "-g",
                         ",".join(available()), "--plot", str(out / "simulate.png")]) == 0


@contextlib.contextmanager
def _in_folder(path: str):
    cwd = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(cwd)


@contextlib.contextmanager
def _quiet():
    with open(os.devnull, "w") as quiet:
        stdout, sys.stdout = sys.stdout, quiet
        try:
            yield
        finally:
            sys.stdout = stdout


def write_corpus() -> None:
    """The demo's corpus at :data:`CORPUS` under the current folder, from its generator spec, as step 1 writes it."""
    from keysplit.cli import main
    from keysplit.commands.demo import DEMO_DATA

    os.makedirs(os.path.dirname(CORPUS), exist_ok=True)
    with _quiet():
        assert main(["datasets", "generate", DEMO_DATA, "--out", CORPUS, "--words-per-line", "10", "--force"]) == 0


#: The other figures of the docs drawn by one command from a generator spec: (file in docs/img, the command).
SIMULATED = {"pkg_imbalance.png": ["simulate", "--dataset", "zipf:z=1.0,keys=10000,messages=1000000,seed=1",
                                   "-W", "10,50", "-S", "5", "-g", "kg,pkg,pkg:d=4,sg"]}


def draw_simulated(out: Path) -> None:
    """Each :data:`SIMULATED` figure, drawn by its ``keysplit simulate`` (the command its page quotes)."""
    from keysplit.cli import main

    for name, argv in SIMULATED.items():
        (out / name).unlink(missing_ok=True)  # this script's own figure, drawn again
        with _quiet():
            assert main([*argv, "--plot", str(out / name)]) == 0


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
    """Copy a demo's comparison, its calibration profile (``NAME.json`` in the ``calibrations`` folder beside
    ``demo``, as ``keysplit demo`` leaves them in ``.keysplit/``) and the replay's series (4 significant digits:
    the figure needs no more) here."""
    import pyarrow.parquet as pq

    from keysplit.commands.demo import CALIBRATION

    # the demo's folder as a user's `make demo` names it, not this machine's absolute path
    text = (demo / "compare" / "comparison.json").read_text(encoding="utf-8")
    (FIGURES / "comparison.json").write_text(text.replace(str(demo.resolve()), ".keysplit/demo"), encoding="utf-8")
    profile = demo.resolve().parent / "calibrations" / f"{CALIBRATION}.json"
    PROFILE.write_text(profile.read_text(encoding="utf-8").replace(str(demo.resolve()), ".keysplit/demo"),
                       encoding="utf-8")
    table = pq.read_table(demo / "replay" / "timeseries.parquet", columns=["grouping", "t", "imbalance_fraction"])
    series = table.to_pydict()
    series["imbalance_fraction"] = [float(f"{v:.4g}") for v in series["imbalance_fraction"]]
    (FIGURES / "timeseries.json").write_text(json.dumps(series, separators=(",", ":")) + "\n", encoding="utf-8")


def caption(comparison: dict) -> str:
    """The sentence the getting-started page prints under the compare figures: each run's measured words/s, p50
    and p99 next to the model's, from the data the figures are drawn from."""
    parts = []
    for row in comparison["rows"]:
        tp, p50, p99 = row["throughput"], row["latency_p50_ms"], row["latency_p99_ms"]
        parts.append(f"{row['grouping']} {tp['run_words_per_second']:,.0f} words/s measured, "
                     f"{tp['replay_estimate']:,.0f} predicted (p50 {p50['run']:,.0f} ms, {p50['replay']:,.0f} ms; "
                     f"p99 {p99['run']:,.0f} ms, {p99['replay']:,.0f} ms)")
    return (f"The demo's runs, calibrated on kg and sg (profile `{comparison['calibration']}`): "
            + "; ".join(parts) + ".")


def measured_words(comparison: dict) -> dict[str, str]:
    """Each grouping's measured words/s as the pages quote it (``3,886``)."""
    return {row["grouping"]: f"{row['throughput']['run_words_per_second']:,.0f}" for row in comparison["rows"]}


#: Each number of a comparison row that the model estimates: its field, and the names of the measured and the
#: estimated value in it.
ESTIMATED = {"throughput": ("run_words_per_second", "replay_estimate"), "latency_p50_ms": ("run", "replay"),
             "latency_p99_ms": ("run", "replay")}


def model_estimates(data: Path = FIGURES) -> dict[str, dict[str, float]]:
    """For each row of ``data``'s ``comparison.json``: the topology model's words/s, p50 and p99 for that run's
    grouping and knobs on the demo's corpus (written again from its generator spec), with the overheads of the
    profile ``calibration.json``: what ``keysplit replay ... --calibration demo`` estimates, without Spark."""
    from dataclasses import replace
    from types import SimpleNamespace

    from keysplit.datasets import open_dataset
    from keysplit.fingerprint import dataset_sha256
    from keysplit.topology_model.calibration import overheads
    from keysplit.topology_model.driver import route_dataset, run_model
    from keysplit.topology_model.params import model_params

    comparison = json.loads((data / "comparison.json").read_text(encoding="utf-8"))
    cal = overheads(str(data / PROFILE.name))
    estimates = {}
    with tempfile.TemporaryDirectory() as tmp, _in_folder(tmp):
        write_corpus()
        spec = f"text:{CORPUS}"
        dataset = comparison["dataset"]
        if dataset_sha256(open_dataset(spec).records()) != dataset["sha256"]:
            raise AssertionError("the demo's corpus written today (keysplit.commands.demo.DEMO_DATA) is not the one "
                                 "its runs measured")
        for row in comparison["rows"]:
            knob = {k["knob"]: k["replay"] for k in row["knobs"]}
            opts = SimpleNamespace(
                workers=knob["workers"], sources=knob["sources"], aggregators=knob["aggregators"],
                spouts=knob["spouts"], cpu_delay_ms=knob["cpu_delay_ms"], max_pending=knob["max_pending"],
                flush_secs=knob["flush_secs"], message_timeout=knob["message_timeout_secs"], rate=None,
                arrivals="closed", batch=knob["batch"], batch_ms=knob["batch_ms"], overheads=cal)
            if knob["arrivals"] != "closed":
                raise AssertionError(f"{row['grouping']}: the demo's runs are closed loop, not {knob['arrivals']}")
            # the replay's parameters: its knobs, the profile's overheads, the feed's words a line
            params = replace(model_params(opts), words_per_line=dataset["messages"] / dataset["records"])
            routed = route_dataset(spec, row["grouping"], opts.workers, opts.sources, opts.aggregators)
            s = run_model(params, *routed).summary()
            estimates[row["grouping"]] = {"throughput": s["throughput_estimate"],
                                          "latency_p50_ms": s["latency_p50_ms"], "latency_p99_ms": s["latency_p99_ms"]}
    return estimates


def stale_numbers(data: Path = FIGURES, estimates: dict | None = None) -> list[str]:
    """Where ``data``'s numbers are not what the code gives today, one line each: a replay estimate that is not the
    model's (:func:`model_estimates`) within :data:`SAME`, or a measured number further from the model than the
    calibration's target for it (words/s 15%, p50 and p99 25%: what a run's noise fits in)."""
    from keysplit.commands.demo import TARGETS

    comparison = json.loads((data / "comparison.json").read_text(encoding="utf-8"))
    estimates = model_estimates(data) if estimates is None else estimates
    lines = []
    for row in comparison["rows"]:
        g = row["grouping"]
        for key, (run_field, replay_field) in ESTIMATED.items():
            model, label = estimates[g][key], TARGETS[key][0]
            replay, run = row[key][replay_field], row[key][run_field]
            if abs(replay / model - 1) > SAME:
                lines.append(f"{g} {label}: comparison.json's replay estimate is {replay:,.2f}, the model today "
                             f"{model:,.2f}")
            if abs(model / run - 1) > TARGETS[key][1]:
                lines.append(f"{g} {label}: measured {run:,.2f}, the model today {model:,.2f} ({model / run:.2f}), "
                             f"outside {TARGETS[key][1]:.0%}")
    return lines


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
        numbers = stale_numbers()
        print(f"stale: {', '.join(differ)}; run python docs_hooks/demo_figures.py" if differ else "figures current")
        print("\n".join(["numbers no longer what the code gives (run make demo, then this script with --from "
                         ".keysplit/demo):", *numbers]) if numbers else "numbers current")
        return 1 if differ or numbers else 0
    draw_simulate(FIGURES)
    draw_simulated(FIGURES.parent)
    draw_compare(FIGURES, FIGURES)
    print(caption(json.loads((FIGURES / "comparison.json").read_text(encoding="utf-8"))))
    numbers = stale_numbers()  # a demo on busy cores can measure further from the model than a run's noise
    if numbers:
        print("\n".join(["numbers no longer what the code gives (make demo again, on a quieter machine):", *numbers]))
    return 1 if numbers else 0


if __name__ == "__main__":
    sys.exit(main())
