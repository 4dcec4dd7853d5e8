"""The project's one latency histogram: the spouts' complete latencies (stored in Redis, merged by the run), the
replay's queueing estimate and the topology model's lines all bin the same way.

**Binning.** A value ``x`` (a latency in ms; see ``scale``) is split by ``math.frexp`` into ``m * 2**e``,
``0.5 <= m < 1``, and each power of two into ``2**BITS`` equal sub-bins::

    bin_of(x) = 1 + (e - E_MIN) * 2**BITS + floor((m - 0.5) * 2**(BITS + 1))

Bin 0 holds zero and what is below ``2**(E_MIN - 1)``, the last bin (``BINS - 1``) what is from ``2**(E_MAX - 1)``
up; :func:`bin_value` is a bin's lower edge, and bin ``b + 1``'s is bin ``b``'s upper edge. :func:`bin_of` is
plain arithmetic on module constants, so numba compiles it as it is (the topology model's kernel does
``numba.njit(latency.bin_of)``) and the two agree to the bit.

**Why these numbers.** ``BITS = 14`` and ``E_MIN, E_MAX = -10, 28`` are the topology model's binning as it was:
a bin is at most ``2**-14`` (0.006%) of its values wide, from about 0.5 us to 37 hours in ms. That is the finest
any user needs (the model's streamed summary is tested to be at most one bin, ``2**-14``, above the exact
percentile); the replay's queueing histogram had bins 0.1% wide and the spouts' 2% (base 0.01 ms, growth 1.02).

**Coarser copies nest.** A histogram may keep fewer sub-bins, ``bits < BITS`` (:func:`coarser`: fine bin ``b``
is bin ``((b - 1) >> (BITS - bits)) + 1``), and histograms of different ``bits`` merge exactly, into the coarser.
The spouts keep ``bits = 7`` (128 sub-bins per power of two, bins under 0.8% wide: finer than the 2% the runs
reported): each spout writes its whole histogram to Redis as JSON at every ack flush (every 50 ms), and at
``2**-14`` a latency timed to the microsecond rarely shares a bin, so that JSON would grow by about one entry per
line; at 128 it holds a few hundred. The replay's queueing estimate keeps ``bits = 10`` (under 0.1%, as its own
bins were), so its per-task histograms shuffle as small as they did. The model's kernel counts at ``BITS``.

**Percentiles** are nearest-rank: the rank's bin bounds the exact value between its lower and upper edge, both
clamped to the smallest and largest value recorded (kept exactly, as are the count and the sum: the mean is
exact). :meth:`LatencyHistogram.percentile` is the lower bound (at most one bin below the exact value, and
exact when it is the smallest or the bin holds one distinct value at its lower edge); the topology model reports
the upper one (:meth:`~LatencyHistogram.percentile_bounds`: at most one bin above, as its summary always has).

Pure Python and ``math`` at import: this module ships to the Storm workers inside the topology jar (numpy is
imported only by :meth:`LatencyHistogram.add`, for the replay's arrays).

>>> h = LatencyHistogram()
>>> for ms in (1.0, 2.0, 3.0, 4.0, 100.0):
...     h.record(ms)
>>> round(h.mean, 3), h.count
(22.0, 5)
>>> lo, hi = h.percentile_bounds(50)
>>> lo <= 3.0 <= hi and (hi - lo) / lo <= 2**-14
True
>>> g = LatencyHistogram.from_json(h.to_json()); g.merge(h).count
10
>>> bin_value(bin_of(3.0)) <= 3.0 < bin_value(bin_of(3.0) + 1)
True
"""

from __future__ import annotations

import json
import math
from typing import Any

#: Sub-bins per power of two at the finest resolution: ``2**BITS``.
BITS = 14
#: Powers of two covered: values in ``[2**(E_MIN - 1), 2**(E_MAX - 1))`` get their own bins.
E_MIN, E_MAX = -10, 28
#: Bins at the finest resolution: one below the range (zero included), the range, one above.
BINS = 2 + ((E_MAX - E_MIN) << BITS)
#: The last bin's lower edge.
TOP = math.ldexp(0.5, E_MAX)
#: The spouts' resolution (see the module docstring).
SPOUT_BITS = 7
#: The replay's queueing estimate's resolution.
QUEUE_BITS = 10


def bin_of(x):
    """The finest bin of a value (see the module docstring); zero, negatives and NaN go to bin 0, infinity to the
    last. (No annotations: numba compiles it.)"""
    if not x > 0.0:
        return 0
    if x >= TOP:
        return BINS - 1
    m, e = math.frexp(x)  # x = m * 2**e, 0.5 <= m < 1
    if e < E_MIN:
        return 0
    return 1 + ((e - E_MIN) << BITS) + int((m - 0.5) * (2 << BITS))


def coarser(b: int, shift: int) -> int:
    """Bin ``b`` at ``shift`` bits fewer sub-bins per power of two (bin 0 stays 0, the last stays the last)."""
    return ((b - 1) >> shift) + 1 if b > 0 else 0


def bin_value(b: int, bits: int = BITS) -> float:
    """The lower edge of bin ``b`` at ``bits`` (bin ``b + 1``'s is its upper edge; the last bin's is infinite)."""
    sub = 1 << bits
    if b <= 0:
        return 0.0
    if b == 1 + (E_MAX - E_MIN) * sub:
        return TOP
    if b > 1 + (E_MAX - E_MIN) * sub:
        return math.inf
    e, k = divmod(b - 1, sub)
    return math.ldexp(0.5 + k / (2 * sub), E_MIN + e)


