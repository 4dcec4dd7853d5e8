"""``keysplit advise``: measure a dataset, simulate a shortlist of groupings at each W, recommend one.

What is measured (:func:`profile`), in numpy over the key ids of every message:

- messages, distinct keys, p1 and p2 (the two largest key frequencies), the keys above 1/(5W) (D-/W-Choices'
  head threshold), whether records carry timestamps;
- drift: the stream cut into 10 windows, each window's hot set (keys above 1/(5W) in that window) and the
  weighted Jaccard overlap ``sum min(f_a, f_b) / sum max(f_a, f_b)`` over the union of two windows' hot sets,
  between the first and the last tenth and between consecutive windows (1.0 when neither has a hot key).

What is simulated (:func:`advise`): kg, pkg, pkg:d=D and salt:k=D (D = the choices the top key needs,
``ceil(p1*W) + 1``, at least 3) on the numba fast path over the whole stream; those and potc, dchoices,
wchoices (both ``capacity=auto``), fish and gedik, whose reference loop is Python, over an evenly strided
sample of at most ``sample`` messages (the same sample for all, so the comparison is like for like and keeps
the stream's order, hence its drift). The
aggregation cost is the partial counts a downstream aggregator merges per key per flush: the distinct
(key, worker) pairs of each flush window divided by the distinct keys in it (1 for a grouping that never
splits a key), with a flush every ``flush`` messages of the sample.

The recommendation applies the papers' rules, in this order, to the candidates whose dist_cost fits
``memory`` (the largest acceptable dist_cost, memory relative to KG):

1. no splitting fits the budget -> the best of the groupings that keep one worker per key (kg, potc, gedik;
   Gedik's partitioning functions balance without splitting);
2. KG's imbalance is negligible (<= ``TOLERANCE``) -> kg: splitting would only add memory and aggregation;
3. the hot set drifts (overlap < ``DRIFT_OVERLAP``) and FISH balances -> fish (decayed epoch counts follow
   the hot keys, FISH §2.3);
4. p1 <= 2/W -> pkg (PKG balances while the top key fits on two workers, PKG §5);
5. otherwise more choices: of pkg:d=D, dchoices and wchoices, the cheapest in memory among those that balance
   (D-/W-Choices give more choices only to the head: few very hot keys at large W).

"Balances" means an average imbalance fraction at most ``max(TOLERANCE, 2 x the best candidate's)``.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from keysplit.datasets import Dataset, Record
from keysplit.datasets import generators as _generators
from keysplit.errors import SpecError

#: An average imbalance fraction this small is negligible (1% of the messages above the mean load).
TOLERANCE = 0.01
#: Hot-set overlap below this means the hot keys drift.
DRIFT_OVERLAP = 0.5
WINDOWS = 10
SAMPLE = 50_000
FLUSH = 1000
NO_SPLIT = ("kg", "potc", "gedik")
#: D-/W-Choices with the sketch sized to their threshold (ceil(1/theta) counters): with the default 100 counters
#: they cannot tell hot from cold past W = 20, W-Choices turns into shuffle grouping (FISH's "W-C100") and
#: D-Choices recomputes its head at nearly every message.
REFERENCE = ("potc", "dchoices:capacity=auto", "wchoices:capacity=auto", "fish", "gedik")


@dataclass
class Encoded:
    """Every message as a dense key id, its record's source position, and the key names."""

    names: list[str]
    kid: np.ndarray  # int32 per message
    record: np.ndarray  # int64 per message: the index of its record (sources are dealt by record)
    timestamps: bool


def encode(dataset: Dataset) -> Encoded:
    """One pass over the dataset: numpy for the stock generators, a dict over the records otherwise."""
    if isinstance(dataset, _generators.Generator) and type(dataset).records is _generators.Generator.records:
        idx = np.concatenate(list(dataset.index_chunks()) or [np.zeros(0, np.int64)])
        if idx.size and idx.min() >= 0 and idx.max() < _generators.FLAT_INDEX_LIMIT:
            present = np.zeros(int(idx.max()) + 1, dtype=bool)
            present[idx] = True
            uniq = np.flatnonzero(present)
            remap = np.cumsum(present, dtype=np.int64) - 1
            kid = remap[idx].astype(np.int32)
        else:
            uniq, inverse = np.unique(idx, return_inverse=True)
            kid = inverse.reshape(-1).astype(np.int32)
        names = [dataset.key_name(i) for i in uniq.tolist()]
        return Encoded(names, kid, np.arange(len(kid), dtype=np.int64), False)
    ids: dict[str, int] = {}
    kids: list[int] = []
    recs: list[int] = []
    stamped = False
    for index, (ts, keys) in enumerate(dataset.records()):
        stamped = stamped or ts is not None
        for key in keys:
            kids.append(ids.setdefault(key, len(ids)))
            recs.append(index)
    return Encoded(list(ids), np.array(kids, dtype=np.int32), np.array(recs, dtype=np.int64), stamped)


