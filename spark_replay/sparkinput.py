"""Reading a dataset file through Spark's own input layer, so that any path Spark reads works: a local path,
``file:``, ``hdfs://``, ``s3a://`` (given the usual connector on the cluster's classpath).

Text-like files (``text:``, ``edges:``, ``csv:``) go through Spark's ``text`` source with ``lineSep="\\n"``,
which splits exactly where Python's binary ``readline`` does (a lone ``\\r`` stays inside its line); lines
arrive as raw bytes (the column cast to binary, so Java never decodes them) and are decoded as
:meth:`FileDataset.lines` decodes them (invalid UTF-8 replaced), then parsed by the reader's own
``parse_line``. Hadoop decompresses a ``.gz`` file (by its name; a gzip file not named ``.gz`` is refused with
the fix). Parquet goes through Spark's ``parquet`` source, each row through the reader's ``make_record``.
Rows reach Python row by row, or for a file of :data:`ARROW_MIN_BYTES` or more as Arrow batches (the same
runs of rows either way). Every split of the file is read by one task, in order, and
``_metadata.file_block_start`` (the split's first byte) names it, so the chunks ``(split start, n)`` sort in
file order: each record gets exactly the index, and each message the sequence number, it has in ``simulate``
and in the topology's feed.
"""

from __future__ import annotations

import itertools
import math
import os
import pickle
import zlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from keysplit.datasets import open_dataset, write_dataset
from keysplit.datasets.base import Dataset
from keysplit.datasets.readers import (
    BOM,
    MAX_LINE_BYTES,
    READERS,
    CsvDataset,
    FileDataset,
    ParquetDataset,
    bounded_lines,
    open_binary,
)
from keysplit.errors import DatasetError, SpecError
from keysplit.simulator.columns import is_plain_column
from keysplit.simulator.tokenize import is_plain_text
from spark_replay.chunks import SLICE_BYTES, Chunk, ChunkBuilder, decode_line
from spark_replay.storage import is_uri, uri_of
from spark_replay.text_input import arrow_runs, byte_runs, plain_text_chunks

GZIP_MAGIC = b"\x1f\x8b"


def remote_spec(spec: str) -> tuple[str, str, list[str]] | None:
    """``(kind, uri, options)`` when ``spec`` names a file by URI (read on the cluster, never by this process)."""
    kind, sep, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind not in READERS or not sep:
        return None
    parts = rest.split(",")
    return (kind, parts[0].strip(), parts[1:]) if is_uri(parts[0].strip()) else None


def open_for_spark(spark: Any, spec: str) -> Dataset:
    """``open_dataset(spec)``, except that a file named by URI is checked through Spark (its header or schema)
    instead of being opened here."""
    remote = remote_spec(spec)
    if remote is None:
        return open_dataset(spec)
    kind, uri, options = remote
    reader = READERS[kind]
    ds: Any = object.__new__(reader)  # the readers' constructors open the file with Python; Spark reads it here
    ds.path, ds.invalid_utf8_lines, ds.skipped_lines = uri, 0, 0
    ds.spec = f"{kind}:{uri}"
    if reader in (CsvDataset, ParquetDataset):
        named = dict(o.split("=", 1) for o in options if "=" in o)
        if "key" not in named or set(named) - {"key", "time"}:
            raise SpecError(f"{kind} datasets take key=COLUMN and optionally time=COLUMN, got {spec!r}")
        ds.key_column, ds.time_column, ds.empty_keys = named["key"], named.get("time"), 0
        ds.spec += f",key={ds.key_column}" + (f",time={ds.time_column}" if ds.time_column else "")
        columns = _columns(spark, ds)
        for wanted in filter(None, (ds.key_column, ds.time_column)):
            if wanted not in columns:
                raise DatasetError(f"{uri}: no column {wanted!r} (columns: {', '.join(columns) or 'none'})")
        if reader is CsvDataset:
            ds.key_index = columns.index(ds.key_column)
            ds.time_index = columns.index(ds.time_column) if ds.time_column else None
            ds.width = len(columns)  # a ragged row is skipped and counted, as from a local file
    elif options:
        raise SpecError(f"{kind} datasets take only a path, got {spec!r}")
    return ds


