"""Where the replay writes: a local folder, or any folder Spark's Hadoop file systems reach (``file:``,
``hdfs://``, ``s3a://``), so that a multi-host cluster can put its outputs on shared storage.

The executors write ``counts.parquet`` through Spark's writer either way; the driver writes the small files
(``summary.json``, ``timeseries.parquet``, a generator's ``dataset.csv``) itself into a local folder, and
through Hadoop's FileSystem API (or a one-partition Spark write) into a URI.

A local folder is built in a hidden staging folder and moved into place whole at the end (:func:`stage_out`,
:func:`publish_out`), and only into a folder that is new, empty or a replay's own (it holds :data:`MARKER`):
never over a user's files (:func:`check_out`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Any

from keysplit.datasets import FileDataset
from keysplit.errors import KeysplitError
from keysplit.outputs import inside, refuse_state, remove_stale, replace_entry, same_file

#: The file a replay writes into its --out folder: a folder holding it holds a replay, which the next may replace.
MARKER = ".keysplit-replay"
#: What a replay writes in --out, in the order it is moved into place: the marker first (a folder holding any of the
#: others holds it too), summary.json last (a reader that finds it finds the rest).
OUTPUTS = (MARKER, "dataset.csv", "counts.parquet", "results.parquet", "timeseries.parquet", "summary.json")
#: The staging folder's name inside an existing --out (``<prefix><pid>-...``; a new --out is staged beside it).
STAGING = ".replay-"


def is_uri(path: str) -> bool:
    """A path with a scheme (``hdfs://``, ``s3a://``, ``file:``) rather than a local file name."""
    head = path.split("/", 1)[0]
    return ":" in head and len(head.split(":", 1)[0]) > 1


def uri_of(path: str) -> str:
    """What Spark reads and writes: a URI as given, a local path as an absolute ``file:`` URI."""
    return path if is_uri(path) else "file://" + os.path.abspath(path)


def join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name if is_uri(folder) else os.path.join(folder, name)


def _fs(spark: Any, uri: str) -> tuple[Any, Any]:
    jvm = spark.sparkContext._jvm
    path = jvm.org.apache.hadoop.fs.Path(uri)
    return path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), path


def prepare_out(spark: Any, out: str) -> str:
    """The output folder, created: an absolute local path, or the URI as given."""
    if not is_uri(out):
        os.makedirs(out, exist_ok=True)
        return os.path.abspath(out)
    fs, path = _fs(spark, out)
    fs.mkdirs(path)
    return out


def check_out(dataset: Any, out: str, force: bool = False) -> None:
    """A one-line KeysplitError for a local ``--out`` that would replace the dataset being read (the same file
    under any spelling), lies in keysplit's state folder or goes through another user's link (:func:`~keysplit.
    outputs.refuse_state`), or holds files keysplit did not write: it must be missing, empty, or a replay's
    (:data:`MARKER`), unless ``force`` (then its :data:`OUTPUTS` are replaced and the rest left alone)."""
    refuse_state("--out", out)
    if isinstance(dataset, FileDataset) and not is_uri(dataset.path):
        for name in OUTPUTS:
            target = os.path.join(out, name)
            if same_file(target, dataset.path) or (os.path.isdir(target) and inside(dataset.path, target)):
                raise KeysplitError(f"--out {out} would overwrite the input {dataset.path} ({name}); choose "
                                    "another output directory")
    if not os.path.lexists(out):
        return
    if not os.path.isdir(out):
        raise KeysplitError(f"cannot create output directory {out}: File exists")  # as every command's --out
    foreign = sorted(n for n in os.listdir(out) if not n.startswith(STAGING))  # a killed replay's staging is ours
    if force or not foreign or MARKER in foreign:
        return
    shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
    raise KeysplitError(f"--out {out} holds files that are not a replay's ({shown}); a replay writes into a new or "
                        f"empty folder or one holding a replay: choose another, or add --force to replace its "
                        f"{', '.join(OUTPUTS[1:])}")


def write_marker(folder: str) -> None:
    """Mark ``folder`` (a local staging folder) as a replay's, so that the next replay may replace it."""
    with open(os.path.join(folder, MARKER), "w", encoding="utf-8") as fh:
        fh.write("This folder holds the outputs of `keysplit replay`; a new replay into it replaces "
                 f"{', '.join(OUTPUTS[1:])}.\n")


def stage_out(final: str) -> tuple[str, bool]:
    """A private folder to build a local ``--out`` in, and whether ``final`` is new. A new one is built beside
    it and renamed whole by :func:`publish_out` (no folder appears before the replay is complete); an existing
    one inside it. Its name carries this process's id, so the next replay removes what a kill -9 left."""
    fresh = not os.path.exists(final)
    where = os.path.dirname(final) if fresh else final
    prefix = f".{os.path.basename(final)}{STAGING}" if fresh else STAGING
    os.makedirs(where, exist_ok=True)
    remove_stale(where, prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=where), fresh


def publish_out(out: str, final: str, fresh: bool, names: tuple[str, ...]) -> None:
    """Move what ``out`` (from :func:`stage_out`) holds into ``final``: the folder itself when ``final`` is new,
    else each of ``names`` in turn (the last one last: a reader that finds it finds the rest)."""
    if fresh and not os.path.exists(final):
        os.rename(out, final)
        return
    os.makedirs(final, exist_ok=True)
    for name in names:
        if os.path.exists(os.path.join(out, name)):
            replace_entry(os.path.join(out, name), os.path.join(final, name))


def write_text(spark: Any, target: str, text: str) -> None:
    if not is_uri(target):
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
        return
    fs, path = _fs(spark, target)
    stream = fs.create(path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


def put_file(spark: Any, local: str, target: str) -> None:
    """Copy a local file to ``target`` (a URI), keeping the local one."""
    fs, path = _fs(spark, target)
    fs.copyFromLocalFile(False, True, spark.sparkContext._jvm.org.apache.hadoop.fs.Path(uri_of(local)), path)


def write_table(spark: Any, target: str, columns: dict, schema: str) -> None:
    """A small table (``columns``: name -> values) as Parquet: a file locally, a one-partition write to a URI."""
    if not is_uri(target):
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {"string": pa.string(), "long": pa.int64(), "double": pa.float64(), "array<long>": pa.list_(pa.int64())}
        fields = [f.strip().split(" ", 1) for f in schema.split(",")]
        pq.write_table(pa.table({name: pa.array(columns[name], types[kind]) for name, kind in fields}), target)
        return
    rows = list(zip(*columns.values()))
    spark.createDataFrame(rows, schema=schema).coalesce(1).write.mode("overwrite").parquet(target)


def local_scratch() -> str:
    return tempfile.mkdtemp(prefix="keysplit-replay-")


def remove(folder: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
