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

from keysplit.latency import QUEUE_BITS, LatencyHistogram


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


@numba.njit(cache=True, nogil=True)
def lindley_from(arrivals: np.ndarray, service: float, wait: float, last: float) -> tuple:
    """Lindley's recursion (:func:`lindley`) continued from a previous batch that left
    the queue with waiting time ``wait`` after its last arrival ``last`` (``-inf``: an empty queue).
    Returns the latencies, and the ``wait`` and ``last`` to continue from."""
    out = np.empty(arrivals.shape[0], dtype=np.float64)
    for n in range(arrivals.shape[0]):
        wait = max(0.0, wait + service - (arrivals[n] - last))
        last = arrivals[n]
        out[n] = wait + service
    return out, wait, last


class Queues:
    """The FIFO queues of one reduce task's workers, served chunk after chunk (or all at once at the end)."""

    def __init__(self, service: float, streaming: bool) -> None:
        self.service = service
        self.streaming = streaming
        self.hist = LatencyHistogram(service if service > 0 else 1.0, QUEUE_BITS)  # bins relative to D
        self.state: dict[int, tuple[float, float]] = {}
        self.pending: dict[int, list[np.ndarray]] = {}

    def add(self, pieces: list[list[tuple[int, np.ndarray]]]) -> None:
        """One chunk's arrivals at these workers, from every source (each source's sorted)."""
        per_worker: dict[int, list[np.ndarray]] = {}
        for piece in pieces:
            for w, times in piece:
                per_worker.setdefault(w, []).append(times)
        for w, parts in per_worker.items():
            if not self.streaming:
                self.pending.setdefault(w, []).extend(parts)
                continue
            times = parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts), kind="stable")
            self._serve(w, times)

    def _serve(self, w: int, times: np.ndarray) -> None:
        wait, last = self.state.get(w, (0.0, -np.inf))
        latencies, wait, last = lindley_from(times, self.service, wait, last)
        self.state[w] = (wait, last)
        self.hist.add(latencies)

    def finish(self) -> LatencyHistogram:
        for w, parts in self.pending.items():
            self._serve(w, np.sort(np.concatenate(parts), kind="stable"))
        self.pending.clear()
        return self.hist


def throughput_estimate(messages: int, loads: list[int], service: float) -> float | None:
    """``m / (max_i L_i * D)`` messages per second, or None without a service time."""
    busiest = max(loads) if loads else 0
    if service <= 0 or busiest == 0:
        return None
    return messages / (busiest * service)