class LatencyHistogram:
    """Counts per bin (a dict: only the bins used), and the exact count, sum, smallest and largest value.

    ``scale``: values are binned as ``bin_of(value / scale)`` and reported in their own unit (1: milliseconds;
    the replay's queueing estimate records seconds relative to its service time D, as its own histogram did, so
    a latency of exactly D sits on a bin edge). ``bits``: sub-bins per power of two, at most :data:`BITS`."""

    def __init__(self, scale: float = 1.0, bits: int = BITS) -> None:
        if not scale > 0:
            raise ValueError(f"a histogram's scale must be positive, got {scale}")
        if not 0 <= bits <= BITS:
            raise ValueError(f"bits must be within 0..{BITS}, got {bits}")
        self.scale = float(scale)
        self.bits = bits
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.low = math.inf
        self.high = 0.0

    @classmethod
    def from_bins(cls, buckets: dict[int, int], total: float, low: float, high: float, *, scale: float = 1.0,
                  bits: int = BITS) -> LatencyHistogram:
        """A histogram from counts already binned at ``bits`` (the model's kernel counts in an array)."""
        h = cls(scale, bits)
        h.buckets = {int(b): int(n) for b, n in buckets.items() if n}
        h.count = sum(h.buckets.values())
        h.total, h.low, h.high = float(total), float(low), float(high)
        return h

    def bin(self, value: float) -> int:
        return coarser(bin_of(value / self.scale), BITS - self.bits)

    def record(self, value: float) -> None:
        value = max(0.0, value)
        b = self.bin(value)
        self.buckets[b] = self.buckets.get(b, 0) + 1
        self.count += 1
        self.total += value
        self.low = min(self.low, value)
        self.high = max(self.high, value)

    def add(self, values: Any) -> None:
        """Record a numpy array of values at once (binned as :meth:`record` bins them, vectorised)."""
        import numpy as np

        v = np.maximum(np.asarray(values, dtype=np.float64), 0.0)
        if not len(v):
            return
        x = v / self.scale
        inside = (x > 0.0) & (x < TOP)
        m, e = np.frexp(np.where(inside, x, 1.0))
        fine = 1 + ((e.astype(np.int64) - E_MIN) << BITS) + ((m - 0.5) * (2 << BITS)).astype(np.int64)
        fine = np.where(inside, np.where(e < E_MIN, 0, fine), np.where(x >= TOP, BINS - 1, 0))
        shift = BITS - self.bits
        bins = np.where(fine > 0, ((fine - 1) >> shift) + 1, 0)
        for b, n in zip(*(a.tolist() for a in np.unique(bins, return_counts=True))):
            self.buckets[b] = self.buckets.get(b, 0) + n
        self.count += len(v)
        self.total += float(v.sum())
        self.low = min(self.low, float(v.min()))
        self.high = max(self.high, float(v.max()))

    def _coarsen(self, bits: int) -> None:
        if bits < self.bits:
            shift, old = self.bits - bits, self.buckets
            self.buckets = {}
            for b, n in old.items():
                c = coarser(b, shift)
                self.buckets[c] = self.buckets.get(c, 0) + n
            self.bits = bits

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        """Add ``other``'s values to this one (at the coarser of the two resolutions); returns this one."""
        if other.scale != self.scale:
            raise ValueError(f"cannot merge histograms of scales {self.scale} and {other.scale}")
        self._coarsen(other.bits)
        shift = other.bits - self.bits
        for b, n in other.buckets.items():
            c = coarser(b, shift)
            self.buckets[c] = self.buckets.get(c, 0) + n
        self.count += other.count
        self.total += other.total
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)
        return self

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def percentile_bounds(self, q: float) -> tuple[float, float]:
        """Bounds of the nearest-rank q-th percentile (0 < q <= 100): its bin's edges, clamped to the values."""
        if not self.count:
            return 0.0, 0.0
        rank = max(1, math.ceil(q / 100.0 * self.count))
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= rank:
                break
        lo = min(max(bin_value(b, self.bits) * self.scale, self.low), self.high)
        hi = max(min(bin_value(b + 1, self.bits) * self.scale, self.high), self.low)
        return lo, hi

    def percentile(self, q: float) -> float:
        """The nearest-rank q-th percentile's lower bound (at most one bin below it)."""
        return self.percentile_bounds(q)[0]

    def summary(self) -> dict[str, float]:
        """``{"mean", "p50", "p95", "p99", "max", "count"}``."""
        return {
            "mean": self.mean,
            "p50": self.percentile(50),
            "p95": self.percentile(95),
            "p99": self.percentile(99),
            "max": self.high,
            "count": self.count,
        }

    def to_json(self) -> str:
        return json.dumps({"bits": self.bits, "scale": self.scale, "b": self.buckets, "n": self.count,
                           "sum": self.total, "min": self.low if self.count else 0.0, "max": self.high})

    @classmethod
    def from_json(cls, text: str) -> LatencyHistogram:
        data = json.loads(text)
        if "bits" not in data:
            raise ValueError("not a keysplit.latency histogram (one written before the bins changed?)")
        h = cls.from_bins({int(b): int(n) for b, n in data["b"].items()}, data["sum"], data["min"], data["max"],
                          scale=data["scale"], bits=int(data["bits"]))
        h.count = int(data["n"])
        if not h.count:
            h.low = math.inf
        return h
