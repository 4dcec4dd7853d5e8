"""The compiled tokenizer (keysplit.simulator.tokenize) equals the text reader on every line.

The reader (``TextDataset``: each line decoded by ``FileDataset.lines``, then ``parse_line``'s regex over the
lowered text) is the definition. Random lines mix ASCII words, apostrophes (ASCII and U+2019), underscores,
digits, punctuation, non-ASCII letters whose lower case changes length, combining marks and invalid UTF-8; the
kernels scan the ASCII lines and the Python fallback takes the rest, and every line must come out the same.
"""

from __future__ import annotations

import gzip
import random

import numpy as np
import pytest

from keysplit.datasets import open_dataset
from keysplit.datasets import readers as readers_module
from keysplit.errors import DatasetError
from keysplit.simulator import tokenize
from keysplit.simulator.encoded_text import message_count
from keysplit.simulator.tokenize import Interner, file_blocks, line_offsets, tokenize_lines

ASCII_PIECES = ["a", "Z", "q", "Storm", "don't", "x''y", "'", "_", "a_b", "9", "42", "k7", " ", "  ", "\t", "-", ".",
                ",", "'s", "O'Neil", "rock'n'roll", "\r", "\x00", "\x7f", "''", "_'_", "A'1"]
OTHER_PIECES = ["é", "É", "İ", "ß", "Σ", "ς", "ﬁ", "\u0301", "’", "l’homme", "don’t", "٣", "²", "日本", "😀",
                "\ufeff", "\u00a0", "\u2028", "ǅ", "Ⅻ"]
INVALID_BYTES = [b"\xff", b"\xc3", b"\xe2\x80", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]


def random_line(rng: random.Random) -> bytes:
    """One line: mostly ASCII pieces, sometimes a non-ASCII piece or an invalid byte sequence."""
    parts: list[bytes] = []
    for _ in range(rng.randrange(0, 12)):
        roll = rng.random()
        if roll < 0.8:
            parts.append(rng.choice(ASCII_PIECES).encode())
        elif roll < 0.95:
            parts.append(rng.choice(OTHER_PIECES).encode("utf-8"))
        else:
            parts.append(rng.choice(INVALID_BYTES))
    return b"".join(parts)


def reader_words(raw: bytes) -> list[str]:
    """The text reader's words of one raw line (line end included), decoded as FileDataset.lines decodes it."""
    line, _ = tokenize.decode(raw)
    record = readers_module.TextDataset.parse_line(None, line.rstrip("\r\n"))  # type: ignore[arg-type]
    return record[1] if record else []


def per_line(vocab: list[str], ids: np.ndarray, rec_len: np.ndarray) -> list[list[str]]:
    ends = np.cumsum(rec_len)
    return [[vocab[i] for i in ids[e - n:e]] for n, e in zip(rec_len.tolist(), ends.tolist())]


