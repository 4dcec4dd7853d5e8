"""The compiled key column of ``csv:`` and ``edges:`` files (keysplit.simulator.columns) equals their readers.

The readers (``FileDataset.lines`` then ``CsvDataset.parse_line`` / ``EdgeDataset.parse_line``) are the
definition. Random files mix plain rows with quotes, tabs, every ASCII whitespace byte, comments, ragged rows,
empty keys, non-ASCII keys, a byte-order mark and invalid UTF-8, so both the kernel and the reader fallback
run; every record, and every count the reader reports, must come out the same, whatever the block size.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from keysplit.datasets import open_dataset
from keysplit.errors import DatasetError
from keysplit.simulator.columns import ColumnScanner, Counts, is_plain_column
from keysplit.simulator.encoded_text import message_count
from keysplit.simulator.tokenize import Interner, decode, file_blocks

PIECES = ["a", "Bob", "k7", "42", " ", "  ", "_", "-", ".", "x y", "'", "#"]
ODD = ["\t", "\x0b", "\x0c", "\r", "\x1c", "\x1f", "\x00", "\x7f", '"', '""', "é", "日本", "\ufeff", "\u00a0",
       "\u2028", "\x85"]
INVALID = [b"\xff", b"\xc3", b"\xed\xa0\x80"]


def piece(rng: random.Random, odd: list[str]) -> bytes:
    roll = rng.random()
    if roll < 0.85:
        return rng.choice(PIECES).encode()
    if roll < 0.97:
        return rng.choice(odd).encode("utf-8")
    return rng.choice(INVALID)


def field(rng: random.Random, odd: list[str] = ODD) -> bytes:
    return b"".join(piece(rng, odd) for _ in range(rng.randrange(0, 4)))


def csv_field(rng: random.Random) -> bytes:
    """A CSV field: unquoted (no quote, no carriage return: the csv module refuses one there), or quoted, with
    anything inside (a quote doubled)."""
    if rng.random() < 0.15:
        return b'"' + field(rng).replace(b'"', b'""') + b'"'
    return field(rng, [c for c in ODD if c not in ('"', '""', "\r")])


def csv_line(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.05:
        return b" " * rng.randrange(3)  # blank
    if roll < 0.1:  # a quoted field holding commas
        return b'1,"x, y",' + csv_field(rng)
    width = 3 if rng.random() < 0.85 else rng.choice((1, 2, 4))  # some ragged rows
    return b",".join(csv_field(rng) for _ in range(width))


def edge_line(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.05:
        return b"# a comment " + field(rng)
    sep = [b" ", b"\t", b"  ", b"\x0b", b"\x1c", "\u00a0".encode(), b"\xff"]
    return b"".join(field(rng) + rng.choice(sep) for _ in range(rng.randrange(0, 4)))


def write(path, lines: list[bytes], header: bytes = b"") -> None:
    ends = [b"\n", b"\r\n", b"\n\r\n"]
    rng = random.Random(len(lines))
    path.write_bytes(header + b"".join(line + rng.choice(ends) for line in lines) + b"last,row,here")


def scanned(dataset, block_bytes: int) -> tuple[list[list[str]], Counts]:
    """The records of the compiled path over blocks of ``block_bytes``, and its counts."""
    words, scan, total, keys = Interner(capacity=2), ColumnScanner(dataset), Counts(), []
    for block, offsets in file_blocks(dataset.path, block_bytes):
        ids, _, counts = scan.block(words, block, offsets)
        total.add(counts)
        keys.extend(ids.tolist())
    names = words.names()
    return [[names[k]] for k in keys], total


def reader(dataset) -> tuple[list[list[str]], tuple]:
    records = [keys for _, keys in dataset.records()]
    counts = (dataset.invalid_utf8_lines, dataset.skipped_lines, getattr(dataset, "ragged_rows", 0),
              getattr(dataset, "first_ragged", None))
    return records, counts


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block_bytes", [16, 4 << 20])
def test_csv_keys_equal_the_reader(tmp_path, seed, block_bytes):
    rng = random.Random(seed)
    path = tmp_path / "rows.csv"
    write(path, [csv_line(rng) for _ in range(3000)], header="\ufeffid,user,n\n".encode())
    for key in ("id", "user", "n"):
        dataset = open_dataset(f"csv:{path},key={key}")
        assert is_plain_column(dataset)
        expected, reader_counts = reader(dataset)
        empty_keys = dataset.empty_keys
        got, counts = scanned(dataset, block_bytes)
        assert got == expected
        assert (counts.invalid, counts.skipped, counts.ragged, counts.first_ragged) == reader_counts
        assert counts.empty == empty_keys
        assert counts.ragged and counts.empty and counts.invalid  # not vacuous: every count was met
        assert any('"' in k[0] or "é" in k[0] for k in got) and any(k[0].isascii() for k in got)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("block_bytes", [16, 4 << 20])
def test_edge_keys_equal_the_reader(tmp_path, seed, block_bytes):
    rng = random.Random(seed)
    path = tmp_path / "graph.txt"
    write(path, [edge_line(rng) for _ in range(3000)], header="\ufeff# SNAP header\n".encode())
    dataset = open_dataset(f"edges:{path}")
    expected, reader_counts = reader(dataset)
    got, counts = scanned(dataset, block_bytes)
    assert got == expected
    assert (counts.invalid, counts.skipped, counts.ragged, counts.first_ragged) == reader_counts
    assert counts.skipped and counts.invalid and any(not k[0].isascii() for k in got)


def test_a_csv_row_the_reader_refuses_is_refused_with_its_message(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_bytes(b"k,v\na,1\nb,2\n\"open,3\n")
    dataset = open_dataset(f"csv:{path},key=k")
    with pytest.raises(DatasetError) as ours:
        scanned(dataset, 1 << 20)
    with pytest.raises(DatasetError) as theirs:
        list(dataset.records())
    assert str(ours.value) == str(theirs.value) and "line 4" in str(ours.value)


def test_a_csv_with_a_time_column_stays_on_the_records_path(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"k,t\na,1\n")
    assert not is_plain_column(open_dataset(f"csv:{path},key=k,time=t"))
    assert is_plain_column(open_dataset(f"csv:{path},key=k"))


@pytest.mark.parametrize("kind", ["csv", "edges"])
def test_simulate_on_columns_equals_the_reference(tmp_path, kind):
    """The fast path over the compiled reader makes the reference engine's decisions, message for message."""
    from keysplit.simulator import simulate

    rng = random.Random(11)
    path = tmp_path / f"data.{kind}"
    if kind == "csv":
        write(path, [csv_line(rng) for _ in range(1500)], header=b"id,user,n\n")
        spec = f"csv:{path},key=user"
    else:
        write(path, [edge_line(rng) for _ in range(1500)])
        spec = f"edges:{path}"
    dataset = open_dataset(spec)
    messages = message_count(dataset)
    assert messages == dataset.message_count() > 100
    for grouping, split in (("pkg", "shuffle"), ("pkg:probe=1", "key"), ("kg", "key")):
        fast = simulate(dataset, grouping, 5, 3, split=split, rate=500.0, messages_hint=messages, engine="fast")
        ref = simulate(dataset, grouping, 5, 3, split=split, rate=500.0, messages_hint=messages, engine="reference")
        fast.messages_per_second = ref.messages_per_second = 0.0
        assert fast == ref and fast.messages == messages
    assert np.isfinite(messages)