def materialise(dataset: Dataset, out_dir: str) -> FileDataset:
    """A file dataset for ``dataset``: itself, or a generator written out first as ``out_dir/dataset.csv``."""
    if isinstance(dataset, FileDataset):
        if not is_uri(dataset.path):
            dataset.path = os.path.abspath(dataset.path)
        return dataset
    os.makedirs(out_dir, exist_ok=True)
    spec, _ = write_dataset(dataset, os.path.join(out_dir, "dataset.csv"))
    written = open_dataset(spec)
    assert isinstance(written, FileDataset)
    return written


#: Bytes read at a time by :func:`check_lines`: at most the line bound, so a line inside one block is within it.
_SCAN_BYTES = MAX_LINE_BYTES
#: The files :func:`check_lines` passed: (real path, size, modification time).
_checked: set[tuple[str, int, int]] = set()


def check_lines(dataset: Dataset) -> None:
    """Refuse, in one line and before Spark reads a byte, a local text, edge or CSV file with a line longer than
    ``keysplit run``'s bound (:data:`~keysplit.datasets.readers.MAX_LINE_BYTES`): Spark's line reader would
    hold the whole line in an executor's memory first (a 1 GB line: a 79-line traceback after 102 s). One pass at
    memchr speed, a block at a time; a long line is found within one block of its start. A file named by URI is
    read only on the cluster, unchecked."""
    if not isinstance(dataset, FileDataset) or isinstance(dataset, ParquetDataset) or is_uri(dataset.path):
        return
    st = os.stat(dataset.path)
    seen = (os.path.realpath(dataset.path), st.st_size, st.st_mtime_ns)
    if seen in _checked:  # the command checks before the JVM starts, the job again: one pass
        return
    run = start = 0  # bytes since the last line end, and where that line starts
    with open_binary(dataset.path) as fh:
        while True:
            try:
                block = fh.read(_SCAN_BYTES)
            except (OSError, EOFError, zlib.error):  # corrupt gzip data: the readers report it, as without a scan
                return
            end = block.find(b"\n")
            if run + (len(block) if end < 0 else end) > MAX_LINE_BYTES:
                _refuse_line(dataset.path, start)
            if not block:
                _checked.add(seen)
                return
            if end < 0:
                run += len(block)
                continue
            last = block.rfind(b"\n")
            start = fh.tell() - len(block) + last + 1
            run = len(block) - last - 1


def _refuse_line(path: str, start: int) -> None:
    """The reader's own one-line error for the line starting at byte ``start``, with its number."""
    with open_binary(path) as fh:
        number = sum(fh.read(min(_SCAN_BYTES, start - at)).count(b"\n") for at in range(0, start, _SCAN_BYTES)) + 1
        next(bounded_lines(fh, f"{path} line {number}", numbered=False))  # raises: the line is too long


def _columns(spark: Any, ds: Any) -> list[str]:
    try:
        if isinstance(ds, ParquetDataset):
            return list(spark.read.parquet(ds.path).columns)
        first = _text_frame(spark, ds.path).limit(1).collect()
    except Exception as exc:  # AnalysisException: path not found, not Parquet...
        raise DatasetError(f"cannot read dataset file {ds.path}: {str(exc).splitlines()[0]}") from None
    if not first:
        raise DatasetError(f"dataset file is empty: {ds.path}")
    return ds.parse_row(decode_line(bytes(first[0][0])).removeprefix(BOM))


def _text_frame(spark: Any, uri: str) -> Any:
    from pyspark.sql import functions as F

    frame = spark.read.format("text").option("lineSep", "\n").load(uri)
    return frame.select(F.col("value").cast("binary").alias("line"), F.col("_metadata.file_block_start").alias("at"))


def head_bytes(spark: Any, uri: str, n: int = 2) -> bytes:
    """The first ``n`` bytes of a file, through Hadoop's FileSystem (the driver reads nothing else)."""
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    fs = path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.open(path)
    try:
        return bytes((stream.read() & 0xFF) for _ in range(n))
    finally:
        stream.close()


