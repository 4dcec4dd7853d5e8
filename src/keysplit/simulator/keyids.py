"""Keys as the fast path's kernel reads them: dense integer ids, each named once with its d candidate workers
and, under ``split="key"``, its source.

A generator's own index arrays are remapped directly (:class:`IndexMap`: only distinct keys are ever named), a
file's keys go through one dict in a single pass over its records (:func:`record_chunks`). The keys new in a
chunk are hashed together by :mod:`keysplit.simulator.hashing_batch` (numba's MurmurHash3, equal to mmh3 key
for key), not one mmh3 call per key.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from keysplit.datasets import Dataset
from keysplit.datasets import generators as _generators
from keysplit.datasets.readers import FileDataset
from keysplit.simulator.columns import Counts, finish
from keysplit.simulator.encoded_text import text_blocks
from keysplit.simulator.hashing_batch import candidate_rows, hash_many
from keysplit.sizes import check_memory
from keysplit.stream import event_time, event_times, key_sources, sources_of

#: Messages per kernel call on the records path (generators use their own chunk size).
CHUNK = 1 << 16
#: Generator indices below this are remapped through a flat table; larger ones through a dict.
INDEX_TABLE_LIMIT = 1 << 24


class KeyTable:
    """Dense ids for distinct keys, with what the kernel reads per key: candidates, split source, seen bits."""

    def __init__(self, d: int, workers: int, sources: int, split: str, distinct: bool = False) -> None:
        self.d, self.workers, self.sources, self.split = d, workers, sources, split
        self.distinct = distinct
        self.ids: dict[str, int] = {}
        self.size = 0  #: named keys (ids below size have their candidates)
        self.pending: list[str] = []  #: keys with an id, named at the next flush()
        self.words = (workers + 63) // 64
        self._grow(1024)

    def _grow(self, capacity: int) -> None:
        old = self.size
        row = self.d * 4 + 4 + self.words * 8 + 8  # cand, ksrc, seen, count
        check_memory(float(capacity + len(getattr(self, "count", ()))) * row,
                     f"the key table of {capacity:,} keys at W={self.workers:,} (d={self.d})", "lower -W")
        cand = np.zeros((capacity, self.d), dtype=np.int32)
        ksrc = np.zeros(capacity, dtype=np.int32)
        seen = np.zeros((capacity, self.words), dtype=np.uint64)
        count = np.zeros(capacity, dtype=np.int64)
        if old:
            cand[:old], ksrc[:old], seen[:old] = self.cand[:old], self.ksrc[:old], self.seen[:old]
            count[:old] = self.count[:old]
        self.cand, self.ksrc, self.seen, self.count = cand, ksrc, seen, count

    def id_of(self, name: str) -> int:
        """The id of ``name``. A new name gets the next id at once and its candidates and source at the next
        :meth:`flush`, so the keys met in a chunk are named together (one numba call, not one mmh3 call per
        key and seed)."""
        kid = self.ids.get(name)
        if kid is None:
            kid = self.ids[name] = self.size + len(self.pending)
            self.pending.append(name)
        return kid

    def ids_of(self, names: list[str]) -> list[int]:
        """:meth:`id_of` of every name (one loop, for the many new keys of a generator's chunk)."""
        ids, pending, size = self.ids, self.pending, self.size
        out = []
        for name in names:
            kid = ids.get(name)
            if kid is None:
                kid = ids[name] = size + len(pending)
                pending.append(name)
            out.append(kid)
        return out

    def add(self, name: str) -> int:
        """The id of ``name``, named at once (one key; callers with many keys use :meth:`ids_of` and
        :meth:`flush`)."""
        kid = self.id_of(name)
        self.flush()
        return kid

    def flush(self) -> None:
        """Name the keys met since the last flush: their d candidates (``hashing.candidates``) and, under
        ``split="key"``, their source (``keysplit.stream.key_sources``), hashed in one batch by ``hashing_batch``."""
        if not self.pending:
            return
        first, end = self.size, self.size + len(self.pending)
        if end > len(self.cand):
            self._grow(max(end, 2 * len(self.cand)))
        self.cand[first:end] = candidate_rows(self.pending, self.d, self.workers, self.distinct)
        if self.split == "key":
            self.ksrc[first:end] = key_sources(self.pending, self.sources, hash_many)
        self.pending = []
        self.size = end


class IndexMap:
    """Generator key index -> dense key id; each distinct index is named once with ``key_name`` (two indices
    with one name share the name's id)."""

    def __init__(self, table: KeyTable, key_name: Callable[[int], str]) -> None:
        self.table = table
        self.key_name = key_name
        self.flat = np.full(0, -1, dtype=np.int32)
        self.big: dict[int, int] = {}

    def _name(self, indices: list[int]) -> list[int]:
        """Ids for indices never seen before, their names' candidates computed in one batch."""
        key_name = self.key_name
        kids = self.table.ids_of([key_name(i) for i in indices])
        self.table.flush()
        return kids

    def _extend(self, index: int) -> None:
        grown = np.full(max(index + 1, 2 * len(self.flat)), -1, dtype=np.int32)
        grown[: len(self.flat)] = self.flat
        self.flat = grown

    def ids(self, indices: np.ndarray) -> np.ndarray:
        if indices.size == 0:
            return np.zeros(0, dtype=np.int32)
        lo, hi = int(indices.min()), int(indices.max())
        if lo >= 0 and hi < INDEX_TABLE_LIMIT:
            if hi >= len(self.flat):
                self._extend(hi)
            out = self.flat[indices]
            if out.min() < 0:
                new = np.unique(indices[out < 0])
                self.flat[new] = self._name(new.tolist())
                out = self.flat[indices]
            return out
        # Some indices are negative or huge: those go through a dict, the rest through the flat table.
        uniq, inverse = np.unique(indices, return_inverse=True)
        u = uniq.tolist()
        dense = [self._known(i) for i in u]
        missing = [j for j, kid in enumerate(dense) if kid < 0]
        for j, kid in zip(missing, self._name([u[j] for j in missing])):
            dense[j] = kid
            self._store(u[j], kid)
        return np.array(dense, dtype=np.int32)[inverse.reshape(-1)]

    def _known(self, index: int) -> int:
        if 0 <= index < INDEX_TABLE_LIMIT:
            return int(self.flat[index]) if index < len(self.flat) else -1
        return self.big.get(index, -1)

    def _store(self, index: int, kid: int) -> None:
        if 0 <= index < INDEX_TABLE_LIMIT:
            if index >= len(self.flat):
                self._extend(index)
            self.flat[index] = kid
        else:
            self.big[index] = kid


@dataclass
class IdChunk:
    """Messages for one kernel call: key ids, and (records path) sources and event times."""

    kid: np.ndarray
    src: np.ndarray | None = None
    now: np.ndarray | None = None


def uses_generator_indices(dataset: Dataset) -> bool:
    """Generators whose ``records`` are the stock chunked sampler: their index arrays can be used directly."""
    return isinstance(dataset, _generators.Generator) and type(dataset).records is _generators.Generator.records


def generator_chunks(dataset: _generators.Generator, table: KeyTable) -> Iterator[IdChunk]:
    """The key ids of a generator's messages, drawn exactly as ``Generator.records`` draws them."""
    keymap = IndexMap(table, dataset.key_name)
    for indices in dataset.index_chunks():
        yield IdChunk(keymap.ids(indices))


def record_chunks(
    dataset: Dataset, table: KeyTable, sources: int, split: str, rate: float, need_now: bool
) -> Iterator[IdChunk]:
    """One pass over ``dataset.records()``: key ids, each message's source and (if needed) its event time,
    following ``hosting.route`` record for record (empty records count in the index but carry nothing).
    A record's source is ``index % sources`` or, under ``split="key"``, its first key's: it is filled in when
    the chunk is cut, after the chunk's new keys are named."""
    id_of, ids = table.id_of, table.ids
    kids: list[int] = []
    firsts: list[int] = []  # per record: its index (shuffle) or its first key's id (key)
    counts: list[int] = []  # per record: its messages
    nows: list[float] = []
    seq = 0
    by_key = split == "key"
    for index, (ts, keys) in enumerate(dataset.records()):
        if not keys:
            continue
        start = len(kids)
        for key in keys:
            kid = ids.get(key)
            kids.append(id_of(key) if kid is None else kid)
            if need_now:
                nows.append(event_time(ts, seq, rate))
            seq += 1
        firsts.append(kids[start] if by_key else index)
        counts.append(len(keys))
        if len(kids) >= CHUNK:
            yield _chunk(table, kids, firsts, counts, nows, need_now, by_key)
            kids, firsts, counts, nows = [], [], [], []
    if kids:
        yield _chunk(table, kids, firsts, counts, nows, need_now, by_key)


def text_chunks(
    dataset: FileDataset, table: KeyTable, sources: int, split: str, rate: float, need_now: bool
) -> Iterator[IdChunk]:
    """:func:`record_chunks` of a plain ``text:`` file (or a ``csv:`` or ``edges:`` one), a block of lines at a
    time: the words scanned and interned by the compiled readers (:mod:`keysplit.simulator.encoded_text`), so
    only distinct words meet the key table's dict. Sources and event times follow the same rules (lines without
    words are not records)."""
    records = seq = 0
    total = Counts()
    remap = np.zeros(0, dtype=np.int32)  # the interner's ids -> the table's (equal when the table starts empty)
    for words, wids, rec_len, block_counts in text_blocks(dataset):
        total.add(block_counts)
        counts = rec_len[rec_len > 0]
        if words.size > len(remap):  # the words new since the last block, named in one batch
            remap = np.concatenate((remap, np.asarray(table.ids_of(words.names(len(remap))), dtype=np.int32)))
            table.flush()
        if not len(counts):
            continue
        kid = remap[wids]
        first_keys = table.ksrc[kid[np.cumsum(counts) - counts]] if split == "key" else None
        src = sources_of(records + np.arange(len(counts), dtype=np.int64), first_keys, sources, split)
        now = event_times(seq + np.arange(len(kid), dtype=np.int64), rate) if need_now else None
        yield IdChunk(kid, np.repeat(src, counts).astype(np.int32), now)
        records += len(counts)
        seq += len(kid)
    finish(dataset, total)


def _chunk(
    table: KeyTable, kids: list[int], firsts: list[int], counts: list[int], nows: list[float], need_now: bool,
    by_key: bool,
) -> IdChunk:
    table.flush()
    per_record = np.array(firsts, dtype=np.int64)  # record indices (shuffle), or first keys' ids (key)
    if by_key:
        src = sources_of(per_record, table.ksrc[per_record], table.sources, "key")
    else:
        src = sources_of(per_record, None, table.sources, "shuffle")
    return IdChunk(
        np.array(kids, dtype=np.int32),
        np.repeat(src, counts).astype(np.int32),
        np.array(nows, dtype=np.float64) if need_now else None,
    )


def names_table(names: list[str], d: int, workers: int, distinct: bool) -> KeyTable:
    """A key table for already-encoded keys (id i is ``names[i]``) with ``d`` candidate columns: it serves
    every spec of at most d choices with this ``distinct``, since fewer choices are a prefix of more."""
    table = KeyTable(d, workers, 1, "shuffle", distinct)
    table._grow(max(len(names), 1))
    table.cand[: len(names)] = candidate_rows(names, d, workers, distinct)
    table.ids = {}  # not needed: the caller routes ids, never names
    table.size = len(names)
    return table
