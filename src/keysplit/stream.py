"""The rules of a stream that every host follows: the simulator, the Spark replay and the Storm topology.

Records are dealt to sources the way spouts and shuffle grouping do in the topology: round-robin
(``split="shuffle"``) or by the hash of the record's first key (``split="key"``, the PKG paper's
skew-at-sources experiment, Fig. 8). Event time is the record's timestamp, or ``sequence / rate`` where the
sequence counts messages (keys) from 0 over the whole stream. A :class:`Resize` changes the worker count just
before a given message. How a host wires its groupings to these rules is :mod:`keysplit.groupings.hosting`.

Each rule is written once, as a scalar function for hosts that walk messages one at a time and a vectorised
(numpy) twin beside it for hosts that work on arrays (the simulator's chunks, the replay's partitions):
:func:`source_of` / :func:`sources_of` with :func:`key_source` / :func:`key_sources`, and :func:`event_time` /
:func:`event_times`. ``tests/core/test_stream.py`` checks each twin against its scalar.

This module imports no grouping, no simulator and no Storm code: every layer may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from keysplit.errors import SpecError
from keysplit.hashing import BASE_SEED, hash32

DEFAULT_RATE = 10_000.0
SPLITS = ("shuffle", "key")
#: How a topology's router sends words to a counter by default (``keysplit.batch``, ``keysplit.batch_ms``; the replay
#: models the same): up to this many in one tuple, or once the first waited this many ms (docs/design/batches.md).
DEFAULT_BATCH = 100
DEFAULT_BATCH_MS = 20.0
#: Seed of the hash that deals records to sources under ``split="key"`` (distinct from routing seeds).
SPLIT_SEED = BASE_SEED + 500


def source_of(index: int, first_key: str, sources: int, split: str) -> int:
    """The source (spout-side task) that record number ``index`` goes to."""
    if split == "shuffle":
        return index % sources
    return key_source(first_key, sources)


def key_source(first_key: str, sources: int) -> int:
    """The source of a record whose first key is ``first_key`` under ``split="key"``: murmur3 with
    :data:`SPLIT_SEED`, mod S."""
    return hash32(first_key, SPLIT_SEED) % sources


def sources_of(indices: np.ndarray, first_key_sources: np.ndarray | None, sources: int, split: str) -> np.ndarray:
    """:func:`source_of` of records number ``indices``, vectorised (int64): ``first_key_sources`` holds the
    :func:`key_source` of each record's first key (:func:`key_sources`; read under ``split="key"`` only)."""
    if split == "shuffle":
        return np.asarray(indices, dtype=np.int64) % sources
    if first_key_sources is None:
        raise ValueError('split="key" needs the sources of the records\' first keys')
    return np.asarray(first_key_sources, dtype=np.int64)


def key_sources(keys: Sequence[str], sources: int,
                hash_many: Callable[[Sequence[str], int], np.ndarray] | None = None) -> np.ndarray:
    """:func:`key_source` of every key, vectorised (int32). ``hash_many(keys, seed)``, when given, is a batch of
    ``hashing.hash32`` (the simulator passes its compiled one, ``simulator.hashing_batch.hash_many``); else one
    murmur3 call a key.

    >>> keys = ["a", "storm", "clé"]
    >>> key_sources(keys, 5).tolist() == [key_source(k, 5) for k in keys]
    True
    """
    if hash_many is not None:
        hashes = np.asarray(hash_many(keys, SPLIT_SEED), dtype=np.int64)
    else:
        hashes = np.fromiter((hash32(k, SPLIT_SEED) for k in keys), dtype=np.int64, count=len(keys))
    return (hashes % sources).astype(np.int32)


def event_time(ts: float | None, sequence: int, rate: float) -> float:
    """``now`` for a message: its record's timestamp, else its sequence number over the rate."""
    return ts if ts is not None else sequence / rate


def event_times(sequence: np.ndarray, rate: float, ts: np.ndarray | None = None,
                has_ts: np.ndarray | None = None) -> np.ndarray:
    """:func:`event_time` of every message, vectorised (float64): ``sequence`` their sequence numbers, ``ts`` their
    records' timestamps (None: no timestamps) and ``has_ts`` which of them hold one (None: all do).

    >>> event_times(np.arange(3), 2.0, np.array([9.0, 0.0, 7.0]), np.array([True, False, True])).tolist()
    [9.0, 0.5, 7.0]
    """
    t = sequence / rate
    if ts is not None:
        t = ts if has_ts is None else np.where(has_ts, ts, t)
    return t


@dataclass
class Resize:
    """Change the worker count to ``workers`` just before message number ``at`` (0-based)."""

    at: int
    workers: int


def check_checkpoint(checkpoint: int | None, messages: int) -> None:
    """Refuse a checkpoint spacing past the stream's end: no I(t) would be recorded and the average
    imbalance would silently read 0."""
    if checkpoint is not None and checkpoint > messages:
        raise SpecError(f"--checkpoint {checkpoint} exceeds the dataset's {messages:,} messages")
