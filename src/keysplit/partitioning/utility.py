"""The utility functions U(rho, gamma) of Gedik §4.3 (lower is better); U^APM is the paper's default.

>>> [round(float(UTILITIES[n](0.5, 1.0)), 4) for n in UTILITIES]
[0.5, 1.5, 1.1931, 1.0, 0.8466]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from keysplit.errors import SpecError

Utility = Callable[[np.ndarray, np.ndarray], np.ndarray]


def u_a(rho, gamma):
    """U^A = rho: balance only, migration ignored."""
    return rho + 0.0 * gamma


def u_apm(rho, gamma):
    """U^APM = rho + gamma."""
    return rho + gamma


def u_aplm(rho, gamma):
    """U^APLM = rho + log(1 + gamma)."""
    return rho + np.log1p(gamma)


def u_atm(rho, gamma):
    """U^ATM = rho * (1 + gamma)."""
    return rho * (1.0 + gamma)


def u_atlm(rho, gamma):
    """U^ATLM = rho * (1 + log(1 + gamma))."""
    return rho * (1.0 + np.log1p(gamma))


UTILITIES: dict[str, Utility] = {"a": u_a, "apm": u_apm, "aplm": u_aplm, "atm": u_atm, "atlm": u_atlm}


def utility(name: str) -> Utility:
    """The utility function named ``A``, ``APM``, ``APLM``, ``ATM`` or ``ATLM`` (case-insensitive)."""
    fn = UTILITIES.get(name.strip().lower().removeprefix("u_").removeprefix("u"))
    if fn is None and name.strip().lower() in UTILITIES:
        fn = UTILITIES[name.strip().lower()]
    if fn is None:
        raise SpecError(f"unknown utility function {name!r}; valid: {', '.join(u.upper() for u in UTILITIES)}")
    return fn
