"""The text reader's words, scanned over raw bytes and interned into dense ids, compiled with numba.

The definition of a word is the text reader's (``keysplit.datasets.readers.WORD`` over ``line.lower()``). On a
line whose bytes are all ASCII that regex reduces to a byte rule: a word is a run of ``[0-9A-Za-z]``, extended by
an apostrophe (``'``) followed by another such run; ``str.lower`` only maps ``A-Z`` to ``a-z``; U+2019 and every
other non-ASCII letter cannot occur. :func:`_intern_lines` applies that rule to the ASCII lines and takes the
words of every other line (non-ASCII or invalid UTF-8, found by :func:`_mark_lines`) from the caller, who ran
the reader's regex on them, so the result equals the reader on every line (``tests/simulator/test_tokenize.py`` checks
it on random bytes and Unicode).

Interning happens in the same pass: an open-addressing table (linear probing, FNV-1a over the lowered bytes)
maps each distinct word of the batch to an id in order of first appearance and stores its bytes once in a pool,
so Python touches each distinct word of a batch once, never each occurrence.
"""

from __future__ import annotations

import numpy as np

from keysplit.simulator.compiled import kernel

_FNV_SEED = 1469598103934665603  # FNV-1a's 64-bit offset basis, kept below 2**63 (int64 arithmetic)
_FNV_PRIME = 1099511628211
_APOSTROPHE = 39


@kernel(inline=True)
def _is_alnum(c):  # pragma: no cover - compiled
    return (48 <= c <= 57) or (65 <= c <= 90) or (97 <= c <= 122)


@kernel(inline=True)
def _word_end(data, i, stop):  # pragma: no cover - compiled
    """The end of the ASCII word starting at ``i`` (an alphanumeric byte): runs joined by single apostrophes,
    as the regex ``[^\\W_]+(?:'[^\\W_]+)*`` matches them."""
    j = i + 1
    while True:
        while j < stop and _is_alnum(data[j]):
            j += 1
        if j + 1 < stop and data[j] == _APOSTROPHE and _is_alnum(data[j + 1]):
            j += 2
            continue
        return j


@kernel("void(u1[:], i8[:], b1[:])")
def _mark_lines(data, offsets, other):  # pragma: no cover - compiled
    """Mark in ``other`` the lines (``data[offsets[j]:offsets[j + 1]]``) holding a byte >= 0x80."""
    for j in range(offsets.shape[0] - 1):
        acc = 0
        for i in range(offsets[j], offsets[j + 1]):
            acc |= data[i]
        other[j] = acc >= 128


@kernel("i8(u1[:], i8[:], b1[:])")
def _count_words(data, offsets, other):  # pragma: no cover - compiled
    """The number of words in the ASCII lines, marking the others in ``other`` on the way (a byte >= 0x80 is
    never inside an ASCII word, so the scan meets it between words)."""
    words = 0
    for j in range(offsets.shape[0] - 1):
        i, stop = offsets[j], offsets[j + 1]
        found = 0
        flagged = False
        while i < stop:
            c = data[i]
            if _is_alnum(c):
                i = _word_end(data, i, stop)
                found += 1
            else:
                if c >= 128:
                    flagged = True
                    break
                i += 1
        other[j] = flagged
        if not flagged:
            words += found
    return words


@kernel(inline=True)
def _slot_of(h, mask):  # pragma: no cover - compiled
    return (h ^ (h >> 31)) & mask


@kernel("void(i8[:], i8[:], i8)")
def _rehash(slots, vhash, nvocab):  # pragma: no cover - compiled
    """Place ids 0 .. nvocab-1 into ``slots`` (all -1, a larger table than before) by their stored hashes. A
    slot is two int64, the id and the word's hash, so a probe reads one cache line."""
    mask = (slots.shape[0] >> 1) - 1
    for kid in range(nvocab):
        s = _slot_of(vhash[kid], mask)
        while slots[2 * s] >= 0:
            s = (s + 1) & mask
        slots[2 * s] = kid
        slots[2 * s + 1] = vhash[kid]


