"""A plain ``text:`` file's words as ids, tokenized once per process and kept for the passes that follow.

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
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from keysplit.datasets import Dataset
from keysplit.simulator.tokenize import Interner, count_words, file_blocks, is_plain_text

#: Most words kept encoded in memory (128 MiB of ids); larger files are tokenized once per pass.
ENCODE_LIMIT = 1 << 25


@dataclass
class EncodedText:
    """A file's words: the interner holding every distinct word, and per block of lines its word ids, the
    words of each line and how many lines were invalid UTF-8."""

    words: Interner
    blocks: list[tuple[np.ndarray, np.ndarray, int]]
    stamp: tuple[int, int]
    messages: int


_KEPT: weakref.WeakKeyDictionary[Dataset, EncodedText | None] = weakref.WeakKeyDictionary()


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
    words, blocks, messages = Interner(), [], 0
    for block, offsets in file_blocks(path):
        wids, rec_len, bad = words.lines(block, offsets)
        messages += len(wids)
        if messages > limit:
            _KEPT[dataset] = None
            return None
        blocks.append((wids, rec_len, bad))
    enc = _KEPT[dataset] = EncodedText(words, blocks, stamp, messages)
    return enc


def message_count(dataset: Dataset) -> int:
    """``dataset.message_count()``; a plain ``text:`` file is encoded (and kept) on the way, or, too large to
    keep, counted by the kernels, without a Python step per word either way."""
    if not is_plain_text(dataset):
        return dataset.message_count()
    enc = _kept(dataset) or (encode(dataset) if dataset not in _KEPT else None)
    if enc is not None:
        return enc.messages
    return sum(count_words(block, offsets) for block, offsets in file_blocks(dataset.path))  # type: ignore[attr-defined]


def text_blocks(dataset: Dataset) -> Iterator[tuple[Interner, np.ndarray, np.ndarray, int]]:
    """The file's blocks of lines as ``(interner, word ids, words per line, invalid UTF-8 lines)``: from the
    kept encoding when there is one, else tokenized now (the interner then grows block by block)."""
    enc = _kept(dataset)
    if enc is not None:
        for wids, rec_len, bad in enc.blocks:
            yield enc.words, wids, rec_len, bad
        return
    words = Interner()
    for block, offsets in file_blocks(dataset.path):  # type: ignore[attr-defined]
        wids, rec_len, bad = words.lines(block, offsets)
        yield words, wids, rec_len, bad
