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

Percentiles come from the project's mergeable histogram (:class:`keysplit.latency.LatencyHistogram`, binned
relative to D, bins under 0.1% wide: within one bin below the exact value, and exact when they are D itself);
the mean is exact.
"""

from __future__ import annotations

import numba
import numpy as np


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
