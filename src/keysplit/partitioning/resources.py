"""Resource functions beta_s, beta_c, beta_n and imbalance tolerances alpha_k (Gedik §3.1, Table 1).

A resource k in {s (state/memory), c (computation), n (communication)} has a resource function beta_k mapping
an item's frequency to its load, and a tolerance alpha_k >= 1 on the max/min load ratio r_k (eqs. 2, 4, 6).
The paper studies three functions, written as one letter each: C (constant, beta = 1), L (linear,
beta = x) and Q (quadratic, beta = x^2); a combination is written XYZ for beta_s, beta_c, beta_n, and the
default is LCL (time-based window state, incremental aggregation, communication = frequency).

The load of channel i for resource k is ``L_k(i) = sum over d with p(d) = i of beta_k(f(d))``. Eq. 3 writes
an extra factor f(d) for computation, but eq. 17 (delta_k = 1 for a constant beta, with L_k = |D|) and §4.4
(a constant resource is balanced by the consistent hash alone) only hold without it, so we use eq. 1's form
for every resource; this is what makes the C in LCL "free" as the paper's experiments treat it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from keysplit.errors import SpecError

KINDS = {"c": "constant", "l": "linear", "q": "quadratic"}
RESOURCES = ("s", "c", "n")  # state, computation, communication


def beta(kind: str, x):
    """beta(x) for a resource function kind (``c``, ``l`` or ``q``); works on floats and numpy arrays."""
    if kind == "c":
        return np.ones_like(x) if isinstance(x, np.ndarray) else 1.0
    if kind == "l":
        return x
    if kind == "q":
        return x * x
    raise SpecError(f"unknown resource function {kind!r}; valid: C (constant), L (linear), Q (quadratic)")


@dataclass(frozen=True)
class Resources:
    """beta_k kinds and alpha_k tolerances for k = s, c, n.

    >>> r = Resources.parse("LCL", alpha=1.2)
    >>> r.kinds, r.penalized
    (('l', 'c', 'l'), (0, 2))
    """

    kinds: tuple[str, str, str] = ("l", "c", "l")
    alphas: tuple[float, float, float] = (1.2, 1.2, 1.2)

    def __post_init__(self) -> None:
        for kind in self.kinds:
            if kind not in KINDS:
                raise SpecError(f"unknown resource function {kind!r}; valid: C (constant), L (linear), Q (quadratic)")
        for name, a in zip(RESOURCES, self.alphas):
            if not a > 1:
                raise SpecError(
                    f"alpha_{name} must be greater than 1, got {a} (alpha = 1 tolerates no imbalance at all: "
                    "eq. 15 gives theta = 0, so eq. 17 would track every key)"
                )

    @classmethod
    def parse(cls, text: str, alpha: float = 1.2) -> Resources:
        """``"LCL"`` (beta_s, beta_c, beta_n) with one alpha for every resource."""
        letters = text.strip().lower()
        if len(letters) != 3 or any(ch not in KINDS for ch in letters):
            raise SpecError(
                f"resources must be three letters from C, L, Q for beta_s, beta_c, beta_n (e.g. LCL), got {text!r}"
            )
        return cls((letters[0], letters[1], letters[2]), (alpha, alpha, alpha))

    @property
    def name(self) -> str:
        return "".join(self.kinds).upper()

    @property
    def penalized(self) -> tuple[int, ...]:
        """Resources counted in the balance penalty rho: the non-constant ones (§4.4)."""
        return tuple(k for k, kind in enumerate(self.kinds) if kind != "c")

    def weight(self, k: int, f):
        """beta_k(f) for resource index k (0 = s, 1 = c, 2 = n)."""
        return beta(self.kinds[k], f)

    def state(self, f):
        """beta_s(f): the state an item carries, the unit of migration cost (eq. 9)."""
        return beta(self.kinds[0], f)
