"""The text reader's words for many lines at once: :func:`tokenize_lines` over raw bytes, and
:func:`file_blocks`, a ``text:`` file cut into blocks of whole lines.

``TextDataset.parse_line`` (the reader's regex over the lowered, decoded line) stays the definition. The numba
kernels of :mod:`keysplit.simulator.tokenize_kernel` scan the lines that are pure ASCII; the others (non-ASCII
text, invalid UTF-8) are decoded exactly as :meth:`FileDataset.lines` decodes them and go through the regex
here, in Python, so the words equal the reader's on every line (``tests/simulator/test_tokenize.py``). Each batch comes
back with its distinct words once (``vocab``) and every word as an id into it, which is what both the
simulator's key table and the replay's chunks take.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from keysplit.datasets.readers import MAX_LINE_BYTES, WORD, TextDataset, open_binary
from keysplit.errors import DatasetError
from keysplit.simulator.tokenize_kernel import (
    _count_words,
    _intern_hashes,
    _intern_lines,
    _mark_lines,
    _rehash,
    _rehash_hashes,
)

#: Bytes read from a file per block (cut back to the last line end): about a million words of English.
BLOCK_BYTES = 4 << 20

_EMPTY_U8 = np.zeros(0, dtype=np.uint8)


@dataclass
class Tokens:
    """The words of a batch of lines: distinct words in order of first appearance, every word as an id."""

    vocab: list[str]
    ids: np.ndarray  #: int32, one per word, in line order
    rec_len: np.ndarray  #: int32, words per line (0 for a line the reader skips)
    invalid_utf8: int  #: lines that were not valid UTF-8 (decoded with U+FFFD, as the reader does)


def is_plain_text(dataset: object) -> bool:
    """A ``text:`` dataset read by the stock reader (a subclass may parse lines its own way)."""
    return type(dataset) is TextDataset


def decode(raw: bytes) -> tuple[str, bool]:
    """A line as :meth:`FileDataset.lines` decodes it, and whether it was invalid UTF-8."""
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), True


def _other_words(data: np.ndarray, offsets: np.ndarray, other: np.ndarray) -> tuple[list[list[str]], int]:
    """The reader's words of every flagged line, and how many of them were invalid UTF-8. Line ends need no
    stripping: ``\\r`` and ``\\n`` are not word characters."""
    words, invalid = [], 0
    for j in np.flatnonzero(other).tolist():
        line, bad = decode(data[offsets[j]:offsets[j + 1]].tobytes())
        invalid += bad
        words.append(WORD.findall(line.lower()))
    return words, invalid


class Interner:
    """Distinct words -> dense ids in order of first appearance, over as many batches of lines as it is fed:
    the kernel's open-addressing table, each word's bytes stored once (``pool``), grown by doubling."""

    def __init__(self, capacity: int = 1 << 14) -> None:
        capacity = 1 << max(0, capacity - 1).bit_length()  # a power of two: slots are masked
        self.size = 0  #: distinct words so far (ids below size)
        self.slots = np.full(4 * capacity, -1, dtype=np.int64)  # (id, hash) pairs, at most half full
        self.vhash = np.empty(capacity, dtype=np.int64)
        self.pool = np.empty(8 * capacity, dtype=np.uint8)
        self.pstarts = np.zeros(capacity + 1, dtype=np.int64)

    def _grow(self, words: int, size: int) -> None:
        """Room for ``words`` more distinct words of ``size`` more bytes (at least double the table)."""
        capacity = len(self.vhash)
        if self.size + words > capacity:
            capacity = 1 << (self.size + words - 1).bit_length()  # a power of two: slots are masked
            capacity = max(2 * len(self.vhash), capacity)
            self.vhash = np.resize(self.vhash, capacity)
            self.pstarts = np.resize(self.pstarts, capacity + 1)
            self.slots = np.full(4 * capacity, -1, dtype=np.int64)
            _rehash(self.slots, self.vhash, self.size)
        used = int(self.pstarts[self.size])
        if used + size > len(self.pool):
            self.pool = np.resize(self.pool, max(2 * len(self.pool), used + size))

    def lines(self, data: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """The reader's words of every line ``data[offsets[j]:offsets[j + 1]]`` (uint8 bytes, int64 offsets,
        the layout of an Arrow binary column; a line may keep its line end) as ids, the words of each line,
        and how many lines were not valid UTF-8."""
        n_lines = len(offsets) - 1
        other = np.zeros(n_lines, dtype=np.bool_)
        _mark_lines(data, offsets, other)
        lines_words, invalid = _other_words(data, offsets, other)
        encoded = [w.encode("utf-8") for words in lines_words for w in words]
        xdata = np.frombuffer(b"".join(encoded), dtype=np.uint8) if encoded else _EMPTY_U8
        xoffsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=xoffsets[1:])
        xcount = np.fromiter(map(len, lines_words), dtype=np.int32, count=len(lines_words))
        span = int(offsets[-1] - offsets[0]) if n_lines else 0
        ids = np.empty(span // 2 + n_lines + len(encoded), dtype=np.int32)  # at most (line bytes + 1) // 2 a line
        rec_len = np.empty(n_lines, dtype=np.int32)
        state = np.array([self.size, 0, 0, 0], dtype=np.int64)
        line = 0
        while True:
            line = _intern_lines(data, offsets, other, xdata, xoffsets, xcount, line, self.slots, self.vhash,
                                 self.pool, self.pstarts, state, ids, rec_len)
            self.size = int(state[0])
            if line == n_lines:
                return ids[: state[1]], rec_len, invalid
            size = int(offsets[line + 1] - offsets[line] + len(xdata))  # a bound for line ``line``
            self._grow(size, size)

    def names(self, first: int = 0, stop: int | None = None) -> list[str]:
        """The words of ids ``first`` .. ``stop - 1`` (all from ``first`` by default)."""
        stop = self.size if stop is None else stop
        bounds = self.pstarts[first: stop + 1].tolist()
        if not bounds:
            return []
        text = self.pool[bounds[0]: bounds[-1]].tobytes()
        base = bounds[0]
        return [text[a - base: b - base].decode("utf-8") for a, b in itertools.pairwise(bounds)]


    def names_of(self, ids: np.ndarray) -> list[str]:
        """The words of ``ids`` (any ids below :attr:`size`, in the order given)."""
        starts, ends = self.pstarts[ids].tolist(), self.pstarts[ids + 1].tolist()
        text = self.pool[: self.pstarts[self.size]].tobytes()
        return [text[a:b].decode("utf-8") for a, b in zip(starts, ends)]


def tokenize_lines(data: np.ndarray, offsets: np.ndarray) -> Tokens:
    """The reader's words of every line of one batch (see :meth:`Interner.lines`), the batch's own vocabulary."""
    interner = Interner()
    ids, rec_len, invalid = interner.lines(data, offsets)
    return Tokens(interner.names(), ids, rec_len, invalid)


def count_words(data: np.ndarray, offsets: np.ndarray) -> int:
    """How many words the lines hold (what :func:`tokenize_lines` would return, without naming them)."""
    other = np.zeros(len(offsets) - 1, dtype=np.bool_)
    ascii_words = _count_words(data, offsets, other)  # marks the other lines too
    return ascii_words + sum(map(len, _other_words(data, offsets, other)[0]))


def line_offsets(block: np.ndarray) -> np.ndarray:
    """Offsets of the lines of ``block`` (each ends with ``\\n`` except perhaps the last one)."""
    ends = np.flatnonzero(block == 10) + 1
    if not len(ends) or ends[-1] != len(block):
        ends = np.append(ends, len(block))
    return np.concatenate(([0], ends)).astype(np.int64)


def _too_long(path: str, number: int) -> DatasetError:
    return DatasetError(f"{path} line {number}: a line longer than {MAX_LINE_BYTES >> 20} MiB (a line is one "
                        "record, one spout tuple); is it a text file with line ends?")


def _checked(path: str, buf: bytes, cut: int, lines_before: int) -> tuple[np.ndarray, np.ndarray]:
    """``buf[:cut]`` as a block and its line offsets; a line over :data:`MAX_LINE_BYTES` (its line end not
    counted) is refused as :func:`~keysplit.datasets.readers.bounded_lines` refuses it."""
    block = np.frombuffer(buf, dtype=np.uint8, count=cut)
    offsets = line_offsets(block)
    lengths = np.diff(offsets) - (block[offsets[1:] - 1] == 10)
    long = np.flatnonzero(lengths > MAX_LINE_BYTES)
    if len(long):
        raise _too_long(path, lines_before + int(long[0]) + 1)
    return block, offsets


def file_blocks(path: str, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The file's (possibly gzipped) bytes as blocks of whole lines with their offsets: the lines of
    :func:`~keysplit.datasets.readers.bounded_lines`, a line too long refused with the same message."""
    lines_before = 0
    try:
        with open_binary(path) as raw:
            rest = b""
            while True:
                buf = raw.read(block_bytes)
                if not buf:  # the end: what is left is a last line without a line end
                    if rest:
                        yield _checked(path, rest, len(rest), lines_before)
                    return
                buf = rest + buf
                cut = buf.rfind(b"\n") + 1
                if cut:
                    block, offsets = _checked(path, buf, cut, lines_before)
                    lines_before += len(offsets) - 1
                    yield block, offsets
                rest = buf[cut:]
                if len(rest) > MAX_LINE_BYTES:  # refused before the rest of such a line is read
                    raise _too_long(path, lines_before + 1)
    except (OSError, EOFError) as exc:  # as FileDataset.lines (gzip.BadGzipFile is an OSError)
        raise DatasetError(f"cannot read dataset file {path}: {exc}") from None
    except zlib.error as exc:
        raise DatasetError(f"cannot read dataset file {path}: corrupt gzip data ({exc})") from None


class HashIds:
    """Dense ids for 64-bit key fingerprints (order of first appearance), by the kernel's open-addressing
    table: a batch of fingerprints becomes ids without a Python step per key."""

    def __init__(self, capacity: int = 1 << 14) -> None:
        self.size = 0
        self.known = np.zeros(capacity, dtype=np.uint64)
        self.slots = np.full(2 * capacity, -1, dtype=np.int32)

    def ids(self, hashes: np.ndarray) -> np.ndarray:
        """The ids of ``hashes`` (uint64); new fingerprints get ids from :attr:`size` on."""
        need = self.size + len(hashes)
        if need > len(self.known):
            capacity = max(2 * len(self.known), 1 << (need - 1).bit_length())
            self.known = np.resize(self.known, capacity)
            self.slots = np.full(2 * capacity, -1, dtype=np.int32)
            _rehash_hashes(self.slots, self.known, self.size)
        out = np.empty(len(hashes), dtype=np.int64)
        self.size = _intern_hashes(np.ascontiguousarray(hashes, dtype=np.uint64), self.slots, self.known, self.size,
                                   out)
        return out