@kernel(inline=True)
def _intern(src, start, stop, lower, slots, vhash, pool, pstarts, nvocab):  # pragma: no cover - compiled
    """The id of the word ``src[start:stop]`` (ASCII-lowered first when ``lower``); a new word is appended to
    the pool and gets id ``nvocab`` (so the caller knows it is new)."""
    h = np.int64(_FNV_SEED)
    for i in range(start, stop):
        c = src[i]
        if lower and 65 <= c <= 90:
            c += 32
        h = (h ^ np.int64(c)) * np.int64(_FNV_PRIME)
    mask = (slots.shape[0] >> 1) - 1
    s = _slot_of(h, mask)
    n = stop - start
    while True:
        kid = slots[2 * s]
        if kid < 0:
            break
        if slots[2 * s + 1] == h and pstarts[kid + 1] - pstarts[kid] == n:
            p = pstarts[kid]
            same = True
            for i in range(n):
                c = src[start + i]
                if lower and 65 <= c <= 90:
                    c += 32
                if pool[p + i] != c:
                    same = False
                    break
            if same:
                return kid
        s = (s + 1) & mask
    kid = nvocab
    slots[2 * s] = kid
    slots[2 * s + 1] = h
    vhash[kid] = h
    p = pstarts[kid]
    for i in range(n):
        c = src[start + i]
        if lower and 65 <= c <= 90:
            c += 32
        pool[p + i] = c
    pstarts[kid + 1] = p + n
    return kid


