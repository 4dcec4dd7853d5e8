"""The dataset fingerprint (``dataset_sha256``): one value for a record stream, whoever reads it and however.

``keysplit run`` computes it from the records it loads into its feed, ``keysplit replay`` on the Spark
executors from the chunks they parsed, in any order and without a pass in the driver; ``keysplit compare``
refuses a run and a replay whose fingerprints differ. So the definition must add up over any partition of
the stream:

- message ``n`` (0-based over the whole stream) of record ``r`` (0-based over the records the dataset yields,
  as the simulator and the feed number them), with key ``k`` and its record's timestamp ``ts`` (or none),
  contributes, for each of two lanes j = 1, 2, ``fmix64(h_j(k) + n*A_j + r*B_j + bits(ts)*C_j + T_j)`` where
  ``h_1, h_2`` are the two halves of ``mmh3.hash128(k, SEED)``, ``bits(ts)`` the IEEE-754 bits of ``ts``,
  ``T_j`` a constant added only when the record has a timestamp, and all arithmetic is mod 2^64;
- a lane is the sum of its terms mod 2^64 (sums commute: executors add their chunks, the driver adds lanes);
- the fingerprint is the sha256 hex digest of ``keysplit-dataset-v2 records=R messages=M lanes=L1,L2``.

Every message's term carries its position, key, record and time, so reordering, moving a record boundary,
changing a key or a time changes the value. It detects accidental differences (two 64-bit lanes), it is not
a cryptographic commitment against someone crafting a collision.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Optional

import mmh3
import numpy as np

SEED = 0x6B657973  # "keys"
VERSION = "keysplit-dataset-v2"

_M = np.uint64(0xFFFFFFFFFFFFFFFF)
_A = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F))
_B = (np.uint64(0x165667B19E3779F9), np.uint64(0x27D4EB2F165667C5))
_C = (np.uint64(0xD6E8FEB86659FD93), np.uint64(0xFF51AFD7ED558CCD))
_T = (np.uint64(0x85EBCA77C2B2AE63), np.uint64(0xC4CEB9FE1A85EC53))
#: Messages per batch when fingerprinting a record stream.
BATCH = 1 << 16


def fmix64(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 64-bit finaliser, on a uint64 array (wrapping arithmetic)."""
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xFF51AFD7ED558CCD)
    x = x ^ (x >> np.uint64(33))
    x = x * np.uint64(0xC4CEB9FE1A85EC53)
    return x ^ (x >> np.uint64(33))


def key_hashes(keys: Iterable[str]) -> np.ndarray:
    """``h_1, h_2`` of every key: an (n, 2) uint64 array."""
    pairs = [mmh3.hash64(k, SEED, signed=False) for k in keys]
    return np.asarray(pairs, dtype=np.uint64).reshape(-1, 2)


def chunk_lanes(
    hashes: np.ndarray, key_ids: np.ndarray, rec_len: np.ndarray, seq0: int, rec0: int,
    ts: np.ndarray | None, has_ts: np.ndarray | None,
) -> tuple[int, int]:
    """The two lane sums of consecutive records: record ``rec0 + i`` holds ``rec_len[i]`` messages, numbered
    from ``seq0``, whose keys are ``key_ids`` into ``hashes`` (:func:`key_hashes` of a vocabulary)."""
    n = len(key_ids)
    if n == 0:
        return 0, 0
    seq = (np.uint64(seq0) + np.arange(n, dtype=np.uint64))
    rec = np.repeat(np.uint64(rec0) + np.arange(len(rec_len), dtype=np.uint64), rec_len)
    if ts is not None and has_ts is not None:
        bits = np.repeat(np.where(has_ts, ts, 0.0).astype(np.float64).view(np.uint64), rec_len)
        timed = np.repeat(has_ts, rec_len)
    else:
        bits, timed = np.zeros(n, dtype=np.uint64), np.zeros(n, dtype=bool)
    h = hashes[key_ids]
    out = []
    for j in range(2):
        x = h[:, j] + seq * _A[j] + rec * _B[j] + bits * _C[j] + np.where(timed, _T[j], np.uint64(0))
        out.append(int(np.add.reduce(fmix64(x), dtype=np.uint64)))
    return out[0], out[1]


class Fingerprint:
    """Lane sums, record and message counts; add chunks or other fingerprints in any order."""

    def __init__(self) -> None:
        self.records = 0
        self.messages = 0
        self.lanes = [0, 0]

    def add(self, records: int, messages: int, lanes: tuple[int, int]) -> Fingerprint:
        self.records += records
        self.messages += messages
        self.lanes = [(a + b) & 0xFFFFFFFFFFFFFFFF for a, b in zip(self.lanes, lanes)]
        return self

    def hexdigest(self) -> str:
        text = f"{VERSION} records={self.records} messages={self.messages} " \
               f"lanes={self.lanes[0]:016x},{self.lanes[1]:016x}"
        return hashlib.sha256(text.encode("ascii")).hexdigest()


class RecordColumns:
    """Records as columns: keys as ids into ``vocab`` (first-seen order), keys per record, timestamps (0.0 where a
    record has none) and whether each record has one. The fingerprint and the replay's chunks both build these."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.ids: list[int] = []
        self.lengths: list[int] = []
        self.times: list[float] = []
        self.timed: list[bool] = []
        self.any_ts = False

    def add(self, ts: Optional[float], keys: list[str]) -> None:  # noqa: UP045
        vocab, ids = self.vocab, self.ids
        for key in keys:
            i = vocab.get(key)
            if i is None:
                i = vocab[key] = len(vocab)
            ids.append(i)
        self.lengths.append(len(keys))
        if ts is None:
            self.times.append(0.0)
            self.timed.append(False)
        else:
            self.times.append(ts)
            self.timed.append(True)
            self.any_ts = True


class StreamFingerprint:
    """The fingerprint of a record stream fed one record at a time (:meth:`add`), for a reader that does something
    else with the records in the same pass: ``keysplit run`` fingerprints the records it loads into its feed, so a
    file that changes afterwards (or while it is read) cannot give the run another file's fingerprint."""

    def __init__(self) -> None:
        self.fp = Fingerprint()
        self.cols = RecordColumns()

    def add(self, ts: Optional[float], keys: list[str]) -> None:  # noqa: UP045
        self.cols.add(ts, keys)
        if len(self.cols.ids) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        cols, fp = self.cols, self.fp
        if not cols.lengths:
            return
        lanes = chunk_lanes(key_hashes(cols.vocab), np.asarray(cols.ids, dtype=np.int64),
                            np.asarray(cols.lengths, dtype=np.int64), fp.messages, fp.records,
                            np.asarray(cols.times, dtype=np.float64), np.asarray(cols.timed, dtype=bool))
        fp.add(len(cols.lengths), len(cols.ids), lanes)
        self.cols = RecordColumns()

    def hexdigest(self) -> str:
        self._flush()
        return self.fp.hexdigest()


def dataset_sha256(records: Iterable[tuple[Optional[float], list[str]]]) -> str:  # noqa: UP045
    """The fingerprint of a record stream in order (``keysplit run``'s feed, ``Dataset.sha256``)."""
    stream = StreamFingerprint()
    for ts, keys in records:
        stream.add(ts, keys)
    return stream.hexdigest()