def overlap(a: np.ndarray, b: np.ndarray, theta: float) -> float:
    """Weighted Jaccard of two windows' hot sets (keys with frequency > theta), from their key counts."""
    fa, fb = a / max(a.sum(), 1), b / max(b.sum(), 1)
    hot = (fa > theta) | (fb > theta)
    if not hot.any():
        return 1.0
    return float(np.minimum(fa[hot], fb[hot]).sum() / np.maximum(fa[hot], fb[hot]).sum())


def profile(enc: Encoded, workers: int) -> dict:
    """The dataset's measures at ``workers`` workers (see the module docstring)."""
    m, keys = len(enc.kid), len(enc.names)
    counts = np.bincount(enc.kid, minlength=keys)
    top = np.sort(counts)[::-1][:2] / max(m, 1)
    theta = 1.0 / (5 * workers)
    windows = [np.bincount(part, minlength=keys) for part in np.array_split(enc.kid, WINDOWS)] if m else []
    consecutive = [overlap(a, b, theta) for a, b in itertools.pairwise(windows)]
    return {
        "messages": m,
        "keys": keys,
        "p1": float(top[0]) if len(top) else 0.0,
        "p2": float(top[1]) if len(top) > 1 else 0.0,
        "hot_keys": int((counts > theta * m).sum()),
        "hot_threshold": theta,
        "drift_first_last": overlap(windows[0], windows[-1], theta) if windows else 1.0,
        "drift_consecutive_min": min(consecutive, default=1.0),
        "drift_consecutive_mean": float(np.mean(consecutive)) if consecutive else 1.0,
        "timestamps": enc.timestamps,
    }


def choices_needed(p1: float, workers: int) -> int:
    """The d that holds the top key: its share must fit on d workers (p1 <= d/W), plus one for the rest."""
    return max(3, min(workers, math.ceil(p1 * workers - 1e-9) + 1))


class _Sample(Dataset):
    """The strided sample as a dataset of one-key records (the reference groupings' input)."""

    def __init__(self, keys: list[str], spec: str) -> None:
        self._keys = keys
        self.spec = spec

    def records(self) -> Iterator[Record]:
        for key in self._keys:
            yield None, [key]


@dataclass
class Candidate:
    spec: str
    imbalance: float  #: avg imbalance fraction on the sample
    dist_cost: float
    aggregation: float  #: partial counts per key per flush, on the sample
    full_imbalance: float | None = None  #: avg imbalance fraction on the whole stream (fast path only)
    full_dist_cost: float | None = None
    note: str = ""


@dataclass
class Advice:
    workers: int
    recommended: str
    reason: str
    profile: dict
    candidates: list[Candidate] = field(default_factory=list)

    def to_json(self) -> dict:
        out = asdict(self)
        out["candidates"] = [asdict(c) for c in self.candidates]
        return out


