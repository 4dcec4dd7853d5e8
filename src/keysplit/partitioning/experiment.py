"""Gedik §5's main experiment: grow the parallel region from 1 to ``max_workers`` channels, one channel per
adaptation period, on Zipf-distributed keys, and measure the relative load imbalance b (eq. 11) and the
relative migration cost m (eq. 12) of each approach at every N:

- ``uniform``: uniform hashing, ``hash(d) mod N`` (key grouping);
- ``consistent``: the consistent hash alone (an empty explicit hash);
- ``scan``, ``redist``, ``readj``: the partitioning function rebuilt by that algorithm from p^(t) (§4.2).

Item d_r (key ``k<r>``, rank r) has frequency f(d_r) proportional to 1/r^z over |D| = ``domain`` items, and the
algorithms get the exact frequencies of the candidate items, as in the paper's evaluation of construction;
the lossy-counter size is measured separately by streaming ``stream`` messages sampled from the same
distribution through a lossy counter with ``epsilon = epsilon_ratio * delta(N)`` (Manku & Motwani's s/10).
``runs`` repeats everything with different hash seeds and averages (the paper averages 5 runs).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import mmh3
import numpy as np

from keysplit.hashing import BASE_SEED
from keysplit.partitioning.construct import ALGORITHMS, Config, construct
from keysplit.partitioning.function import DEFAULT_VNODES, BucketedRing, PartitioningFunction
from keysplit.partitioning.metrics import relative_imbalance, relative_migration
from keysplit.partitioning.resources import Resources
from keysplit.partitioning.threshold import frequency_threshold
from keysplit.sketches.lossy import LossyCounter

APPROACHES = ("uniform", "consistent", *ALGORITHMS)
RING_SEED = BASE_SEED + 1000  # HashRing's default seed


@dataclass
class ExperimentConfig:
    """Table 1's defaults, except |D| (10^6 in the paper; any size works, 10^5 runs in seconds)."""

    domain: int = 10**6
    z: float = 1.0
    alpha: float = 1.2
    resources: str = "LCL"
    sigma: float = 0.1
    utility: str = "apm"
    max_workers: int = 10
    vnodes: int = DEFAULT_VNODES
    runs: int = 1
    seed: int = 1
    stream: int = 0  # messages streamed through a lossy counter to measure its size (0: skip)
    epsilon_ratio: float = 0.1
    approaches: tuple[str, ...] = APPROACHES

    def config(self, algo: str) -> Config:
        return Config(algo=algo, utility=self.utility, resources=Resources.parse(self.resources, self.alpha),
                      sigma=self.sigma, domain=self.domain, vnodes=self.vnodes)


@dataclass
class Row:
    """One approach at one N, averaged over the runs. ``m`` is the migration from N-1 to N (None at N=1)."""

    approach: str
    workers: int
    b: float
    b_s: float
    b_c: float
    b_n: float
    m: float | None
    explicit: float  # explicit hash size |D_p|
    seconds: float  # construction time
    lossy: int | None = None  # peak entries of a lossy counter with epsilon = epsilon_ratio * delta(N)


@dataclass
class ExperimentResult:
    config: ExperimentConfig
    rows: list[Row] = field(default_factory=list)

    def row(self, approach: str, workers: int) -> Row:
        return next(r for r in self.rows if r.approach == approach and r.workers == workers)

    def mean(self, approach: str, metric: str, start: int = 2) -> float:
        """The mean of ``metric`` over N = ``start`` .. max_workers (m starts at N = 2)."""
        values = [getattr(r, metric) for r in self.rows if r.approach == approach and r.workers >= start]
        return float(np.mean(values))

    def to_dict(self) -> dict:
        cfg = asdict(self.config)
        cfg["approaches"] = list(self.config.approaches)
        summary = {a: {"mean_b": self.mean(a, "b"), "mean_m": self.mean(a, "m")} for a in self.config.approaches}
        return {"config": cfg, "summary": summary, "rows": [asdict(r) for r in self.rows]}


def zipf_frequencies(domain: int, z: float) -> np.ndarray:
    """f(d_r) proportional to 1/r^z for ranks r = 1..|D|, summing to 1 (decreasing)."""
    weights = 1.0 / np.power(np.arange(1, domain + 1, dtype=np.float64), z)
    return weights / weights.sum()


def key_name(rank_index: int) -> str:
    """The key of the item at 0-based rank index i (``k<i+1>``, as the zipf dataset names them)."""
    return f"k{rank_index + 1}"


