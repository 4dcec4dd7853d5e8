"""Per-partition summaries of routed messages, and how the driver combines them.

Each routed partition (a source's messages in sequence order and the worker each went to) yields:

- ``agg``: the K x W matrix of loads at the checkpoints (row j: messages with sequence < (j+1)*c that went
  to each worker, the simulator's ``ImbalanceSeries`` points) and the final per-worker loads; summed over
  partitions they are the global L_i(t);
- ``mask``: per distinct key, the set of workers it reached (a bit mask); OR-ed over partitions per key they
  give the distinct keys per worker (DKG eq. 8's memory) without double-counting a key sent to one worker by
  two sources;
- ``arr``: per worker, the arrival times of its messages, shuffled by worker for the queueing estimate.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from spark_replay.ingest import SubStream

#: Above this many (key, worker) cells a partition finds its pairs by sorting instead of with a bitmap.
_BITMAP_CELLS = 1 << 26


def checkpoint_loads(seq: np.ndarray, workers: np.ndarray, n_workers: int, every: int, rows: int) -> np.ndarray:
    """``M[j, w]`` = messages with ``seq < (j+1)*every`` that went to worker w (this partition's share)."""
    if rows == 0:
        return np.zeros((0, n_workers), dtype=np.int64)
    row = seq // every  # a message first counts at checkpoint row ``seq // every``
    keep = row < rows
    cells = np.bincount(row[keep] * n_workers + workers[keep], minlength=rows * n_workers)
    return np.cumsum(cells.reshape(rows, n_workers), axis=0)


def key_masks(key_ids: np.ndarray, workers: np.ndarray, vocab: list[str], n_workers: int) -> Iterator[tuple[str, int]]:
    """``(key, mask)`` with bit w set when the key went to worker w in this partition."""
    if not len(key_ids):
        return
    cells = key_ids.astype(np.int64) * n_workers + workers
    if len(vocab) * n_workers <= _BITMAP_CELLS:
        seen = np.zeros(len(vocab) * n_workers, dtype=bool)
        seen[cells] = True
        pairs = np.flatnonzero(seen)
    else:
        pairs = np.unique(cells)
    kid = pairs // n_workers
    wid = pairs % n_workers
    starts = np.concatenate(([0], np.flatnonzero(np.diff(kid)) + 1))
    if n_workers <= 63:
        bits = np.left_shift(np.uint64(1), wid.astype(np.uint64))
        masks = np.bitwise_or.reduceat(bits, starts).tolist()
    else:
        ends = np.append(starts[1:], len(pairs))
        wl = wid.tolist()
        masks = []
        for a, b in zip(starts.tolist(), ends.tolist()):
            m = 0
            for w in wl[a:b]:
                m |= 1 << w
            masks.append(m)
    for k, m in zip(kid[starts].tolist(), masks):
        yield vocab[k], int(m)


def distinct_counts(masks: Iterable[int], n_workers: int) -> tuple[np.ndarray, int]:
    """Distinct keys per worker and in all, from one partition of OR-ed masks."""
    values = list(masks)
    per_worker = np.zeros(n_workers, dtype=np.int64)
    if n_workers <= 63:
        arr = np.asarray(values, dtype=np.uint64)
        for w in range(n_workers):
            per_worker[w] = int(((arr >> np.uint64(w)) & np.uint64(1)).sum())
    else:
        for m in values:
            for w in range(n_workers):
                if m >> w & 1:
                    per_worker[w] += 1
    return per_worker, len(values)


def tag_partition(
    routed: tuple[SubStream, np.ndarray, bool], n_workers: int, every: int, rows: int, rate: float,
    arrivals: bool,
) -> Iterator[tuple[str, Any]]:
    """Everything the driver needs from one routed partition, tagged ``agg``, ``mask`` and ``arr``."""
    sub, workers, fast = routed
    workers = workers.astype(np.int64)
    loads = np.bincount(workers, minlength=n_workers)
    yield "agg", (checkpoint_loads(sub.seq, workers, n_workers, every, rows), loads, fast)
    for pair in key_masks(sub.key_ids, workers, sub.vocab, n_workers):
        yield "mask", pair
    if arrivals and len(workers):
        times = sub.now(rate)
        order = np.argsort(workers.astype(np.int16 if n_workers < 32768 else np.int32), kind="stable")
        ordered = times[order]
        bounds = np.concatenate(([0], np.cumsum(loads)))
        for w in np.flatnonzero(loads).tolist():
            yield "arr", (w, ordered[bounds[w]:bounds[w + 1]])


def add_aggs(a: tuple, b: tuple) -> tuple:
    return a[0] + b[0], a[1] + b[1], a[2] or b[2]


def add_distinct(a: tuple, b: tuple) -> tuple:
    return a[0] + b[0], a[1] + b[1]
