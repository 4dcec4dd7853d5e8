"""The replay's open-loop queueing estimate (``keysplit replay --arrivals lindley``): one FIFO server per worker
with a deterministic service time. The default estimate is ``keysplit.topology_model``, which models the
topology as ``keysplit run`` runs it (max pending, flush-then-ack, overheads); this one is kept as the lower
bound it was: what the workers alone would give an open stream.

Model (a D/D/1-style queue per worker, fed by the grouping's decisions):

- worker w serves one tuple every ``D = cpu_delay_ms`` milliseconds (the topology's per-tuple CPU delay), one
  at a time, first come first served, and nothing else costs time (routing, network and aggregation are
  free; the spouts never throttle, i.e. no ``max.spout.pending`` back-pressure);
- message n arrives at its event time: ``sequence / rate`` (``--rate``) or its record's timestamp;
- a worker's messages are served in arrival order; Lindley's recursion gives each one's waiting time,
  ``W_n = max(0, W_{n-1} + D - (a_n - a_{n-1}))``, and its latency is ``W_n + D``;
- latency percentiles are over all messages of all workers; the sustainable throughput is the rate at which
  the most loaded worker saturates: it must serve ``max_i L_i`` of the ``m`` messages, so the whole stream
  cannot go faster than ``m / (max_i L_i * D)`` messages per second (``throughput_estimate``).

Percentiles come from a mergeable histogram with log-spaced bins starting at D (ratio 1.001, so they are
within 0.1% below the exact value, and exact when they are D itself); the mean is exact.
"""

from __future__ import annotations

import math

import numba
import numpy as np

#: Relative width of a latency histogram bin.
BIN_RATIO = 1.001
#: Number of bins: latencies from D to D * 1.001**30000 (about 1e13 * D); larger ones go to the last bin.
BINS = 30_000


@numba.njit(cache=True, nogil=True)
def lindley(arrivals: np.ndarray, service: float) -> np.ndarray:
    """Latency (wait + service) of every message of one FIFO server, ``arrivals`` sorted ascending."""
    out = np.empty(arrivals.shape[0], dtype=np.float64)
    wait = 0.0
    for n in range(arrivals.shape[0]):
        if n > 0:
            wait = max(0.0, wait + service - (arrivals[n] - arrivals[n - 1]))
        out[n] = wait + service
    return out


class LatencyHistogram:
    """Counts of latencies in log-spaced bins ``[D * r**i, D * r**(i+1))``, plus exact count, sum, min, max."""

    def __init__(self, service: float) -> None:
        self.service = service
        self.counts = np.zeros(BINS, dtype=np.int64)
        self.n = 0
        self.total = 0.0
        self.low = math.inf
        self.high = 0.0

    def add(self, latencies: np.ndarray) -> None:
        if not len(latencies):
            return
        self.n += len(latencies)
        self.total += float(latencies.sum())
        self.low = min(self.low, float(latencies.min()))
        self.high = max(self.high, float(latencies.max()))
        if self.service > 0:
            idx = np.floor(np.log(np.maximum(latencies / self.service, 1.0)) / math.log(BIN_RATIO))
            self.counts += np.bincount(np.minimum(idx, BINS - 1).astype(np.int64), minlength=BINS)
        else:
            self.counts[0] += len(latencies)

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        self.counts += other.counts
        self.n += other.n
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)
        return self

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else 0.0

    def percentile(self, q: float) -> float:
        """The nearest-rank q-th percentile (0 < q <= 100): the lower edge of its bin, clamped to [min, max]."""
        if not self.n:
            return 0.0
        i = rank_bin(self.counts, self.n, q)
        edge = self.service * BIN_RATIO**i
        return min(max(edge, self.low), self.high)


def rank_bin(counts: np.ndarray, n: int, q: float) -> int:
    """The bin of a histogram of ``n`` values that holds their nearest-rank q-th percentile (0 < q <= 100)."""
    return int(np.searchsorted(np.cumsum(counts), max(1, math.ceil(q / 100.0 * n))))


def worker_latencies(arrival_chunks: list[np.ndarray], service: float) -> np.ndarray:
    """Latencies at one worker from its arrivals (chunks from several sources, each sorted)."""
    arrivals = np.sort(np.concatenate(arrival_chunks), kind="stable") if arrival_chunks else np.zeros(0)
    return lindley(arrivals, service)


def throughput_estimate(messages: int, loads: list[int], service: float) -> float | None:
    """``m / (max_i L_i * D)`` messages per second, or None without a service time."""
    busiest = max(loads) if loads else 0
    if service <= 0 or busiest == 0:
        return None
    return messages / (busiest * service)