def as_block(lines: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    data = np.frombuffer(b"\n".join(lines) + b"\n", dtype=np.uint8)
    return data, line_offsets(data)


@pytest.mark.parametrize("seed", range(8))
def test_the_tokenizer_equals_the_reader_on_random_lines(seed):
    rng = random.Random(seed)
    lines = [random_line(rng) for _ in range(3000)]
    tokens = tokenize_lines(*as_block(lines))
    got = per_line(tokens.vocab, tokens.ids, tokens.rec_len)
    for raw, words in zip(lines, got):
        assert words == reader_words(raw), raw
    assert tokens.invalid_utf8 == sum(tokenize.decode(raw)[1] for raw in lines)
    assert len(set(tokens.vocab)) == len(tokens.vocab)  # each distinct word named once
    # the test is not vacuous: both paths ran, and apostrophes joined words on both
    assert any(b"'" in raw and raw.isascii() for raw in lines) and tokens.invalid_utf8 > 0
    assert "don't" in tokens.vocab and "don’t" in tokens.vocab


def test_pure_unicode_lines_and_every_ascii_byte():
    lines = ["".join(chr(c) for c in range(start, start + 64)).encode("utf-8").replace(b"\n", b"")
             for start in range(0, 0x3000, 64)]
    lines.append(bytes(range(0, 128)).replace(b"\n", b""))
    tokens = tokenize_lines(*as_block(lines))
    assert per_line(tokens.vocab, tokens.ids, tokens.rec_len) == [reader_words(raw) for raw in lines]


def test_the_interner_grows_and_keeps_ids_in_order_of_first_appearance():
    rng = random.Random(3)
    words = [f"w{rng.randrange(5000)}" for _ in range(20000)]
    lines = [" ".join(words[i:i + 7]).encode() for i in range(0, len(words), 7)]
    interner = Interner(capacity=2)  # grows many times, in the middle of batches
    ids, _, _ = interner.lines(*as_block(lines[:1500]))
    ids2, _, _ = interner.lines(*as_block(lines[1500:]))
    names = interner.names()
    assert [names[i] for i in np.concatenate((ids, ids2))] == words
    assert names == list(dict.fromkeys(words))
    assert interner.names(10, 12) == names[10:12]


@pytest.mark.parametrize("block_bytes", [7, 64, 1 << 20])
def test_file_blocks_cut_the_file_where_the_reader_does(tmp_path, block_bytes):
    rng = random.Random(block_bytes)
    lines = [random_line(rng) for _ in range(400)]
    path = tmp_path / "book.txt.gz"
    payload = b"\n".join(lines) + b"\r\n\n" + b"last line without an end"
    with gzip.open(path, "wb") as fh:
        fh.write(payload)
    dataset = open_dataset(f"text:{path}")
    expected = [keys for _, keys in dataset.records()]
    got = []
    for block, offsets in file_blocks(str(path), block_bytes):
        tokens = tokenize_lines(block, offsets)
        got.extend(words for words in per_line(tokens.vocab, tokens.ids, tokens.rec_len) if words)
    assert got == expected
    assert message_count(dataset) == dataset.message_count() == sum(map(len, expected))


def test_a_line_too_long_is_refused_with_the_readers_message_and_line_number(tmp_path, monkeypatch):
    monkeypatch.setattr(readers_module, "MAX_LINE_BYTES", 100)
    monkeypatch.setattr(tokenize, "MAX_LINE_BYTES", 100)
    path = tmp_path / "long.txt"
    path.write_bytes(b"short\n" * 3 + b"x" * 100 + b"\n" + b"y" * 101 + b"\n")
    dataset = open_dataset(f"text:{path}")
    with pytest.raises(DatasetError) as reader_error:
        list(dataset.records())
    for block_bytes in (16, 1 << 16):
        with pytest.raises(DatasetError) as ours:
            list(file_blocks(str(path), block_bytes))
        assert str(ours.value) == str(reader_error.value)
    assert "line 5" in str(reader_error.value)


@pytest.mark.parametrize("limit", [10, 1 << 25])
def test_simulate_on_text_equals_the_reference_whether_the_encoding_is_kept_or_not(tmp_path, monkeypatch, limit):
    """Kept (the counting pass's ids reused by every run) or too large to keep (tokenized again per run), the
    fast path makes the reference's decisions; a file changed between runs is read again."""
    from keysplit.simulator import encoded_text, simulate

    monkeypatch.setattr(encoded_text, "ENCODE_LIMIT", limit)
    rng = random.Random(limit)
    path = tmp_path / "book.txt"
    path.write_bytes(b"\n".join(random_line(rng) for _ in range(1500)))
    dataset = open_dataset(f"text:{path}")
    messages = message_count(dataset)
    assert (encoded_text._kept(dataset) is not None) == (messages <= limit)
    for spec, split in (("pkg", "shuffle"), ("pkg:probe=1", "key"), ("kg", "key")):
        fast = simulate(dataset, spec, 5, 3, split=split, rate=500.0, messages_hint=messages, engine="fast")
        ref = simulate(dataset, spec, 5, 3, split=split, rate=500.0, messages_hint=messages, engine="reference")
        fast.messages_per_second = ref.messages_per_second = 0.0
        assert fast == ref and fast.messages == messages
    path.write_bytes(b"one two\nthree\n")
    assert message_count(dataset) == 3
    assert simulate(dataset, "pkg", 5, 3, engine="fast").messages == 3
