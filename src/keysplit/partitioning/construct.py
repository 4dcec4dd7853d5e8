"""Build p^(t+1) from p^(t), the current frequencies and N^(t+1): select D_p^(t+1) by delta (eqs. 14-17), then
run one of the construction algorithms (scan, redist, readj) with a utility function (§4.2-4.3).

>>> from keysplit.partitioning.function import PartitioningFunction
>>> p0 = PartitioningFunction(1, vnodes=100)
>>> freqs = {"a": 0.4, "b": 0.2, "c": 0.1, "d": 0.05}
>>> step = construct(p0, freqs, 2, Config(algo="readj", vnodes=100))
>>> sorted(step.function.explicit_hash), step.function.workers
(['a', 'b', 'c', 'd'], 2)
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from keysplit.errors import SpecError
from keysplit.partitioning.function import DEFAULT_VNODES, PartitioningFunction
from keysplit.partitioning.penalties import Balance, Setup
from keysplit.partitioning.readj import readj
from keysplit.partitioning.redist import redist
from keysplit.partitioning.resources import Resources
from keysplit.partitioning.scan import scan
from keysplit.partitioning.threshold import check_sigma, select_tracked
from keysplit.partitioning.utility import utility

ALGORITHMS = ("scan", "redist", "readj")


@dataclass(frozen=True)
class Config:
    """Everything a construction needs besides the data; the defaults are the paper's Table 1."""

    algo: str = "readj"
    utility: str = "apm"
    resources: Resources = field(default_factory=Resources)
    sigma: float = 0.1
    domain: int = 10**6  # |D|, used only by quadratic resource functions (eq. 17)
    max_moves: int = 5  # readj: the cap c on moves per item
    require_gain: bool = False  # readj: stop when the best readjustment has no positive gain
    vnodes: int = DEFAULT_VNODES

    def __post_init__(self) -> None:
        if self.algo not in ALGORITHMS:
            raise SpecError(f"unknown construction algorithm {self.algo!r}; valid: {', '.join(ALGORITHMS)}")
        utility(self.utility)
        check_sigma(self.sigma)
        if self.max_moves < 1:
            raise SpecError(f"max_moves must be at least 1, got {self.max_moves}")
        if self.vnodes < 1:
            raise SpecError(f"vnodes must be at least 1, got {self.vnodes}")
        if self.domain < 1:
            raise SpecError(f"the domain size |D| must be at least 1, got {self.domain}")


@dataclass
class Construction:
    """The outcome of one construction: p^(t+1), delta, D_p^(t+1) and the time it took."""

    function: PartitioningFunction
    delta: float
    tracked: dict[str, float]
    seconds: float


def construct(previous: PartitioningFunction, frequencies: Mapping[str, float], workers: int,
              config: Config, slack: float = 0.0) -> Construction:
    """p^(t+1) for ``workers`` channels. ``frequencies`` holds f(d) for at least every candidate item and the
    items of ``previous``'s explicit hash (missing ones count as 0); ``slack`` is the lossy counter's epsilon
    when the frequencies are its estimates (see ``threshold.select_tracked``)."""
    if workers < 1:
        raise SpecError(f"the number of channels must be at least 1, got {workers}")
    started = time.perf_counter()
    delta, tracked = select_tracked(frequencies, config.resources, workers, config.sigma, config.domain, slack)
    if workers == 1 or not tracked:
        ring = previous.ring if previous.workers == workers else None
        function = PartitioningFunction(workers, {}, vnodes=config.vnodes, ring=ring)
        return Construction(function, delta, tracked, time.perf_counter() - started)
    setup = Setup.create(previous, tracked, frequencies, workers, config.resources, config.vnodes)
    balance = Balance(config.resources, workers, setup.freq)
    u = utility(config.utility)
    if config.algo == "scan":
        explicit = scan(setup, balance, u)
    elif config.algo == "redist":
        explicit = redist(setup, balance, u)
    else:
        explicit = readj(setup, balance, u, config.max_moves, config.require_gain)
    function = PartitioningFunction(workers, explicit, ring=setup.ring)
    return Construction(function, delta, tracked, time.perf_counter() - started)
