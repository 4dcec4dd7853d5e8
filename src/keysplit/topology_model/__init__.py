"""A discrete-event model of the word-count topology as ``keysplit run`` runs it (the replay's ``--arrivals closed``
and ``--arrivals open`` estimates), in layers that import downwards only:

- :mod:`~keysplit.topology_model.params`: the knobs, the calibrated overheads and a run's result;
- :mod:`~keysplit.topology_model.kernel`: the numba event loop (what the model follows, and what it does not);
- :mod:`~keysplit.topology_model.driver`: the stream fed to it (:func:`run_model`, :class:`StreamedModel`);
- :mod:`~keysplit.topology_model.storm_terms`: the costs between components that a run's configuration gives (Storm's
  executor batching, ackers, worker JVMs);
- :mod:`~keysplit.topology_model.profile`: the few costs it does not give, fitted to stored runs (`keysplit calibrate`);
- :mod:`~keysplit.topology_model.calibration`: where ``keysplit calibrate`` stores the profiles and how
  ``keysplit replay --calibration`` reads one.

The Spark task that feeds it a replay's routed stream is ``spark_replay.model_task``. The parameters load at
once (numpy only: the command line reads ``KNOBS``); the rest, which needs numba, on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from keysplit.topology_model.params import (
    ARRIVALS,
    CALIBRATED,
    KNOBS,
    OPTIONAL_CALIBRATED,
    ModelResult,
    TopologyParams,
    model_params,
    params_of_run,
)

_LAZY = {
    "driver": ("StreamedModel", "aggregator_of", "line_starts", "route_dataset", "run_model", "stream_arrays"),
    "calibration": ("load_calibration", "overheads", "profile_path", "save_profile"),
    "profile": ("arrays_of_run", "check_fittable", "fit", "params_for", "predict", "reproduction"),
}
_HOME = {name: module for module, names in _LAZY.items() for name in names}

__all__ = ["ARRIVALS", "CALIBRATED", "KNOBS", "OPTIONAL_CALIBRATED", "ModelResult", "TopologyParams",
           "model_params", "params_of_run", *_HOME]


def __getattr__(name: str) -> Any:
    if name in _HOME:
        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
