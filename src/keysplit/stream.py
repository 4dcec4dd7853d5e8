"""The rules of a stream that every host follows: the simulator, the Spark replay and the Storm topology.

Records are dealt to sources the way spouts and shuffle grouping do in the topology: round-robin
(``split="shuffle"``) or by the hash of the record's first key (``split="key"``, the PKG paper's
skew-at-sources experiment, Fig. 8). Event time is the record's timestamp, or ``sequence / rate`` where the
sequence counts messages (keys) from 0 over the whole stream. A :class:`Resize` changes the worker count just
before a given message. How a host wires its groupings to these rules is :mod:`keysplit.groupings.hosting`.

This module imports no grouping, no simulator and no Storm code: every layer may import it.
"""

from __future__ import annotations

from dataclasses import dataclass

import mmh3

from keysplit.errors import SpecError
from keysplit.hashing import BASE_SEED

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
    return mmh3.hash(first_key, SPLIT_SEED, False) % sources


def event_time(ts: float | None, sequence: int, rate: float) -> float:
    """``now`` for a message: its record's timestamp, else its sequence number over the rate."""
    return ts if ts is not None else sequence / rate


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