def aggregation_cost(kid: np.ndarray, out: np.ndarray, workers: int, flush: int) -> float:
    """Distinct (key, worker) pairs per distinct key, averaged over flush windows of ``flush`` messages."""
    pairs = kid.astype(np.int64) * workers + out
    ratios = []
    for start in range(0, len(kid), flush):
        p = np.unique(pairs[start:start + flush])
        ratios.append(len(p) / len(np.unique(p // workers)))
    return float(np.mean(ratios)) if ratios else 1.0


def route_sample(ds: Dataset, spec: str, workers: int, sources: int) -> np.ndarray:
    """Every sampled message's worker through the reference loop (probes read the true loads, as ``simulate``
    feeds them); the fast-path specs are routed by ``simulate_candidates`` itself."""
    from keysplit.groupings.hosting import prepare_groupings, route

    loads = [0] * workers
    groupings = prepare_groupings(spec, workers, sources, ds, lambda: loads[:])
    routed = []
    for _, _, _, w in route(ds, groupings):
        loads[w] += 1
        routed.append(w)
    return np.array(routed, dtype=np.int64)


def sample_metrics(kid: np.ndarray, out: np.ndarray, workers: int) -> tuple[float, float]:
    """avg imbalance fraction (checkpoints every m/1000 messages) and dist_cost of a routed stream, with
    ``keysplit.metrics``' definitions."""
    from keysplit.metrics import default_checkpoint

    m = len(out)
    step = default_checkpoint(m)
    loads = np.zeros(workers, dtype=np.int64)
    fractions = []
    for t in range(step, m + 1, step):
        loads += np.bincount(out[t - step:t], minlength=workers)
        fractions.append((loads.max() - t / workers) / t)
    pairs = np.unique(kid.astype(np.int64) * workers + out)
    keys = len(np.unique(kid))
    return (float(np.mean(fractions)) if fractions else 0.0), (len(pairs) / keys if keys else 0.0)


def shortlist(p1: float, workers: int) -> tuple[list[str], list[str]]:
    """(fast-path specs, reference-only specs) to simulate at ``workers``."""
    fast = ["kg"]
    if workers >= 2:
        fast.append("pkg")
    d = choices_needed(p1, workers)
    if workers >= 3 and d > 2:
        fast += [f"pkg:d={d}", f"salt:k={d}"]
    reference = [s for s in REFERENCE if workers >= 2 or s in ("gedik",)]
    return fast, reference


def simulate_candidates(enc: Encoded, workers: int, sources: int, sample: int, flush: int,
                        full: bool = True) -> list[Candidate]:
    """Every shortlisted spec on the sample, and the fast ones also over the whole stream."""
    from keysplit.metrics import default_checkpoint
    from keysplit.simulator.fast import names_table, simulate_ids

    m = len(enc.kid)
    prof_p1 = float(np.bincount(enc.kid).max() / m) if m else 0.0
    fast_specs, ref_specs = shortlist(prof_p1, workers)
    step = max(1, math.ceil(m / sample))
    positions = np.arange(0, m, step)
    s_kid = enc.kid[positions]
    s_keys = [enc.names[k] for k in s_kid.tolist()]
    ds = _Sample(s_keys, "sample")
    out: list[Candidate] = []
    d_max = max([2] + [int(s.split("=")[1]) for s in fast_specs if "=" in s])
    d_max = min(d_max, workers)
    table = names_table(enc.names, d_max, workers, True)
    src_full = (enc.record % sources).astype(np.int32)
    s_src = (np.arange(len(s_kid)) % sources).astype(np.int32)  # the sample's records, round-robin
    for spec in fast_specs + ref_specs:
        if spec in fast_specs:
            routed = simulate_ids(spec, table, s_kid, s_src, workers, sources, 1 << 62)[1].astype(np.int64)
        else:
            routed = route_sample(ds, spec, workers, sources)
        imb, cost = sample_metrics(s_kid, routed, workers)
        cand = Candidate(spec, imb, cost, aggregation_cost(s_kid, routed, workers, flush))
        if full and spec in fast_specs:
            res, _ = simulate_ids(spec, table, enc.kid, src_full, workers, sources, default_checkpoint(m))
            cand.full_imbalance, cand.full_dist_cost = res.avg_imbalance_fraction, res.dist_cost
        out.append(cand)
    return out


def recommend(prof: dict, cands: Sequence[Candidate], workers: int, memory: float) -> tuple[str, str]:
    """The papers' rules (module docstring) over the simulated candidates: (spec, reason)."""
    p1 = prof["p1"]
    for c in cands:
        if c.spec == "pkg" and p1 > 2 / workers:
            c.note = f"ruled out: p1 = {p1:.3f} > 2/W = {2 / workers:.3f}"
        elif c.dist_cost > memory + 1e-12:
            c.note = f"over the memory budget ({c.dist_cost:.2f} > {memory:g})"
    ok = [c for c in cands if not c.note]
    if not ok:
        raise SpecError(f"no candidate fits --memory {memory:g} at W={workers}")
    best = min(c.imbalance for c in ok)
    limit = max(TOLERANCE, 2 * best)
    by = {c.spec: c for c in ok}

    def pick(names: Sequence[str]) -> Candidate | None:
        pool = [c for c in ok if c.spec in names or c.spec.split(":")[0] in names]
        if not pool:
            return None
        balanced = [c for c in pool if c.imbalance <= limit]  # the cheapest in memory among those that balance
        return min(balanced or pool, key=lambda c: (c.dist_cost, c.imbalance) if balanced else (c.imbalance,))

    splitting = [c for c in ok if c.dist_cost > 1.0 + 1e-9]
    if not splitting:
        c = pick(NO_SPLIT)
        assert c is not None
        return c.spec, (f"the memory budget {memory:g} leaves only groupings that keep each key on one worker; "
                        f"{c.spec} balances them best (Gedik's partitioning functions move keys instead of "
                        "splitting them)" if c.spec == "gedik" else
                        f"the memory budget {memory:g} leaves only groupings that keep each key on one worker; "
                        f"{c.spec} balances them best")
    kg = by.get("kg")
    if kg is not None and kg.imbalance <= TOLERANCE:
        return "kg", (f"skew is negligible: KG's imbalance is {kg.imbalance:.1e} (<= {TOLERANCE:g}) with p1 = "
                      f"{p1:.3f}; splitting keys would only add memory and aggregation")
    drift = min(prof["drift_first_last"], prof["drift_consecutive_min"])
    fish = by.get("fish")
    if drift < DRIFT_OVERLAP and prof["hot_keys"] and fish is not None and fish.imbalance <= limit:
        return "fish", (f"the hot set drifts (overlap {drift:.2f} < {DRIFT_OVERLAP}): FISH's decayed epoch counts "
                        f"follow the new hot keys (imbalance {fish.imbalance:.1e})")
    pkg = by.get("pkg")
    if p1 <= 2 / workers and pkg is not None and pkg.imbalance <= limit:
        return "pkg", (f"p1 = {p1:.3f} <= 2/W = {2 / workers:.3f}: two choices hold the hottest key and PKG "
                       f"balances (imbalance {pkg.imbalance:.1e}) at {pkg.dist_cost:.2f}x KG's memory")
    more = [c for c in ok if c.spec.startswith(("pkg:d=", "dchoices", "wchoices")) and c.imbalance <= limit]
    if more:
        c = pick([m.spec for m in more])
        assert c is not None
        head = f"{prof['hot_keys']} key(s) above 1/(5W)"
        if c.spec.startswith("pkg"):
            why = "every key gets the choices the top key needs"
        else:
            why = "only the head gets more choices (few very hot keys at this W), the tail keeps two"
        return c.spec, (f"p1 = {p1:.3f} > 2/W = {2 / workers:.3f}: two choices cannot hold the top key; {head}; "
                        f"{c.spec} balances (imbalance {c.imbalance:.1e}) at {c.dist_cost:.2f}x KG's memory: {why}")
    c = min(ok, key=lambda c: c.imbalance)
    return c.spec, f"no rule applies cleanly; {c.spec} has the lowest imbalance ({c.imbalance:.1e}) within budget"


def advise(dataset: Dataset, workers: Sequence[int], sources: int = 5, memory: float = math.inf,
           sample: int = SAMPLE, flush: int = FLUSH) -> tuple[list[Advice], dict]:
    """One Advice per W, and timings (seconds) of the measuring and simulating phases."""
    if memory < 1.0:
        raise SpecError(f"--memory {memory:g} is below 1.0: no grouping holds a key on fewer than one worker")
    started = time.perf_counter()
    enc = encode(dataset)
    if not len(enc.kid):
        raise SpecError(f"dataset {dataset.spec!r} has no messages")
    measured = time.perf_counter()
    out = []
    for w in workers:
        prof = profile(enc, w)
        cands = simulate_candidates(enc, w, sources, sample, flush)
        spec, reason = recommend(prof, cands, w, memory)
        out.append(Advice(w, spec, reason, prof, cands))
    done = time.perf_counter()
    return out, {"measure_seconds": measured - started, "simulate_seconds": done - measured}
