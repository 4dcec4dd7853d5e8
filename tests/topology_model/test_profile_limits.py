"""A calibration profile is data a user may edit or receive: every cost must be a finite number within its stated
bound, or the profile is refused in one line naming the field, before Spark starts; the topology model bounds its
own work and refuses costs that would make it run for ever; no NaN or Infinity reaches a JSON file or --json."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from keysplit.cli import main as cli_main
from keysplit.commands.common import print_json
from keysplit.errors import KeysplitError
from keysplit.outputs import json_text
from keysplit.topology_model.calibration import load_calibration
from keysplit.topology_model.driver import StreamedModel
from keysplit.topology_model.params import CALIBRATED, COST_LIMITS, TopologyParams

GOOD = {"overhead_us": 50.0, "counter_overhead_us": 80.0, "tuple_us": 50.0, "tick_phase_s": 0.2, "hop_delay_ms": 1.5,
        "commit_us": 30.0, "ack_delay_ms": 2.0, "word_us": 0.0}


def profile(tmp_path, text: str) -> str:
    path = tmp_path / "profile.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("field, raw", [
    ("tuple_us", "NaN"),  # Python's json reads these three, strict parsers do not
    ("counter_overhead_us", "Infinity"),
    ("hop_delay_ms", "-Infinity"),
    ("overhead_us", "1e300"),
    ("commit_us", "1e999"),  # json reads it as inf
    ("ack_delay_ms", "-1"),
    ("tick_phase_s", "61"),
    ("word_us", "true"),
    ("tuple_us", '"5"'),
])
def test_a_bad_cost_is_refused_in_one_line_naming_the_field_before_spark(tmp_path, capsys, field, raw):
    text = json.dumps(GOOD).replace(f'"{field}": {json.dumps(GOOD[field])}', f'"{field}": {raw}')
    path = profile(tmp_path, text)
    with pytest.raises(KeysplitError, match=f"^calibration {path}: {field} must be a number between "):
        load_calibration(path)
    # the replay refuses it before the JVM starts (no session here: a Spark start would take seconds, and the
    # 5-word dataset below hung the model for good before)
    words = tmp_path / "five.txt"
    words.write_text("a b c d e\n")
    out = tmp_path / "o"
    assert cli_main(["replay", "--dataset", f"text:{words}", "-g", "kg", "--calibration", path, "--out",
                     str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"keysplit: error: calibration {path}: {field} must be a number between ")
    assert err.count("\n") == 1 and not out.exists()


def test_every_cost_has_a_bound_and_the_bounds_take_a_real_profile():
    assert set(CALIBRATED) <= set(COST_LIMITS) and all(0 < v < math.inf for v in COST_LIMITS.values())
    TopologyParams(workers=2, **GOOD)  # a profile's values, well within
    TopologyParams(workers=2, **{k: COST_LIMITS[k] for k in COST_LIMITS})  # every bound is taken
    for name in COST_LIMITS:
        for bad in (math.nan, math.inf, COST_LIMITS[name] * 1.0001):
            with pytest.raises(ValueError, match=f"^{name} must be a number between"):
                TopologyParams(workers=2, **{name: bad})
    for name, bad in (("cpu_delay_ms", math.nan), ("flush_secs", math.inf), ("rate", math.nan),
                      ("message_timeout", math.nan), ("batch_ms", math.inf)):
        with pytest.raises(ValueError, match=f"^{name} must be"):
            TopologyParams(workers=2, **{name: bad})


def test_a_cost_given_on_the_command_line_is_bounded_too(tmp_path, capsys):
    assert cli_main(["replay", "--dataset", "zipf:messages=10", "--overhead-us", "1e300", "--out",
                     str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err == "keysplit: error: overhead_us must be a number between 0 and 6e+07 us, got 1e+300\n"
    assert err.count("\n") == 1


def test_the_model_refuses_a_run_longer_than_its_bound_instead_of_running_on():
    """Costs within their bounds can still make a simulated run long (a minute a word at one counter): past its
    bound on ticks the model stops with one line; below it, it finishes."""
    params = TopologyParams(workers=2, aggregators=1, cpu_delay_ms=60_000.0, counter_overhead_us=60e6)
    lengths = np.ones(50, dtype=np.int64)  # 50 one-word lines at worker 0: about 100 simulated minutes
    feed = (lengths, np.zeros(50, dtype=np.int64), np.zeros(50, dtype=np.int64), np.arange(50, dtype=np.int64))
    bounded = StreamedModel(params, tick_visits=3 * 1000)  # 1000 ticks of W + A = 3 tasks: under 17 minutes
    bounded.feed(*feed)
    with pytest.raises(KeysplitError, match=r"^the topology model gave up after 1,000 ticks \(0 days of topology "
                       r"time\) with \d+ line\(s\) not complete: the costs \(CPU delay, calibration\)"):
        bounded.finish()
    enough = StreamedModel(params, tick_visits=3 * 100_000)
    enough.feed(*feed)
    result = enough.finish()
    assert result.lines == 50 and result.duration_s >= 50 * 120


def test_no_nan_or_infinity_reaches_json(capsys):
    summary = {"runs": [{"grouping": "kg", "latency_p50_ms": 1.0}, {"grouping": "sg", "latency_p50_ms": math.inf}]}
    with pytest.raises(KeysplitError, match=r"^summary.json would hold runs\[1\].latency_p50_ms = inf, not a finite "
                       "number, which JSON cannot carry; nothing was written$"):
        json_text(summary, "summary.json")
    with pytest.raises(KeysplitError, match=r"^the --json output would hold dataset.p1 = nan"):
        print_json({"dataset": {"p1": math.nan}})
    assert capsys.readouterr().out == ""
    assert json.loads(json_text({"a": [1.5, None]}, "x")) == {"a": [1.5, None]}