@kernel("i8(u1[:], i8[:], b1[:], u1[:], i8[:], i4[:], i8, i8[:], i8[:], u1[:], i8[:], i8[:], i4[:], i4[:])")
def _intern_lines(data, offsets, other, xdata, xoffsets, xcount, line, slots, vhash, pool, pstarts, state, ids,
                  rec_len):  # pragma: no cover - compiled
    """Every line's words as ids, in order, from line ``line`` on: an ASCII line scanned here, an ``other``
    line's words taken from ``xdata`` (already lowered: word k is ``xdata[xoffsets[k]:xoffsets[k + 1]]``,
    ``xcount[m]`` of them for the m-th other line). Fills ``ids`` and ``rec_len`` (words per line).

    ``state`` carries (vocabulary size, ids written, next word of xdata, next other line) between calls. The
    call stops before a line that might not fit the table (half-full ``slots``, ``vhash`` or ``pool``) and
    returns its number, for the caller to grow the table and call again; else it returns the number of lines.
    """
    nvocab, n, x, xl = state[0], state[1], state[2], state[3]
    capacity = min(vhash.shape[0], slots.shape[0] // 4)  # slots at most half full
    for j in range(line, offsets.shape[0] - 1):
        if other[j]:
            most, size = xcount[xl], xoffsets[x + xcount[xl]] - xoffsets[x]
        else:
            size = offsets[j + 1] - offsets[j]
            most = (size + 1) // 2
        if nvocab + most > capacity or pstarts[nvocab] + size > pool.shape[0]:
            state[0], state[1], state[2], state[3] = nvocab, n, x, xl
            return j
        first = n
        if other[j]:
            for _ in range(xcount[xl]):
                kid = _intern(xdata, xoffsets[x], xoffsets[x + 1], False, slots, vhash, pool, pstarts, nvocab)
                nvocab += kid == nvocab
                ids[n] = kid
                n += 1
                x += 1
            xl += 1
        else:
            i, stop = offsets[j], offsets[j + 1]
            while i < stop:
                if _is_alnum(data[i]):
                    end = _word_end(data, i, stop)
                    kid = _intern(data, i, end, True, slots, vhash, pool, pstarts, nvocab)
                    nvocab += kid == nvocab
                    ids[n] = kid
                    n += 1
                    i = end
                else:
                    i += 1
        rec_len[j] = n - first
    state[0], state[1], state[2], state[3] = nvocab, n, x, xl
    return offsets.shape[0] - 1


@kernel("i8(u8[:], i4[:], u8[:], i8, i8[:])")
def _intern_hashes(hashes, slots, known, size, ids):  # pragma: no cover - compiled
    """``ids[k]`` = the dense id of the 64-bit key fingerprint ``hashes[k]`` (a new one gets the next id and is
    stored in ``known``); returns the new number of ids. The caller grows ``known`` and ``slots`` (a power of
    two, at most half full) beforehand: fingerprints stand for keys only where they were checked not to collide."""
    mask = slots.shape[0] - 1
    for k in range(hashes.shape[0]):
        h = hashes[k]
        s = _slot_of(np.int64(h & np.uint64(0x7FFFFFFFFFFFFFFF)), mask)
        while True:
            kid = slots[s]
            if kid < 0:
                slots[s] = size
                known[size] = h
                ids[k] = size
                size += 1
                break
            if known[kid] == h:
                ids[k] = kid
                break
            s = (s + 1) & mask
    return size


@kernel("void(i4[:], u8[:], i8)")
def _rehash_hashes(slots, known, size):  # pragma: no cover - compiled
    """Place fingerprint ids 0 .. size-1 into ``slots`` (all -1, a larger table)."""
    mask = slots.shape[0] - 1
    for kid in range(size):
        s = _slot_of(np.int64(known[kid] & np.uint64(0x7FFFFFFFFFFFFFFF)), mask)
        while slots[s] >= 0:
            s = (s + 1) & mask
        slots[s] = kid


# The key column of CSV and edge-list lines (``keysplit.simulator.columns``): one status per line.
COL_RECORD, COL_SKIP, COL_RAGGED, COL_EMPTY, COL_OTHER = 0, 1, 2, 3, 4
_COMMA, _QUOTE, _HASH, _SPACE = 44, 34, 35, 32


@kernel(inline=True)
def _is_space(c):  # pragma: no cover - compiled
    """The ASCII bytes ``str.split()`` and ``str.strip()`` take as whitespace: \\t \\n \\v \\f \\r, the four
    information separators 0x1c-0x1f, and the space."""
    return (9 <= c <= 13) or (28 <= c <= 32)


@kernel(inline=True)
def _edge_key(data, a, b, starts, ends, status, j):  # pragma: no cover - compiled
    """``EdgeDataset.parse_line`` of an ASCII line: blank or ``#`` lines and lines of one field are skipped,
    else the key is the second whitespace-separated field."""
    if a == b or data[a] == _HASH:
        status[j] = COL_SKIP
        return
    field = 0
    i = a
    while i < b:
        if _is_space(data[i]):
            i += 1
            continue
        k = i
        while k < b and not _is_space(data[k]):
            k += 1
        if field == 1:
            starts[j], ends[j], status[j] = i, k, COL_RECORD
            return
        field += 1
        i = k
    status[j] = COL_SKIP


@kernel(inline=True)
def _csv_key(data, a, b, width, key_index, starts, ends, status, j):  # pragma: no cover - compiled
    """``CsvDataset.parse_line`` of a printable ASCII line without quotes (the csv module splits it at every
    comma): a blank line is skipped, a row of another width is ragged, else the key field stripped of spaces
    (``clean_key``: no tab or line break can occur) is the key, or an empty key."""
    blank = True
    fields = 1
    ks, ke = a, b
    for i in range(a, b):
        c = data[i]
        if c != _SPACE:
            blank = False
        if c == _COMMA:
            if fields == key_index:
                ks = i + 1
            elif fields == key_index + 1:
                ke = i
            fields += 1
    if key_index == 0:
        ks = a
    if blank:
        status[j] = COL_SKIP
        return
    if fields != width:
        status[j] = COL_RAGGED
        return
    while ks < ke and data[ks] == _SPACE:
        ks += 1
    while ke > ks and data[ke - 1] == _SPACE:
        ke -= 1
    starts[j], ends[j] = ks, ke
    status[j] = COL_RECORD if ke > ks else COL_EMPTY


@kernel("void(u1[:], i8[:], b1, i8, i8, i8[:], i8[:], i1[:])")
def _scan_columns(data, offsets, csv, width, key_index, starts, ends, status):  # pragma: no cover - compiled
    """Each line's key span (``starts``/``ends``) and status (``COL_*``): CSV (``csv``: ``width`` fields, the key
    field number ``key_index``) or an edge list. Lines the byte rules do not cover are ``COL_OTHER``: a byte >=
    0x80 (edges, CSV), or a control byte or a double quote (CSV), for the caller to give to the reader."""
    for j in range(offsets.shape[0] - 1):
        a, b = offsets[j], offsets[j + 1]
        while b > a and (data[b - 1] == 10 or data[b - 1] == 13):  # the reader's rstrip("\r\n")
            b -= 1
        other = False
        for i in range(a, b):
            c = data[i]
            if c >= 128 or (csv and (c < 32 or c == _QUOTE or c == 127)):
                other = True
                break
        if other:
            status[j] = COL_OTHER
        elif csv:
            _csv_key(data, a, b, width, key_index, starts, ends, status, j)
        else:
            _edge_key(data, a, b, starts, ends, status, j)


@kernel("i8(u1[:], i8[:], i8[:], i8, i8[:], i8[:], u1[:], i8[:], i8[:], i4[:])")
def _intern_spans(buf, starts, ends, first, slots, vhash, pool, pstarts, state, ids):  # pragma: no cover - compiled
    """``ids[k]`` = the id of the key ``buf[starts[k]:ends[k]]`` (as it is, not lowered), from ``k = first``
    on; ``state[0]`` is the vocabulary size. Stops before a key that might not fit the table and returns its
    index for the caller to grow the table and call again; else returns the number of keys."""
    nvocab = state[0]
    capacity = min(vhash.shape[0], slots.shape[0] // 4)  # slots at most half full
    for k in range(first, starts.shape[0]):
        if nvocab + 1 > capacity or pstarts[nvocab] + ends[k] - starts[k] > pool.shape[0]:
            state[0] = nvocab
            return k
        kid = _intern(buf, starts[k], ends[k], False, slots, vhash, pool, pstarts, nvocab)
        nvocab += kid == nvocab
        ids[k] = kid
    state[0] = nvocab
    return starts.shape[0]
