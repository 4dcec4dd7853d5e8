"""Synthetic skewed streams, seeded and streamed in constant memory (O(keys), never O(messages)).

Each record carries one key and no timestamp. Randomness comes from numpy's PCG64 seeded by ``seed``, so
the same spec yields the same stream on every machine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import numpy as np

from keysplit.datasets.base import Dataset, Record
from keysplit.datasets.countries import COUNTRIES
from keysplit.errors import SpecError
from keysplit.specs import Param

_CHUNK = 1 << 16

#: Most distinct keys of a Zipf or drift stream: the CDF table is held in memory, 8 bytes a key (800 MB here,
#: and about three times that while it is built), so a larger ``keys`` would exhaust memory, not stream.
MAX_ZIPF_KEYS = 100_000_000


#: The most messages a generator makes: ten billion, hours of work for any consumer (the simulator's fast path
#: routes about 10 million a second) and about 70 GB as a file; more is a typo (``messages=1e11``), refused
#: before any of it is spent.
MAX_MESSAGES = 10_000_000_000


def _count(help_: str, default: int) -> Param:
    return Param(int, default, help_, lambda v: 1 <= v <= MAX_MESSAGES, f"1 to {MAX_MESSAGES:,}")


def _seed() -> Param:
    # numpy's SeedSequence takes only non-negative integers.
    return Param(int, 1, "random seed", lambda v: v >= 0, "at least 0")


def _real(default: float, help_: str, check: Callable[[float], bool] = lambda v: True, rule: str = "") -> Param:
    """A float parameter. float() accepts nan and inf, which no generator can sample with, so every float
    parameter must also be finite."""
    return Param(float, default, help_, lambda v: math.isfinite(v) and check(v), f"a finite number {rule}".strip())


class Generator(Dataset):
    """Base of the generators: parameter table, seeded RNG, and chunked sampling of key indices."""

    name = ""
    summary = ""
    PARAMS: dict[str, Param] = {}

    def __init__(self, **params) -> None:
        self.params = params
        self.spec = self.name + ":" + ",".join(f"{k}={v}" for k, v in params.items())

    def key_indices(self, rng: np.random.Generator, n: int, start: int) -> np.ndarray:  # pragma: no cover
        """``n`` key indices for messages ``start .. start+n-1``."""
        raise NotImplementedError

    def key_name(self, index: int) -> str:
        return f"k{index}"

    def index_chunks(self) -> Iterator[np.ndarray]:
        """The messages' key indices (int64), chunk by chunk, drawn exactly as ``records`` draws them."""
        rng = np.random.Generator(np.random.PCG64(self.params["seed"]))
        total = self.params["messages"]
        done = 0
        while done < total:
            n = min(_CHUNK, total - done)
            indices = np.asarray(self.key_indices(rng, n, done))
            if indices.dtype.kind not in "iu":
                indices = np.array([int(i) for i in indices.tolist()], dtype=np.int64)
            yield indices
            done += n

    def records(self) -> Iterator[Record]:
        names: dict[int, str] = {}
        for indices in self.index_chunks():
            for i in indices.tolist():
                name = names.get(i)
                if name is None:
                    name = names[i] = self.key_name(i)
                yield None, [name]

    def message_count(self) -> int:
        return self.params["messages"]

    def stats(self) -> dict:
        """``Dataset.stats`` without a Python loop per message: key indices are counted in numpy (one
        record per message), then merged by key name, so two indices with one name still count as one key."""
        if type(self).records is not Generator.records:  # a subclass with its own records: the generic pass
            return super().stats()
        counts = count_indices(self.index_chunks())
        by_name: dict[str, int] = {}
        for index, count in zip(*counts):
            name = self.key_name(index)
            by_name[name] = by_name.get(name, 0) + count
        messages = self.params["messages"]
        return {
            "spec": self.spec,
            "records": messages,
            "messages": messages,
            "keys": len(by_name),
            "p1": max(by_name.values(), default=0) / messages,
        }


#: Indices below this are counted with a flat bincount; larger ones through np.unique.
FLAT_INDEX_LIMIT = 1 << 24


def count_indices(chunks: Iterator[np.ndarray]) -> tuple[list[int], list[int]]:
    """The distinct indices over all ``chunks`` and how often each occurs (both as Python ints)."""
    flat = np.zeros(0, dtype=np.int64)
    other: dict[int, int] = {}
    for indices in chunks:
        if indices.size == 0:
            continue
        small = (indices >= 0) & (indices < FLAT_INDEX_LIMIT)
        inside = indices[small] if not small.all() else indices
        if inside.size:
            add = np.bincount(inside, minlength=len(flat))
            if len(add) > len(flat):
                add[: len(flat)] += flat
                flat = add
            else:
                flat += add
        if not small.all():
            uniq, cnt = np.unique(indices[~small], return_counts=True)
            for i, c in zip(uniq.tolist(), cnt.tolist()):
                other[i] = other.get(i, 0) + c
    nz = np.flatnonzero(flat)
    return nz.tolist() + list(other), flat[nz].tolist() + list(other.values())


