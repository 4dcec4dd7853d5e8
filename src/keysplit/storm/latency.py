"""A mergeable latency histogram: log-spaced buckets, so spouts record locally and the run merges them.

Bucket ``b`` holds latencies in ``[BASE * GROWTH**b, BASE * GROWTH**(b+1))`` milliseconds (``b = -1`` holds
everything below ``BASE``). With ``GROWTH = 1.02`` a percentile is within 2% of the true value; merging two
histograms is adding their bucket counts, so the result is the same as recording everything in one place.
The mean is exact (sum / count).

>>> h = LatencyHistogram()
>>> for ms in (1.0, 2.0, 3.0, 4.0, 100.0):
...     h.record(ms)
>>> round(h.mean, 3), h.count
(22.0, 5)
>>> abs(h.percentile(50) - 3.0) / 3.0 < 0.02
True
>>> g = LatencyHistogram.from_json(h.to_json()); g.merge(h); g.count
10
"""

from __future__ import annotations

import json
import math

BASE = 0.01  # ms: the smallest latency resolved
GROWTH = 1.02
_LOG_GROWTH = math.log(GROWTH)


class LatencyHistogram:
    """Counts of latencies (milliseconds) per log-spaced bucket, with the exact sum for the mean."""

    def __init__(self) -> None:
        self.buckets: dict[int, int] = {}
        self.count = 0
        self.total_ms = 0.0
        self.max_ms = 0.0

    @staticmethod
    def bucket_of(ms: float) -> int:
        if ms < BASE:
            return -1
        return int(math.log(ms / BASE) / _LOG_GROWTH)

    @staticmethod
    def bucket_mid(b: int) -> float:
        """A representative value of bucket ``b``: the geometric middle of its bounds."""
        if b < 0:
            return BASE / 2
        return BASE * GROWTH ** (b + 0.5)

    def record(self, ms: float) -> None:
        ms = max(0.0, ms)
        b = self.bucket_of(ms)
        self.buckets[b] = self.buckets.get(b, 0) + 1
        self.count += 1
        self.total_ms += ms
        if ms > self.max_ms:
            self.max_ms = ms

    def merge(self, other: LatencyHistogram) -> None:
        for b, n in other.buckets.items():
            self.buckets[b] = self.buckets.get(b, 0) + n
        self.count += other.count
        self.total_ms += other.total_ms
        self.max_ms = max(self.max_ms, other.max_ms)

    @property
    def mean(self) -> float:
        return self.total_ms / self.count if self.count else 0.0

    def percentile(self, q: float) -> float:
        """The latency below which ``q`` percent of the recorded values fall (nearest-rank)."""
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(self.count * q / 100.0))
        seen = 0
        for b in sorted(self.buckets):
            seen += self.buckets[b]
            if seen >= rank:
                return min(self.bucket_mid(b), self.max_ms)
        return self.max_ms  # pragma: no cover - rank <= count always stops the loop

    def summary(self) -> dict[str, float]:
        """``{"mean", "p50", "p95", "p99", "max", "count"}`` in milliseconds."""
        return {
            "mean": self.mean,
            "p50": self.percentile(50),
            "p95": self.percentile(95),
            "p99": self.percentile(99),
            "max": self.max_ms,
            "count": self.count,
        }

    def to_json(self) -> str:
        return json.dumps({"b": self.buckets, "n": self.count, "sum": self.total_ms, "max": self.max_ms})

    @classmethod
    def from_json(cls, text: str) -> LatencyHistogram:
        data = json.loads(text)
        h = cls()
        h.buckets = {int(b): int(n) for b, n in data["b"].items()}
        h.count = int(data["n"])
        h.total_ms = float(data["sum"])
        h.max_ms = float(data["max"])
        return h