@pytest.mark.parametrize("kind", ["csv", "edges"])
@pytest.mark.parametrize("limit", [7, 1 << 19])
def test_the_replay_cuts_the_chunks_the_reader_does(tmp_path, kind, limit):
    """The replay's compiled path (``plain_text_chunks`` with the dataset) cuts, from runs of lines of several
    splits, the chunks ``ChunkBuilder`` cuts from the reader's records; the CSV header only in the split at 0."""
    from spark_replay.chunks import ChunkBuilder
    from spark_replay.text_input import byte_runs, plain_text_chunks
    from tests.replay.test_text_input import messages_of

    rng = random.Random(limit)
    path = tmp_path / f"data.{kind}"
    make = csv_line if kind == "csv" else edge_line
    path.write_bytes(b"id,user,n\n" if kind == "csv" else b"# graph\n")
    dataset = open_dataset(f"csv:{path},key=user" if kind == "csv" else f"edges:{path}")
    header = [b"id,user,n"] if kind == "csv" else []
    runs = [(at, [make(rng) for _ in range(rng.randrange(1, 80))]) for at in (0, 0, 512, 512, 9000)]
    runs[0] = (0, header + runs[0][1])
    expected, builder = [], None
    for at, lines in runs:
        if builder is None or builder.part != at:
            expected.extend(builder.finish() if builder else [])
            builder = ChunkBuilder(at, limit)
            lines = lines[1:] if kind == "csv" and at == 0 else lines
        decoded = (dataset.parse_line(decode(raw)[0]) for raw in lines)
        expected.extend(builder.add(filter(None, decoded)))
    expected.extend(builder.finish())
    got = list(plain_text_chunks(byte_runs((at, [lines]) for at, lines in runs), limit, dataset=dataset))
    assert messages_of(got) == messages_of(expected) and len(got) >= 3
