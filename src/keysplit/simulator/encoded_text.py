"""A plain ``text:`` file's words (or a ``csv:`` or ``edges:`` file's keys) as ids, tokenized once per process
and kept for the passes that follow.

``keysplit simulate`` reads a file at least twice: it counts the messages first (the checkpoint spacing and the
progress bar need the total), then routes them, once per grouping and worker count. The counting pass here
tokenizes and interns the words (:class:`~keysplit.simulator.tokenize.Interner`) and keeps the ids, 4 bytes a
word, so that every later pass only routes. A file of more than :data:`ENCODE_LIMIT` words is not kept (its
memory would grow with the file): it is counted by the kernels' plain word count and tokenized again per pass.
The ids are kept per dataset object, and dropped when the file's size or modification time changed.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from keysplit.datasets import Dataset
from keysplit.simulator.columns import ColumnScanner, Counts, is_plain_column
from keysplit.simulator.tokenize import Interner, count_words, file_blocks, is_plain_text

#: Most words kept encoded in memory (128 MiB of ids); larger files are tokenized once per pass.
ENCODE_LIMIT = 1 << 25


@dataclass
class EncodedText:
    """A file's words: the interner holding every distinct word, and per block of lines its word ids, the
    words of each line and what the reader counts (invalid UTF-8, skipped lines...)."""

    words: Interner
    blocks: list[tuple[np.ndarray, np.ndarray, Counts]]
    stamp: tuple[int, int]
    messages: int


_KEPT: weakref.WeakKeyDictionary[Dataset, EncodedText | None] = weakref.WeakKeyDictionary()


#: One block of lines -> (ids, records per line, counts), interning into the interner given.
Scan = Callable[[Interner, np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, Counts]]


def _text_block(words: Interner, block: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, Counts]:
    wids, rec_len, bad = words.lines(block, offsets)
    return wids, rec_len, Counts(invalid=bad, skipped=int(np.count_nonzero(rec_len == 0)))


def scanner(dataset: Dataset) -> Scan | None:
    """The compiled reader of one pass over ``dataset``'s blocks (a fresh one per pass: a CSV scanner knows
    where its header is), or None for a dataset the compiled readers do not cover."""
    if is_plain_text(dataset):
        return _text_block
    if is_plain_column(dataset):
        return ColumnScanner(dataset).block  # type: ignore[arg-type]
    return None


def _stamp(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def _kept(dataset: Dataset) -> EncodedText | None:
    enc = _KEPT.get(dataset)
    return enc if enc is not None and enc.stamp == _stamp(dataset.path) else None  # type: ignore[attr-defined]


def encode(dataset: Dataset) -> EncodedText | None:
    """Tokenize the whole file and keep its ids for this dataset; None (and nothing kept) past
    :data:`ENCODE_LIMIT` words."""
    limit = ENCODE_LIMIT  # read at the call: a test lowers it
    path = dataset.path  # type: ignore[attr-defined]
    stamp = _stamp(path)
    words, blocks, messages, scan = Interner(), [], 0, scanner(dataset)
    assert scan is not None
    for block, offsets in file_blocks(path):
        wids, rec_len, counts = scan(words, block, offsets)
        messages += len(wids)
        if messages > limit:
            _KEPT[dataset] = None
            return None
        blocks.append((wids, rec_len, counts))
    enc = _KEPT[dataset] = EncodedText(words, blocks, stamp, messages)
    return enc


def message_count(dataset: Dataset) -> int:
    """``dataset.message_count()``; a file the compiled readers cover is encoded (and kept) on the way, or, too
    large to keep, counted by the kernels, without a Python step per word either way."""
    scan = scanner(dataset)
    if scan is None:
        return dataset.message_count()
    enc = _kept(dataset) or (encode(dataset) if dataset not in _KEPT else None)
    if enc is not None:
        return enc.messages
    blocks = file_blocks(dataset.path)  # type: ignore[attr-defined]
    if scan is _text_block:
        return sum(count_words(block, offsets) for block, offsets in blocks)
    words = Interner()
    return sum(len(scan(words, block, offsets)[0]) for block, offsets in blocks)


def text_blocks(dataset: Dataset) -> Iterator[tuple[Interner, np.ndarray, np.ndarray, Counts]]:
    """The file's blocks of lines as ``(interner, ids, records per line, the reader's counts)``: from the
    kept encoding when there is one, else tokenized now (the interner then grows block by block)."""
    enc = _kept(dataset)
    if enc is not None:
        for wids, rec_len, counts in enc.blocks:
            yield enc.words, wids, rec_len, counts
        return
    words, scan = Interner(), scanner(dataset)
    assert scan is not None
    for block, offsets in file_blocks(dataset.path):  # type: ignore[attr-defined]
        wids, rec_len, counts = scan(words, block, offsets)
        yield words, wids, rec_len, counts