def _index(key: str) -> int:
    return int(key[1:]) - 1


def lossy_sizes(freq: np.ndarray, cfg: ExperimentConfig, progress: Callable[[int], None] | None = None) -> dict:
    """Peak entries held by a lossy counter over ``cfg.stream`` sampled messages, per N (epsilon = 0.1 delta(N))."""
    rng = np.random.Generator(np.random.PCG64(cfg.seed))
    cdf = np.cumsum(freq)
    stream = [key_name(i) for i in np.minimum(np.searchsorted(cdf, rng.random(cfg.stream)), len(freq) - 1)]
    resources = Resources.parse(cfg.resources, cfg.alpha)
    sizes: dict[int, int] = {}
    for n in range(2, cfg.max_workers + 1):
        delta = frequency_threshold(resources, n, cfg.sigma, cfg.domain)
        counter = LossyCounter(min(0.5, cfg.epsilon_ratio * delta))
        counter.update_many(stream)
        sizes[n] = max(counter.peak, len(counter))
        if progress:
            progress(1)
    return sizes


def run_experiment(cfg: ExperimentConfig, progress: Callable[[int], None] | None = None) -> ExperimentResult:
    """Run the experiment; ``progress(k)`` is called as work advances (total: :func:`work_units`)."""
    unknown = [a for a in cfg.approaches if a not in APPROACHES]
    if unknown:
        from keysplit.errors import SpecError

        raise SpecError(f"unknown approach {unknown[0]!r}; valid: {', '.join(APPROACHES)}")
    for a in cfg.approaches:
        if a in ALGORITHMS:
            cfg.config(a)  # validate before the long work
    resources = Resources.parse(cfg.resources, cfg.alpha)
    freq = zipf_frequencies(cfg.domain, cfg.z)
    keys = [key_name(i) for i in range(cfg.domain)]
    sums: dict[tuple[str, int], list[list[float | None]]] = {}
    for run in range(cfg.runs):
        ring_seed = RING_SEED + run
        uniform_hash = np.fromiter((mmh3.hash(k, BASE_SEED + run, False) for k in keys), dtype=np.uint64)
        ring_hash = np.fromiter((mmh3.hash(k, ring_seed, False) for k in keys), dtype=np.uint64)
        rings = {n: BucketedRing(range(n), vnodes=cfg.vnodes, seed=ring_seed) for n in range(1, cfg.max_workers + 1)}
        consistent = {n: rings[n].assign(ring_hash) for n in rings}
        for approach in cfg.approaches:
            previous_assign = None
            function = PartitioningFunction(1, ring=rings[1])
            for n in range(1, cfg.max_workers + 1):
                seconds = 0.0
                explicit = 0
                if approach == "uniform":
                    assign = (uniform_hash % np.uint64(n)).astype(np.int64)
                elif approach == "consistent":
                    assign = consistent[n]
                else:
                    delta = frequency_threshold(resources, n, cfg.sigma, cfg.domain)
                    top = int(np.searchsorted(-freq, -delta, side="right")) if math.isfinite(delta) else 0
                    candidates = {keys[i]: float(freq[i]) for i in range(top)}
                    for d in function.explicit_hash:
                        candidates.setdefault(d, float(freq[_index(d)]))
                    step = construct(function, candidates, n, cfg.config(approach))
                    function = step.function
                    seconds = step.seconds
                    explicit = len(function)
                    assign = consistent[n].copy()
                    for d, i in function.explicit_hash.items():
                        assign[_index(d)] = i
                b, parts = relative_imbalance(assign, freq, n, resources)
                m = None if previous_assign is None else relative_migration(previous_assign, assign, freq, n,
                                                                            resources)
                sums.setdefault((approach, n), []).append([b, *parts, m, explicit, seconds])
                previous_assign = assign
                if progress:
                    progress(1)
    sizes = lossy_sizes(freq, cfg, progress) if cfg.stream > 0 else {}
    result = ExperimentResult(cfg)
    for (approach, n), values in sums.items():
        cols = list(zip(*values))
        mean = [None if any(v is None for v in col) else float(np.mean(col)) for col in cols]
        result.rows.append(Row(approach, n, *mean, lossy=sizes.get(n) if approach in ALGORITHMS else None))
    return result


def work_units(cfg: ExperimentConfig) -> int:
    """How many times :func:`run_experiment` calls ``progress(1)``."""
    return cfg.runs * len(cfg.approaches) * cfg.max_workers + (cfg.max_workers - 1 if cfg.stream > 0 else 0)
