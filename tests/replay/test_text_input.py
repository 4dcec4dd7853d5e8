"""The replay's compiled text path (spark_replay.text_input) cuts the chunks the reader's ChunkBuilder cuts, and
its id helpers (fingerprint ids, compaction) equal the slow definitions."""

from __future__ import annotations

import random

import numpy as np
import pytest

from keysplit.datasets.readers import TextDataset
from keysplit.simulator.tokenize import HashIds, decode
from spark_replay.chunks import ChunkBuilder, compact
from spark_replay.text_input import TextChunker, byte_runs, plain_text_chunks
from tests.simulator.test_tokenize import random_line


def messages_of(chunks) -> list[tuple]:
    """Each chunk as (part, its records' keys), the vocabulary resolved."""
    out = []
    for c in chunks:
        ends = np.cumsum(c.rec_len)
        words = [c.vocab[i] for i in c.key_ids.tolist()]
        out.append((c.part, [words[e - n:e] for n, e in zip(c.rec_len.tolist(), ends.tolist())], c.ts))
    return out


@pytest.mark.parametrize("limit", [1, 7, 100, 1 << 19])
def test_text_chunker_cuts_the_chunks_chunkbuilder_cuts(limit):
    rng = random.Random(limit)
    runs = [(at, [random_line(rng) for _ in range(rng.randrange(0, 60))]) for at in (0, 0, 0, 512, 512, 9000)]
    reader = TextDataset.__new__(TextDataset)
    expected = []
    builder = None
    for at, lines in runs:
        if builder is None or builder.part != at:
            expected.extend(builder.finish() if builder else [])
            builder = ChunkBuilder(at, limit)
        expected.extend(builder.add(filter(None, (reader.parse_line(decode(raw)[0]) for raw in lines))))
    expected.extend(builder.finish())
    got = list(plain_text_chunks(byte_runs((at, [lines]) for at, lines in runs), limit))
    assert messages_of(got) == messages_of(expected)
    assert len(got) > (1 if limit < 100 else 0)
    for c in got:  # every vocabulary entry is used: exact counts stay exact
        assert sorted(set(c.key_ids.tolist())) == list(range(len(c.vocab)))


def test_hash_ids_are_dense_in_order_of_first_appearance_and_grow():
    rng = np.random.default_rng(5)
    hashes = rng.integers(0, 1 << 63, size=3000, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    stream = hashes[rng.integers(0, 3000, size=20000)]
    table = HashIds(capacity=2)
    ids = np.concatenate([table.ids(part) for part in np.array_split(stream, 37)])
    first = {}
    for h in stream.tolist():
        first.setdefault(h, len(first))
    assert ids.tolist() == [first[h] for h in stream.tolist()]
    assert table.size == len(first)


def test_compact_equals_numpy_unique():
    rng = np.random.default_rng(9)
    ids = rng.integers(0, 500, size=4000)
    used, local = compact(ids, 700)
    want_used, want_local = np.unique(ids, return_inverse=True)
    assert used.tolist() == want_used.tolist() and local.tolist() == want_local.reshape(-1).tolist()


def test_a_run_of_empty_lines_gives_no_chunk():
    chunker = TextChunker(0, 4)
    data = np.frombuffer(b"  ,, __", dtype=np.uint8)
    assert list(chunker.add(data, np.array([0, 2, 4, 7], dtype=np.int64))) == []
    assert list(chunker.finish()) == []
