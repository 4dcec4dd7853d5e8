"""Every key's result of a toolkit topology's keyed stage, computed in Spark with the user's own accumulator.

The accumulator's contract (``zero``/``one``/``add``/``merge``/``result``, :mod:`keysplit.toolkit.accumulators`) is
Spark's ``combineByKey`` (``aggregateByKey(zero, seqOp, combOp)``): ``one`` creates a key's state from its first
record in a partition, ``add`` is the seqOp, ``merge`` the combOp, and ``result`` what is written. The key identity
is the merge's (``json.dumps(key)``, :class:`keysplit.toolkit.aggregate.PartialAggregate`), and each record is the
one the partial stage sees: the feed spout's fields of the row (the key column cleaned as every reader cleans it,
:meth:`keysplit.datasets.readers.CsvDataset.rows`) plus its record id, the row's index among the rows with a key
(what ``keysplit run`` stores with each row of its feed).

The CSV is read through Spark's text source, every split parsed by the reader's own ``parse_line`` (as
:mod:`spark_replay.sparkinput` does); a split is named by its first byte, so the records' indices come from the
counts of the splits before it (one small collect), without a pass in the driver.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from typing import Any

from keysplit.datasets.readers import CsvDataset
from keysplit.runs.topology_file import adopt_project_folders
from keysplit.toolkit.contract import RECORD_FIELD

#: Where a results file's columns come from: the key as the merge names it (its JSON text) and the result as JSON.
SCHEMA = "key string, result string"


def _rows(reader: CsvDataset, runs: Iterator) -> Iterator[tuple[int, int, dict]]:
    """``(split start, index in the split, row)`` of every record Spark read: each split's lines decoded and parsed
    in order (the header skipped), the row by column name with the record's cleaned key."""
    from spark_replay.chunks import decode_line
    from spark_replay.sparkinput import _row_runs

    seen: dict[int, int] = {}
    for at, (lines,) in _row_runs(runs):
        if at == 0 and at not in seen and reader.skip_header:
            lines = lines[1:]
        n = seen.get(at, 0)
        for raw in lines:
            record = reader.parse_line(decode_line(raw))
            if record is None:
                continue
            row = dict(zip(reader.columns, reader.row))
            row[reader.key_column] = record[1][0]
            yield at, n, row
            n += 1
        seen[at] = n


#: The accumulators an executor's Python built, by description: one per worker process, not one per record.
_BUILT: dict[str, Any] = {}


def _accumulator(described: dict) -> Any:
    """The accumulator ``described`` (:meth:`~keysplit.toolkit.accumulators.Accumulator.describe`), built once in this
    process: on an executor, the user's class from the shipped ``src/``."""
    from keysplit.toolkit.accumulators import load_accumulator

    name = json.dumps(described, sort_keys=True)
    if name not in _BUILT:
        _BUILT[name] = load_accumulator(described)
    return _BUILT[name]


def ship_sources(sc: Any, src: str | None) -> None:
    """The project's ``src/`` (a user's accumulator lives there) to the executors, as ``sparse jar`` puts it in the
    jar: a zip of its ``.py`` files (``addPyFile``)."""
    if not src:
        return
    folder = tempfile.mkdtemp(prefix="keysplit-src-")
    path = os.path.join(folder, "project_src.zip")
    digest = hashlib.sha256()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for here, dirs, files in os.walk(src):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            if here != src:
                zf.write(here, os.path.relpath(here, src) + "/")
            for name in sorted(files):
                if name.endswith(".py"):
                    full = os.path.join(here, name)
                    zf.write(full, os.path.relpath(full, src))
                    with open(full, "rb") as fh:
                        digest.update(os.path.relpath(full, src).encode() + b"\0" + fh.read())
    # Spark refuses a second file of one name with other contents (a second project in one session): the name
    # says what it holds, and the same contents are shipped once
    named = os.path.join(folder, f"project_src_{digest.hexdigest()[:16]}.zip")
    os.replace(path, named)
    if named.rsplit("/", 1)[-1] not in _SHIPPED.setdefault(id(sc), set()):
        _SHIPPED[id(sc)].add(named.rsplit("/", 1)[-1])
        before = list(sys.path)
        sc.addPyFile(named)  # which puts the zip on this driver's sys.path too (pyspark's context.py, for local mode)
        adopt_project_folders([p for p in sys.path if p not in before])


#: The source zips each SparkContext was given (by name).
_SHIPPED: dict[int, set[str]] = {}


def key_results(spark: Any, reader: CsvDataset, stage: dict) -> Any:
    """An RDD of ``(key, result)`` (both JSON text) for every key: ``stage`` names the router's key field, the feed's
    fields and the accumulator's description (:class:`keysplit.toolkit.shape.KeyedStage`)."""
    from spark_replay.sparkinput import _text_frame
    from spark_replay.storage import uri_of

    described, key_field, fields = stage["accumulator"], stage["key"], list(stage["feed_fields"])
    parsed = _text_frame(spark, uri_of(reader.path)).rdd.mapPartitions(lambda rows: _rows(reader, rows)).cache()
    sizes = dict(parsed.map(lambda t: (t[0], 1)).reduceByKey(lambda a, b: a + b).collect())
    offsets, total = {}, 0
    for at in sorted(sizes):  # the splits in file order: each one's first record index
        offsets[at] = total
        total += sizes[at]

    def records(items: Iterator[tuple[int, int, dict]]) -> Iterator[tuple[str, dict]]:
        for at, n, row in items:
            record = {f: row.get(f) for f in fields}
            record[RECORD_FIELD] = offsets[at] + n
            yield json.dumps(record[key_field]), record

    def accumulator() -> Any:
        return _accumulator(described)

    def one(record: dict) -> Any:
        return accumulator().one(record)

    def add(state: Any, record: dict) -> Any:
        return accumulator().add(state, record)

    def merge(a: Any, b: Any) -> Any:
        return accumulator().merge(a, b)

    def result(item: tuple[str, Any]) -> tuple[str, str]:
        return item[0], json.dumps(accumulator().result(item[1]))

    out = parsed.mapPartitions(records).combineByKey(one, add, merge).map(result)
    return out, parsed


def write_results(spark: Any, reader: CsvDataset, stage: dict, path: str) -> int:
    """Every key's result as Parquet (``key``, ``result``: JSON text), written by the executors; the keys."""
    from spark_replay.storage import uri_of

    results, parsed = key_results(spark, reader, stage)
    try:
        frame = spark.createDataFrame(results, schema=SCHEMA).cache()
        frame.write.mode("overwrite").parquet(uri_of(path))
        return int(frame.count())
    finally:
        parsed.unpersist()
