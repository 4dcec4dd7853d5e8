"""Java's ``hashCode`` of multi-lang tuple values, and Storm's fields-grouping index built on it: the one copy
of ``String.hashCode`` in keysplit. The Storm components (``storm/streams.py``: which task a word's fields
grouping picks), the local runner (``local/grouper.py``) and the topology model (``topology_model/driver.py``)
all import it; it is top-level and imports nothing of keysplit, so it ships in the topology jar.

Storm 2.x chooses the target of a fields grouping as ``targetTasks.get(Math.floorMod(
Arrays.deepHashCode(selectedValues), numTasks))`` over the consumer's **sorted** task ids
(apache/storm ``storm-client/.../daemon/GrouperFactory.java`` ``FieldsGrouper`` and ``mkGrouper``'s
``Ordering.natural().sortedCopy``; ``storm-client/.../utils/TupleUtils.java`` ``chooseTaskIndex``). Storm 1.x
computes ``(mod (list-hash-code selected) num-tasks)`` (``storm-core/src/clj/org/apache/storm/daemon/executor.clj``
``mk-fields-grouper``, ``tuple.clj`` ``list-hash-code`` = the same deep hash); Clojure's ``mod`` is floored
like ``Math.floorMod``, so both lines pick the same task for every hash.

The values are what Storm's ``multilang/JsonSerializer.java`` parsed from the component's JSON: strings are
``java.lang.String`` (hashed over UTF-16 code units, so a character outside the BMP is two surrogates), JSON
integers are ``Integer`` when they fit in 32 bits and ``Long`` otherwise in Storm >= 2.6 (json-smart) and
always ``Long`` before (json-simple), decimals ``Double``, ``true``/``false`` ``Boolean``, arrays ``List``,
objects ``Map``, ``null`` null. ``Integer`` and ``Long`` hash alike for every non-negative value that fits
in 32 bits; for negative ones they differ, so :func:`java_hash` takes ``long_ints`` to pick Storm 1.x's
``Long`` (the default, ``False``, is Storm 2.6+).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

_MASK = 0xFFFFFFFF


def _int32(value: int) -> int:
    value &= _MASK
    return value - (1 << 32) if value & 0x80000000 else value


@lru_cache(maxsize=1 << 16)  # the runner hashes the same words over and over (aggregators' fields grouping)
def string_hash(text: str) -> int:
    """``java.lang.String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as int32.

    >>> string_hash("a"), string_hash("hello"), string_hash("😀")
    (97, 99162322, 1772899)
    """
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & _MASK
    return _int32(h)


def long_hash(value: int) -> int:
    """``Long.hashCode``: ``(int)(value ^ (value >>> 32))`` of the 64-bit two's complement value."""
    bits = value & 0xFFFFFFFFFFFFFFFF
    return _int32(bits ^ (bits >> 32))


def double_hash(value: float) -> int:
    """``Double.hashCode``: ``Long.hashCode`` of ``doubleToLongBits`` (every NaN is the canonical NaN)."""
    if value != value:
        bits = 0x7FF8000000000000
    else:
        bits = struct.unpack(">q", struct.pack(">d", value))[0]
    return long_hash(bits)


def java_hash(value: object, long_ints: bool = False) -> int:
    """Java's ``hashCode`` of a JSON-decoded multi-lang value (see the module docstring for the types)."""
    if value is None:
        return 0
    if isinstance(value, str):
        return string_hash(value)
    if isinstance(value, bool):
        return 1231 if value else 1237  # Boolean.hashCode
    if isinstance(value, int):
        if not long_ints and -(1 << 31) <= value < (1 << 31):
            return value  # Integer.hashCode
        return long_hash(value)
    if isinstance(value, float):
        return double_hash(value)
    if isinstance(value, (list, tuple)):
        return list_hash(value, long_ints)
    if isinstance(value, dict):  # AbstractMap.hashCode: sum of key.hashCode() ^ value.hashCode()
        return _int32(sum(java_hash(k, long_ints) ^ java_hash(v, long_ints) for k, v in value.items()))
    raise TypeError(f"no Java hashCode for a JSON value of type {type(value).__name__}")


def list_hash(values: Sequence[object], long_ints: bool = False) -> int:
    """``Arrays.deepHashCode`` / ``List.hashCode``: ``h = 31*h + hash(e)`` from 1, as int32."""
    h = 1
    for value in values:
        h = (31 * h + java_hash(value, long_ints)) & _MASK
    return _int32(h)


def choose_task_index(values: Sequence[object], num_tasks: int, long_ints: bool = False) -> int:
    """``TupleUtils.chooseTaskIndex``: ``Math.floorMod(listHashCode(values), numTasks)``, the index among the
    consumer's sorted task ids that Storm's fields grouping gives a tuple whose grouping fields are ``values``.

    >>> choose_task_index(["a"], 2), choose_task_index(["hello"], 3), choose_task_index(["polygenelubricants"], 5)
    (0, 2, 3)
    """
    return list_hash(values, long_ints) % num_tasks  # Python's % is floored, as Math.floorMod