def check_gzip_name(spark: Any, dataset: FileDataset) -> None:
    """Spark decompresses by file name, the readers by content: refuse a file where the two disagree."""
    if isinstance(dataset, ParquetDataset):
        return
    uri = uri_of(dataset.path)
    gzipped = head_bytes(spark, uri) == GZIP_MAGIC
    if gzipped != dataset.path.endswith(".gz"):
        what = "holds gzip data but is not named .gz" if gzipped else "is named .gz but does not hold gzip data"
        raise DatasetError(f"dataset file {dataset.path} {what}; Spark decompresses by file name: rename it")


def spark_chunks(spark: Any, dataset: FileDataset, partitions: int | None) -> tuple[Any, int]:
    """The dataset's chunks as an RDD, read by Spark, and the number of input partitions.

    Splits are at most :data:`~spark_replay.chunks.SLICE_BYTES` (what one task parses and deals, so its
    memory does not grow with the file), or the file cut into ``partitions`` (``--partitions``). Spark takes
    split sizes from two session settings, read when the RDD is planned: they are set for that moment only.
    """
    check_gzip_name(spark, dataset)
    uri = uri_of(dataset.path)
    if partitions:
        settings = {"spark.sql.files.maxPartitionBytes": str(max(1, math.ceil(_size(spark, uri) / partitions))),
                    "spark.sql.files.openCostInBytes": "0"}
    else:
        settings = {"spark.sql.files.maxPartitionBytes": str(SLICE_BYTES)}
    saved = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        if isinstance(dataset, ParquetDataset):
            frame = _parquet_frame(spark, uri, dataset)
            reader = (dataset.path, dataset.key_column, dataset.time_column)

            def parse(rows: Iterator) -> Iterator:
                return parquet_chunks(reader, rows)
        else:
            frame = _text_frame(spark, uri)

            def parse(rows: Iterator) -> Iterator:
                return text_chunks(dataset, rows)
        # planned now, with the split settings above
        # its lines go to the compiled readers as bytes (text_input): the tokenizer, or the key column
        plain = is_plain_text(dataset) or is_plain_column(dataset)
        column = dataset if is_plain_column(dataset) else None
        if _size(spark, uri) < ARROW_MIN_BYTES:
            rows = frame.rdd
            if plain:
                return rows.mapPartitions(lambda it: plain_text_chunks(byte_runs(_row_runs(it)), dataset=column)), \
                    rows.getNumPartitions()
            return rows.mapPartitions(lambda it: parse(_row_runs(it))), rows.getNumPartitions()
        # rows reach Python as Arrow batches, each chunk comes back as one pickled value of a one-row batch
        if plain:
            chunks = frame.mapInArrow(
                lambda batches: _pickled(plain_text_chunks(arrow_runs(batches), dataset=column)), "chunk binary")
        else:
            chunks = frame.mapInArrow(lambda batches: _pickled(parse(_arrow_runs(batches))), "chunk binary")
        return chunks.rdd.map(lambda row: pickle.loads(row[0])), chunks.rdd.getNumPartitions()
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _size(spark: Any, uri: str) -> int:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return int(path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).getFileStatus(path).getLen())


def _parquet_frame(spark: Any, uri: str, dataset: ParquetDataset) -> Any:
    from pyspark.sql import functions as F

    frame = spark.read.parquet(uri)
    cols = [F.col(f"`{c}`") for c in dataset.columns]
    return frame.select(*cols, F.col("_metadata.file_block_start").alias("at"))


#: Rows taken at a time from Spark's row iterator (one split's run is cut there too).
ROWS = 4096
#: Files at least this large reach Python as Arrow batches (``mapInArrow``), smaller ones row by row: the
#: Arrow hand-over costs ~1.5 s per million lines against ~10 s row by row, but its start (pandas and Arrow
#: in the driver and in every Python worker) costs 2 to 3 s per replay, more than a small file's rows.
ARROW_MIN_BYTES = 4 << 20


