"""The figures and measured numbers in the docs are current: drawn again from their committed inputs, the figures
are the committed PNGs; the getting-started page's numbers are those of the data the figures show; and that data,
and the calibration guide's sample, are what the code gives today: the replay estimates are the topology model's
(deterministic, with the committed calibration profile), and every measured number is within a run's noise (the
calibration's targets) of it, so a change of the code that moves what ``make demo`` or ``keysplit calibrate``
would print fails here. Nothing here times anything: the model's clock is its own."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs_hooks"))

import calibrate_sample  # noqa: E402  (docs_hooks is not a package)
import demo_figures  # noqa: E402


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


def _page(name: str) -> str:
    return " ".join((ROOT / name).read_text(encoding="utf-8").split())


def test_the_pages_name_the_commands_that_regenerate_their_numbers():
    started = _page("docs/getting-started.md")
    assert "`make demo`, then `.venv/bin/python docs_hooks/demo_figures.py --from .keysplit/demo`" in started
    guide = _page("docs/guides/calibrate.md")
    assert "`.venv/bin/python docs_hooks/calibrate_sample.py --from .keysplit/calibrations/here.json`" in guide


def test_the_pages_quote_the_demos_measured_words_per_second():
    comparison = json.loads((demo_figures.FIGURES / "comparison.json").read_text(encoding="utf-8"))
    words = demo_figures.measured_words(comparison)
    assert f"the demo measured {words['kg']} against {words['pkg']} on 2 cores" in _page("docs/getting-started.md")
    assert f"the demo measured {words['kg']} and {words['pkg']} words/s" in _page("README.md")


def test_the_demos_numbers_are_what_the_model_gives_today():
    """The committed replay estimates are the model's with the committed profile, and each measured number is
    within its target of the model: kg's p50 measured under a flush clock the code no longer has is not."""
    assert demo_figures.stale_numbers() == [], "make demo, then python docs_hooks/demo_figures.py --from .keysplit/demo"


def test_the_model_page_quotes_the_demos_agreement(capsys):
    from keysplit.commands.demo import print_agreement

    capsys.readouterr()
    print_agreement(demo_figures.FIGURES / "comparison.json")
    agreement = capsys.readouterr().out.strip()
    assert f"```\n{agreement}\n```" in (ROOT / "docs" / "design" / "topology-model.md").read_text(encoding="utf-8")


def test_a_moved_number_is_caught(tmp_path):
    for name in ("comparison.json", "calibration.json"):
        (tmp_path / name).write_bytes((demo_figures.FIGURES / name).read_bytes())
    estimates = demo_figures.model_estimates(tmp_path)
    data = json.loads((tmp_path / "comparison.json").read_text(encoding="utf-8"))
    kg = next(row for row in data["rows"] if row["grouping"] == "kg")
    kg["latency_p50_ms"]["replay"] *= 1.01  # an estimate the model no longer gives
    kg["latency_p50_ms"]["run"] *= 1.7  # a measurement the model is far from (kg's p50 before the flush clock)
    (tmp_path / "comparison.json").write_text(json.dumps(data), encoding="utf-8")
    stale = demo_figures.stale_numbers(tmp_path, estimates)
    assert [line.split(":")[0] for line in stale] == ["kg p50", "kg p50"], stale
    # a model that moves: the same data judged against estimates one flush period later
    later = {g: e | {"latency_p50_ms": e["latency_p50_ms"] + 1000} for g, e in estimates.items()}
    assert len(demo_figures.stale_numbers(demo_figures.FIGURES, later)) >= 3


def test_the_calibration_guides_sample_is_what_calibrate_prints_today():
    text = calibrate_sample.sample()
    page = (ROOT / "docs" / "guides" / "calibrate.md").read_text(encoding="utf-8")
    assert text in page, "run python docs_hooks/calibrate_sample.py and paste its output into the guide"
    table = text.splitlines()[3:-1]
    assert table and all(line.endswith(" yes") for line in table), "a run is not within the targets of the model"


def test_the_guides_corpus_is_what_the_pages_say(tmp_path, capsys):
    """``zipf.txt`` of Getting started (its first command): its lines and its most frequent word's share, as the
    page and the README describe it."""
    from collections import Counter

    from keysplit.cli import main

    spec, name = calibrate_sample.CORPUS
    capsys.readouterr()
    assert main(["datasets", "generate", spec, "--out", str(tmp_path / name), "--words-per-line", "10"]) == 0
    assert capsys.readouterr().out.startswith("wrote 2,000 lines")
    words = (tmp_path / name).read_text(encoding="utf-8").split()
    share = f"{Counter(words).most_common(1)[0][1] / len(words):.0%}"
    assert f"`zipf.txt` is 2,000 lines of 10 words whose most frequent word is {share} of them" in _page(
        "docs/getting-started.md")
    assert f"A corpus of {len(words):,} words, 10 a line, where the most frequent word is {share} of them" in _page(
        "README.md")
    assert f"keysplit datasets generate {spec} --out {name} --words-per-line 10" in _page("docs/getting-started.md")


def test_the_effect_tables_measurements_are_within_noise_of_the_model(tmp_path):
    """The benchmarks page's table of the paper's effect (``benchmarks/topology_effect.py --lines 6000
    --max-pending 2500``, which also draws ``docs/img/topology_effect.png``): each run's words/s within 15% of the
    topology model's with no calibrated costs (the runs are bound by their counters' CPU delay), its mean and p99
    latency within 25%; a change of the code that moves the model further (the flush clock, the spouts' window)
    fails here until the benchmark is run again."""
    import re

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from topology_effect import write_zipf_text

    from keysplit.topology_model.driver import route_dataset, run_model
    from keysplit.topology_model.params import TopologyParams

    page = (ROOT / "docs" / "benchmarks" / "index.md").read_text(encoding="utf-8")
    command = ".venv/bin/python benchmarks/topology_effect.py --lines 6000 --max-pending 2500"
    table = page[page.index(command):].split("\n\n| CPU delay (ms) |", 1)[1].split("\n\n", 1)[0]
    rows = [re.split(r"\s*\|\s*", line.strip(" |")) for line in table.splitlines()[2:]]
    assert len(rows) == 9 and "docs/img/topology_effect.png" in page
    corpus = tmp_path / "zipf.txt"
    write_zipf_text(corpus, lines=6000, words_per_line=10, keys=5000, z=1.1, seed=1)  # the script's defaults
    missed = []
    for delay, grouping, words, _limit, _share, _sg, _kg, mean, p99, *_ in rows:
        params = TopologyParams(workers=8, sources=4, aggregators=2, cpu_delay_ms=float(delay), max_pending=2500,
                                flush_secs=1.0, message_timeout=120, batch=100, batch_ms=20.0, words_per_line=10.0)
        s = run_model(params, *route_dataset(f"text:{corpus}", grouping, 8, 4, 2)).summary()
        for label, measured, model, target in (("words/s", words, s["throughput_estimate"], 0.15),
                                                ("mean", mean, s["latency_mean_ms"], 0.25),
                                                ("p99", p99, s["latency_p99_ms"], 0.25)):
            if abs(model / float(measured) - 1) > target:
                missed.append(f"{grouping} at {delay} ms: {label} {measured} measured, the model {model:.0f}")
    assert missed == [], f"run {command}"
