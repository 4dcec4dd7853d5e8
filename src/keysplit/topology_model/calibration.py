"""The topology model's calibration: its overheads fitted so that it reproduces three ``keysplit run``s measured on
the machine that runs the topology (:func:`calibrate`), stored in a calibration file that ``keysplit replay``
reads (:func:`load_calibration`, :func:`overheads`).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any

import numpy as np

from keysplit.errors import KeysplitError
from keysplit.topology_model.driver import simulate
from keysplit.topology_model.params import CALIBRATED, OPTIONAL_CALIBRATED, TopologyParams, params_of_run

#: The calibration file ``keysplit replay`` reads when ``--calibration`` is not given, in the project's state
#: directory (``$KEYSPLIT_HOME``, else ``./.keysplit``).
CALIBRATION_NAME = "calibration.json"


def default_calibration() -> str:
    from keysplit.home import keysplit_home

    return str(keysplit_home() / CALIBRATION_NAME)


def _bisect(below: Any, high: float, steps: int) -> float:
    """The threshold in [0, high] where the monotone predicate ``below(value)`` turns false: 0 when it is false at 0,
    ``high`` when it is still true there, else the smallest value found where it is false."""
    if not below(0.0):
        return 0.0
    if below(high):
        return high
    lo, hi = 0.0, high
    for _ in range(steps):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if below(mid) else (lo, mid)
    return hi


def fit_overhead(name: str, measured_wps: float, params: TopologyParams, arrays: tuple, high: float = 20_000.0,
                 steps: int = 30) -> float:
    """The value of overhead ``name`` (microseconds) at which the model's throughput equals ``measured_wps``.

    The model's throughput does not increase with any overhead, so bisection finds it. The ticks quantise a
    run's duration, so the throughput is flat over a range of overheads: the result is the start of the range
    that reproduces the run (0 when the model is already slower at 0, ``high`` when still faster there)."""
    return _bisect(lambda v: simulate(replace(params, **{name: v}), *arrays).words_per_second > measured_wps,
                   high, steps)


def fit_delay(name: str, measured_mean_ms: float, params: TopologyParams, arrays: tuple, high: float = 5000.0,
              steps: int = 30) -> float:
    """The value of delay ``name`` (ms) at which the model's mean complete latency equals ``measured_mean_ms``
    (a pure delay only lengthens a line's trip, so bisection finds it); 0 when the model is already slower."""
    return _bisect(lambda v: float(simulate(replace(params, **{name: v}), *arrays).latency_ms.mean())
                   < measured_mean_ms, high, steps)


def calibrate(ceiling: dict, ceiling_arrays: tuple, saturation: dict, saturation_arrays: tuple, light: dict,
              light_arrays: tuple, single: dict | None = None, single_arrays: tuple | None = None) -> dict:
    """The model's overheads from three (or four) calibration runs of ``keysplit run`` (their ``--json`` summaries)
    and the routed streams of their datasets (:func:`~keysplit.topology_model.driver.route_dataset`):

    - ``ceiling``: no CPU delay and a max pending high enough that Little's law does not bind (the ceiling
      ``benchmarks/topology_throughput.py`` measures): ``overhead_us``, the runner's serial time per tuple, and
      ``tuple_us`` (the same per-tuple cost for what ticks emit and ack) are fitted so that the model reproduces
      its words/s;
    - ``single``, when given: the same ceiling with one tuple per word (``--batch 1``) while ``ceiling`` ran with
      batches: its words/s gives the runner's cost of a word in a tuple of its own, ``word_us + overhead_us``, and
      the batched ceiling then splits it (``word_us``, what a word costs whatever its tuple: the spout's line, the
      router's choice; ``overhead_us``, what a tuple costs), the split with which the model reproduces both runs
      (without it, ``word_us`` is 0: the ceiling's cost is all per tuple);
    - ``light``: no CPU delay, open loop well below the ceiling, so that nothing queues: ``commit_us`` is what
      its aggregators measured per partial count at their ticks (the run's ``aggregator_us``), ``hop_delay_ms``
      what it measured from the first emit to the first word at a counter (``first_hop_ms``: the spout, the
      router and the hops between), and ``ack_delay_ms``, from an aggregator's ack to the line's completion
      (the top-k bolt, the runner's acker, the spout's completion in Redis), is fitted so that the model
      reproduces its mean complete latency (the ticks' waits, which make up most of it, are in the model). A
      run from before these measurements fits the hop instead, with no ack delay;
    - ``saturation``: a CPU delay with every counter saturated (shuffle grouping, high max pending):
      ``counter_overhead_us``, what a counter spends per word beyond the delay (the sleep's overshoot when the
      cores are shared, reading and parsing the tuple), is fitted so that the model reproduces its words/s;
    - ``tick_phase_s``: the mean, over the runs, of where their ticks fell relative to the first emit.

    The hop used to be fitted to a mean latency (the ceiling's, then the light run's): 161 ms, then 51 to 76 ms,
    while a word reaches its counter 7 to 9 ms after its emit; the rest of a line's trip comes after the
    aggregators' tick, where a delay cannot push a counter's flush past a tick (kg at 1 ms in the agreement
    table).
    """
    if ceiling.get("cpu_delay_ms") or light.get("cpu_delay_ms"):
        raise ValueError("the ceiling and light calibration runs must have no CPU delay (keysplit run --cpu-delay 0)")
    if not light.get("rate"):
        raise ValueError("the light calibration run must be open loop (keysplit run --rate R)")
    if not saturation.get("cpu_delay_ms"):
        raise ValueError("the saturation calibration run needs a CPU delay")
    runs = (ceiling, light, saturation) + ((single,) if single is not None else ())
    phase = float(np.mean([float(r.get("tick_phase_s") or 0.0) for r in runs]))
    base = replace(params_of_run(ceiling, tick_phase_s=phase), tuple_us=0.0)
    word = 0.0
    if single is not None and single_arrays is not None and base.batch > 1:
        alone = fit_overhead("overhead_us", single["words_per_second"],
                             replace(params_of_run(single, tick_phase_s=phase), tuple_us=0.0), single_arrays)
        # more of it per word and less per tuple makes a batched run slower: bisection finds the split
        word = _bisect(lambda v: simulate(replace(base, overhead_us=alone - v, word_us=v), *ceiling_arrays)
                       .words_per_second > ceiling["words_per_second"], alone, 30)
        per_word = alone - word  # per tuple
    else:
        per_word = fit_overhead("overhead_us", ceiling["words_per_second"], base, ceiling_arrays)
    commit = float(light.get("aggregator_us") or per_word)  # a run from before the aggregators measured it
    light_params = params_of_run(light, overhead_us=per_word, tuple_us=per_word, commit_us=commit,
                                 tick_phase_s=phase, word_us=word)
    if light.get("first_hop_ms") is not None:
        hop = float(light["first_hop_ms"])
        ack = fit_delay("ack_delay_ms", light["latency_ms"]["mean"], replace(light_params, hop_delay_ms=hop),
                        light_arrays)
    else:
        hop, ack = fit_delay("hop_delay_ms", light["latency_ms"]["mean"], light_params, light_arrays), 0.0
    sat = params_of_run(saturation, overhead_us=per_word, tuple_us=per_word, commit_us=commit, tick_phase_s=phase,
                        hop_delay_ms=hop, ack_delay_ms=ack, word_us=word)
    counter = fit_overhead("counter_overhead_us", saturation["words_per_second"], sat, saturation_arrays)
    names = ("ceiling", "light", "saturation", "single")
    return {"overhead_us": per_word, "word_us": word, "counter_overhead_us": counter, "tuple_us": per_word,
            "commit_us": commit, "tick_phase_s": phase, "hop_delay_ms": hop, "ack_delay_ms": ack,
            "runs": {name: {k: r.get(k) for k in _RUN_FIELDS} for name, r in zip(names, runs)},
            "how": "fitted so that the model reproduces the words/s of a `keysplit run` with no CPU delay (runner "
                   "and protocol per tuple, and per word when a run with one tuple per word is given too), the mean "
                   "latency of one with no CPU delay at a light open-loop rate (ack delay; that run measured the "
                   "first hop and its aggregators' commit per partial count) and the words/s of one with every "
                   "counter saturated (counter per tuple)"}


_RUN_FIELDS = ("run_id", "grouping", "dataset", "workers", "sources", "aggregators", "cpu_delay_ms", "max_pending",
               "flush_secs", "rate", "batch", "batch_ms", "words_per_second", "words_per_tuple", "tick_phase_s",
               "aggregator_us", "first_hop_ms")


#: A profile's name (``keysplit calibrate --name``): it names a file in the state folder, so never a path.
PROFILE_NAME = re.compile(r"[A-Za-z0-9._-]{1,64}")
#: Where ``keysplit calibrate`` stores its profiles, in the state folder.
PROFILES = "calibrations"


def check_profile_name(name: str) -> str:
    if not PROFILE_NAME.fullmatch(name) or name in (".", ".."):
        raise KeysplitError(f"bad calibration name {name[:60]!r}: use 1 to 64 letters, digits, '.', '_' or '-'")
    return name


def profile_path(name: str) -> str:
    """The file of the profile ``name``: ``$KEYSPLIT_HOME/calibrations/NAME.json``."""
    from keysplit.home import keysplit_home

    return str(keysplit_home() / PROFILES / f"{check_profile_name(name)}.json")


def save_profile(profile: dict) -> str:
    """Write ``profile`` (with its ``name``) atomically to :func:`profile_path`; the path."""
    import json

    from keysplit.home import private_dir
    from keysplit.outputs import atomic_file

    path = profile_path(profile["name"])
    private_dir(os.path.dirname(path))
    with atomic_file(path, "the calibration profile") as fh:
        json.dump(profile, fh, indent=2)
        fh.write("\n")
    return path


def resolve(calibration: str) -> str:
    """``--calibration``'s file: a stored profile's when it names one (a name, no ``/``), else the path given."""
    if PROFILE_NAME.fullmatch(calibration) and not calibration.endswith(".json") and calibration not in (".", ".."):
        path = profile_path(calibration)
        if not os.path.exists(path):
            raise KeysplitError(f"no calibration profile {calibration!r} (no {path}); make it with `keysplit "
                                f"calibrate --run ID,ID --name {calibration}`")
        return path
    return calibration


def load_calibration(path: str | None) -> dict:
    """A calibration file's overheads (``path``: a file, or the name of a profile of ``keysplit calibrate``);
    ``path`` None reads :func:`default_calibration` if it exists, else zeros. A profile's name comes back as
    ``profile``."""
    import json

    target = resolve(path) if path else default_calibration()
    if path is None and not os.path.exists(target):
        return {name: 0.0 for name in CALIBRATED} | {"source": None}
    try:
        with open(target, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise KeysplitError(f"cannot read the calibration {target}: {exc}") from None
    if not isinstance(data, dict) or any(not isinstance(data.get(k), (int, float)) for k in CALIBRATED):
        raise KeysplitError(f"{target} is not a keysplit calibration (needs numbers {', '.join(CALIBRATED)})")
    optional = {k: float(data[k]) for k in OPTIONAL_CALIBRATED if isinstance(data.get(k), (int, float))}
    named = {"profile": data["name"]} if isinstance(data.get("name"), str) else {}
    return {k: float(data[k]) for k in CALIBRATED} | optional | {"source": os.path.abspath(target)} | named


def overheads(calibration: str | None, overhead_us: float | None = None, counter_overhead_us: float | None = None,
              tick_phase_s: float | None = None) -> dict:
    """The calibration file's overheads (:func:`load_calibration`) with the given overrides (None: the file's);
    ``overhead_us`` given without a file is the per-tuple cost ``tuple_us`` too (a KeysplitError for a bad file)."""
    cal = load_calibration(calibration)
    for key, value in (("overhead_us", overhead_us), ("counter_overhead_us", counter_overhead_us),
                       ("tick_phase_s", tick_phase_s)):
        if value is not None:
            cal[key] = value
    if overhead_us is not None and calibration is None:
        cal["tuple_us"] = overhead_us
    return cal