def zipf_cdf(z: float, keys: int) -> np.ndarray:
    """Cumulative probabilities of ranks 1..keys with P(r) proportional to 1/r^z."""
    weights = 1.0 / np.power(np.arange(1, keys + 1, dtype=np.float64), z)
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def guide_table(cdf: np.ndarray) -> np.ndarray:
    """Chen & Asau's guide table: entry j is the first index whose cumulative probability exceeds j/M."""
    cells = min(4 * len(cdf), 1 << 22)
    return np.searchsorted(cdf, np.arange(cells) / cells, side="right").astype(np.int64)


def inverse_cdf(cdf: np.ndarray, guide: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``np.searchsorted(cdf, u, side="right")`` (the first index whose cumulative probability exceeds u),
    five times faster: start from u's guide-table cell and step forward over the few ranks inside it."""
    last = len(cdf) - 1
    r = guide[np.minimum((u * len(guide)).astype(np.int64), len(guide) - 1)]
    # Rounding in u * M can land one cell too far: step back where the previous rank already exceeds u.
    back = np.flatnonzero((r > 0) & (cdf[np.maximum(r - 1, 0)] > u))
    while back.size:
        r[back] -= 1
        back = back[(r[back] > 0) & (cdf[np.maximum(r[back] - 1, 0)] > u[back])]
    ahead = np.flatnonzero((r <= last) & (cdf[np.minimum(r, last)] <= u))
    while ahead.size:
        r[ahead] += 1
        ahead = ahead[(r[ahead] <= last) & (cdf[np.minimum(r[ahead], last)] <= u[ahead])]
    return r


class Zipf(Generator):
    """``zipf:z=,keys=,messages=,seed=``: key ``k<r>`` of rank r (1-based) has probability ~ 1/r^z."""

    name = "zipf"
    summary = "Zipf: rank r has probability proportional to 1/r^z (PKG's ZF)"
    PARAMS = {
        "z": _real(1.0, "Zipf exponent", lambda v: v >= 0, "at least 0"),
        "keys": Param(int, 10_000, "distinct keys", lambda v: 1 <= v <= MAX_ZIPF_KEYS,
                      f"1 to {MAX_ZIPF_KEYS:,}: the CDF table is held in memory, 8 bytes a key"),
        "messages": _count("messages", 1_000_000),
        "seed": _seed(),
    }

    def __init__(self, **params) -> None:
        super().__init__(**params)
        self._cdf = zipf_cdf(params["z"], params["keys"])
        self._guide = guide_table(self._cdf)

    def key_indices(self, rng: np.random.Generator, n: int, start: int) -> np.ndarray:
        ranks = inverse_cdf(self._cdf, self._guide, rng.random(n)) + 1
        return np.minimum(ranks, self.params["keys"])


class Drift(Zipf):
    """``drift:z=,keys=,messages=,seed=,change=,shift=``: time-evolving hot keys (the FISH paper's setting).

    The first ``change`` fraction of messages follows one Zipf ranking; after it the ranking is rotated by
    ``shift`` (rank r now names key ``k<((r-1+shift) mod keys)+1>``), so yesterday's cold keys become hot.
    ``phases`` > 2 repeats the rotation at evenly spaced points instead.
    """

    name = "drift"
    summary = "time-evolving Zipf: the hot keys change part-way through (FISH)"
    PARAMS = {
        **Zipf.PARAMS,
        "change": _real(0.8, "fraction of messages before the ranking changes (2 phases)", lambda v: 0 < v < 1,
                        "strictly between 0 and 1"),
        "phases": Param(int, 2, "number of rankings over the stream", lambda v: v >= 2, "at least 2"),
        "shift": Param(int, 0, "rotation of the ranking at each change (0 = keys/2)", lambda v: v >= 0,
                       "at least 0"),
    }

    def __init__(self, **params) -> None:
        if params["phases"] > params["messages"]:
            raise SpecError(f"drift: phases={params['phases']} exceeds messages={params['messages']}")
        super().__init__(**params)

    def _phase_start(self, p: int) -> int:
        """The first message of phase ``p``."""
        m, phases = self.params["messages"], self.params["phases"]
        if phases == 2:
            return int(m * self.params["change"]) if p else 0
        return m * p // phases

    def _phase_of(self, i: int) -> int:
        """The phase of message ``i``: the last p with ``_phase_start(p) <= i`` (solved for p, not searched)."""
        m, phases = self.params["messages"], self.params["phases"]
        if phases == 2:
            return int(i >= self._phase_start(1))
        return ((i + 1) * phases - 1) // m

    def key_indices(self, rng: np.random.Generator, n: int, start: int) -> np.ndarray:
        ranks = super().key_indices(rng, n, start) - 1
        keys = self.params["keys"]
        shift = (self.params["shift"] or keys // 2) % keys
        # Only the phases this chunk touches (at most n of them), so any ``phases`` costs O(n) per chunk.
        first, last = self._phase_of(start), self._phase_of(start + n - 1)
        starts = np.asarray([self._phase_start(p) for p in range(first + 1, last + 1)], dtype=np.int64)
        phase = first + np.searchsorted(starts, np.arange(start, start + n), side="right")
        # Reduced mod keys first, so the product stays far inside int64 (keys <= MAX_ZIPF_KEYS).
        return (ranks + (phase % keys) * shift) % keys + 1


class LogNormal(Generator):
    """``lognormal:mu=,sigma=,messages=,seed=``: key = round(X), X ~ LogNormal(mu, sigma) (PKG's LN1/LN2).

    Rounding is the reading that reproduces the paper's Table 1: LN1 (mu=1.789, sigma=2.366) gives
    p1 = P(X < 0.5) = 14.71% and LN2 (mu=2.245, sigma=1.133) gives p1 = P(2.5 <= X < 3.5) = 7.01%.
    """

    name = "lognormal"
    summary = "log-normal: key = round(exp(N(mu, sigma))) (PKG's LN1 mu=1.789 sigma=2.366, LN2 mu=2.245 sigma=1.133)"
    PARAMS = {
        "mu": _real(1.789, "mean of the underlying normal"),
        "sigma": _real(2.366, "standard deviation of the underlying normal", lambda v: v > 0, "above 0"),
        "messages": _count("messages", 1_000_000),
        "seed": _seed(),
    }

    def key_indices(self, rng: np.random.Generator, n: int, start: int) -> np.ndarray:
        values = rng.lognormal(self.params["mu"], self.params["sigma"], n)
        return np.rint(np.minimum(values, 2.0**62)).astype(np.int64)


class CountrySkew(Generator):
    """``country-skew:ratio=,messages=,seed=``: DKG's synthetic data over 204 country names.

    A ``ratio`` share of messages carry the hot country (``hot``, default United States); the rest are
    uniform over the other 203, so p1 = ratio (for ratio >= 1/204).
    """

    name = "country-skew"
    summary = "DKG's 204 countries: `ratio` of messages carry one hot country, the rest uniform"
    PARAMS = {
        "ratio": _real(0.8, "share of messages with the hot country", lambda v: 0 <= v <= 1, "between 0 and 1"),
        "messages": _count("messages", 1_000_000),
        "seed": _seed(),
        "hot": Param(str, "United States", "the hot country", lambda v: v in COUNTRIES, "one of the 204 names"),
    }

    def __init__(self, **params) -> None:
        super().__init__(**params)
        self._hot = COUNTRIES.index(params["hot"])
        self._others = np.array([i for i in range(len(COUNTRIES)) if i != self._hot])

    def key_name(self, index: int) -> str:
        return COUNTRIES[index]

    def key_indices(self, rng: np.random.Generator, n: int, start: int) -> np.ndarray:
        hot = rng.random(n) < self.params["ratio"]
        others = self._others[rng.integers(0, len(self._others), n)]
        return np.where(hot, self._hot, others)


class PageViews(Zipf):
    """``pageviews:z=,keys=,messages=,rate=,seed=``: page views, a CSV of ``(time, page, bytes)`` rows for a toolkit
    topology (topologies/pageviews.py): the pages are Zipf's keys named ``/page/<rank>``, view i comes at time
    i / rate seconds, and its bytes are drawn from a log-normal of median 8 KiB (a second stream of the same seed)."""

    name = "pageviews"
    summary = "page views (time, page, bytes): Zipf pages with log-normal sizes, for a toolkit topology"
    PARAMS = {**Zipf.PARAMS, "keys": Param(int, 2_000, "distinct pages", lambda v: 1 <= v <= MAX_ZIPF_KEYS,
                                           f"1 to {MAX_ZIPF_KEYS:,}"),
              "messages": _count("views", 20_000),
              "rate": _real(1000.0, "views per second (the time column)", lambda v: v > 0, "above 0")}
    #: The columns :meth:`rows` gives, in the order a CSV file has them.
    columns = ("time", "page", "bytes")

    def key_name(self, index: int) -> str:
        return f"/page/{index}"

    def records(self) -> Iterator[Record]:
        rate = self.params["rate"]
        for i, (_, keys) in enumerate(super().records()):
            yield i / rate, keys

    def rows(self) -> Iterator[dict[str, str]]:
        """Each view as its CSV row (text, as a file holds it)."""
        sizes = np.random.Generator(np.random.PCG64(self.params["seed"] + 1))
        chunk: list[int] = []
        for i, (ts, keys) in enumerate(self.records()):
            if i % _CHUNK == 0:
                chunk = np.maximum(1, sizes.lognormal(math.log(8192), 1.0, _CHUNK)).astype(np.int64).tolist()
            yield {"time": repr(ts), "page": keys[0], "bytes": str(chunk[i % _CHUNK])}


GENERATORS: dict[str, type[Generator]] = {g.name: g for g in (Zipf, LogNormal, Drift, CountrySkew, PageViews)}