def _row_runs(rows: Iterator) -> Iterator[tuple[int, list]]:
    """``(split start, column lists)`` for each run of rows of one split, in the order Spark read them (rows
    are ``(columns..., split start)``)."""
    batch: list = []
    for row in rows:
        if batch and (row[-1] != batch[0][-1] or len(batch) >= ROWS):
            yield batch[0][-1], [list(col) for col in zip(*batch)][:-1]
            batch = []
        batch.append(row)
    if batch:
        yield batch[0][-1], [list(col) for col in zip(*batch)][:-1]


def _arrow_runs(batches: Iterator) -> Iterator[tuple[int, list]]:
    """:func:`_row_runs` from Arrow record batches whose last column is the split start."""
    for batch in batches:
        at = batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False)
        cuts = [0, *(np.flatnonzero(at[1:] != at[:-1]) + 1).tolist(), len(at)]
        for lo, hi in itertools.pairwise(cuts):
            for start in range(lo, hi, ROWS):
                part = batch.slice(start, min(hi, start + ROWS) - start)
                yield int(at[lo]), [part.column(i).to_pylist() for i in range(batch.num_columns - 1)]


def _pickled(chunks: Iterator[Chunk]) -> Iterator:
    import pyarrow as pa

    for chunk in chunks:
        yield pa.RecordBatch.from_arrays([pa.array([pickle.dumps(chunk, protocol=5)], pa.large_binary())],
                                         ["chunk"])


def text_chunks(reader: FileDataset, rows: Iterator) -> Iterator[Chunk]:
    """Chunks of the lines Spark read (``rows``: runs of :func:`_row_runs`): each split's lines decoded and
    parsed in order (the header skipped)."""
    builder: ChunkBuilder | None = None
    for at, (lines,) in rows:
        if builder is None or builder.part != at:
            if builder is not None:
                yield from builder.finish()
            builder = ChunkBuilder(at)
            if reader.skip_header and at == 0:
                lines = lines[1:]
        records = filter(None, map(reader.parse_line, map(decode_line, lines)))
        yield from builder.add(records)
    if builder is not None:
        yield from builder.finish()


def parquet_chunks(reader: tuple, rows: Iterator) -> Iterator[Chunk]:
    """Chunks of the Parquet rows Spark read (``rows``: runs of :func:`_row_runs`), each through the reader's
    ``make_record``."""
    ds: Any = object.__new__(ParquetDataset)  # no file opened on the executor: Spark read the rows
    ds.path, ds.key_column, ds.time_column, ds.empty_keys = *reader, 0
    builder: ChunkBuilder | None = None
    for at, cols in rows:
        if builder is None or builder.part != at:
            if builder is not None:
                yield from builder.finish()
            builder = ChunkBuilder(at)
        keys = cols[0]
        times = cols[1] if len(cols) > 1 else [None] * len(keys)
        records = (ds.make_record("" if k is None else str(k), t) for k, t in zip(keys, times))
        yield from builder.add(r for r in records if r is not None)
    if builder is not None:
        yield from builder.finish()


def read_failure(exc: BaseException, dataset: FileDataset) -> DatasetError | None:
    """A one-line DatasetError for a file Spark's readers could not read (its root cause), else None."""
    text = str(exc)
    if "keysplit.errors." in text:
        return None  # a reader's own DatasetError, raised in a task: the job's user_errors reports it
    causes = [line.split("Caused by: ", 1)[1] for line in text.splitlines() if "Caused by: " in line]
    if not causes:
        return None
    root = causes[-1].strip()
    reason = root.split(": ", 1)[1] if ": " in root else root
    if isinstance(dataset, ParquetDataset):
        return DatasetError(f"cannot read Parquet file {dataset.path}: {reason}")
    if dataset.path.endswith(".gz"):
        return DatasetError(f"cannot read dataset file {dataset.path}: corrupt gzip data ({reason})")
    return DatasetError(f"cannot read dataset file {dataset.path}: {reason}")
