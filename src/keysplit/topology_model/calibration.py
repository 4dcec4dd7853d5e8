"""The topology model's calibration profiles: where ``keysplit calibrate`` stores them (``$KEYSPLIT_HOME/calibrations``,
:func:`save_profile`) and how ``keysplit replay --calibration`` reads one (:func:`load_calibration`, :func:`overheads`).
The fit itself is :mod:`keysplit.topology_model.profile`.
"""

from __future__ import annotations

import os
import re

from keysplit.errors import KeysplitError
from keysplit.topology_model.params import CALIBRATED, OPTIONAL_CALIBRATED, check_cost

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
    from keysplit.home import private_dir
    from keysplit.outputs import atomic_file, json_text

    path = profile_path(profile["name"])
    text = json_text(profile, "the calibration profile") + "\n"  # strict JSON: no NaN or Infinity
    private_dir(os.path.dirname(path))
    with atomic_file(path, "the calibration profile") as fh:
        fh.write(text)
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
    ``path`` None: uncalibrated, every overhead 0. A profile's name comes back as ``profile``."""
    import json

    if not path:
        return {name: 0.0 for name in CALIBRATED} | {"source": None}
    target = resolve(path)
    try:
        with open(target, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise KeysplitError(f"cannot read the calibration {target}: {exc}") from None
    if not isinstance(data, dict) or any(k not in data for k in CALIBRATED):
        raise KeysplitError(f"{target} is not a keysplit calibration (needs numbers {', '.join(CALIBRATED)})")
    try:  # every cost finite and bounded (params.COST_LIMITS): a bad one is refused, not simulated for ever
        given = (*CALIBRATED, *(k for k in OPTIONAL_CALIBRATED if data.get(k) is not None))
        costs = {k: check_cost(k, data[k]) for k in given}
    except ValueError as exc:
        raise KeysplitError(f"calibration {target}: {exc}") from None
    named = {"profile": data["name"]} if isinstance(data.get("name"), str) else {}
    return costs | {"source": os.path.abspath(target)} | named


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
