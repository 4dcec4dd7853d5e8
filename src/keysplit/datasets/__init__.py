"""Datasets by spec string: generators (``zipf:...``, ``lognormal:...``, ``drift:...``, ``country-skew:...``)
and file readers (``text:PATH``, ``edges:PATH``, ``csv:PATH,key=COL[,time=COL]``, ``parquet:PATH,key=COL``).

>>> ds = open_dataset("zipf:z=1.0,keys=100,messages=5,seed=1")
>>> [keys for _, keys in ds.records()]
[['k8'], ['k78'], ['k1'], ['k77'], ['k3']]
"""

from __future__ import annotations

import contextlib
import csv
import gzip
import io
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import IO

from keysplit.datasets.base import (
    Dataset,
    Record,
    decode_record,
    encode_record,
    require_records,
)
from keysplit.datasets.generators import GENERATORS, Generator
from keysplit.datasets.readers import READERS, WORD, FileDataset
from keysplit.errors import DatasetError, SpecError
from keysplit.specs import bind_params, parse_spec


def open_dataset(spec: str) -> Dataset:
    """The dataset named by ``spec``; SpecError/DatasetError with one clear line when it is wrong."""
    kind, sep, rest = spec.strip().partition(":")
    kind = kind.strip().lower()
    if kind in READERS:
        parts = [p for p in rest.split(",")] if sep else []
        path = parts[0].strip() if parts else ""
        if not path:
            raise SpecError(f"dataset {spec!r} names no file; expected {kind}:PATH")
        try:
            _, options = parse_spec(f"{kind}:" + ",".join(parts[1:]))
        except SpecError as exc:  # the options without the path: name the whole spec
            raise SpecError(f"dataset {spec!r}: {exc}") from None
        reader = READERS[kind]
        if kind in ("csv", "parquet"):
            unknown = sorted(set(options) - {"key", "time"})
            if unknown or "key" not in options:
                raise SpecError(f"{kind} datasets take key=COLUMN and optionally time=COLUMN, got {spec!r}")
            return reader(os.path.expanduser(path), options["key"], options.get("time"))
        if options:
            raise SpecError(f"{kind} datasets take only a path, got {spec!r}")
        return reader(os.path.expanduser(path))
    if kind in GENERATORS:
        gen = GENERATORS[kind]
        _, raw = parse_spec(spec)
        return gen(**bind_params(kind, gen.PARAMS, raw))
    if os.path.isfile(os.path.expanduser(spec.strip())):  # a file named without its reader
        raise SpecError(f"dataset {spec!r} is a file but not a dataset spec; did you mean "
                        f"{reader_spec(spec.strip())!r}?")
    valid = ", ".join(list(GENERATORS) + [f"{k}:PATH" for k in READERS])
    raise SpecError(f"unknown dataset {spec!r}; valid kinds: {valid}")


def reader_spec(path: str) -> str:
    """The reader spec a file's name suggests: ``csv:PATH,key=key`` for a .csv, ``parquet:...`` for a .parquet,
    else ``text:PATH`` (``key=key`` is the column ``datasets generate`` writes)."""
    name = path.lower().removesuffix(".gz")
    if name.endswith(".csv"):
        return f"csv:{path},key=key"
    if name.endswith(".parquet"):
        return f"parquet:{path},key=key"
    return f"text:{path}"


def write_dataset(dataset: Dataset, out: str, words_per_line: int | None = None) -> tuple[str, int]:
    """Write ``dataset`` as CSV (``key`` column, plus ``time`` when records carry timestamps; gzip if
    ``out`` ends in .gz). Returns the spec that reads it back record for record, and the record count.

    With ``words_per_line`` the keys are written instead as a text file, that many per line (a corpus for
    the word-count topology, where one line is one spout tuple); ``text:OUT`` reads the same keys back.
    Multi-key records (text lines) cannot be written: they are already a file.
    """
    if words_per_line is not None:
        return _write_text(dataset, out, words_per_line)
    if isinstance(dataset, Generator) and hasattr(dataset, "rows"):  # a generator of whole rows (pageviews)
        return _write_rows(dataset, out)
    records = iter(dataset.records())
    first = next(records, None)
    if first is None:
        raise DatasetError(f"dataset {dataset.spec!r} has no records to write")
    if len(first[1]) != 1:
        raise DatasetError("only single-key datasets (generators, edges, csv) can be written; "
                           "a text dataset is already a file")
    timed = first[0] is not None
    count = 0
    with _text_output(out) as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["key", "time"] if timed else ["key"])
        for ts, keys in _chain(first, records):
            if len(keys) != 1:
                raise DatasetError("only single-key datasets can be written as CSV")
            writer.writerow([keys[0], repr(ts)] if timed else [keys[0]])
            count += 1
    return f"csv:{out},key=key" + (",time=time" if timed else ""), count


def _write_rows(dataset, out: str) -> tuple[str, int]:
    """A generator's rows with all their columns (the first is its time, the second its key)."""
    opener = gzip.open if out.endswith(".gz") else open
    columns = list(dataset.columns)
    count = 0
    try:
        with opener(out, "wt", encoding="utf-8", newline="") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(columns)
            for row in dataset.rows():
                writer.writerow([row[c] for c in columns])
                count += 1
    except OSError as exc:
        raise DatasetError(f"cannot write {out}: {exc.strerror or exc}") from None
    return f"csv:{out},key={columns[1]},time={columns[0]}", count


def _write_text(dataset: Dataset, out: str, words_per_line: int) -> tuple[str, int]:
    if words_per_line < 1:
        raise DatasetError(f"words per line must be at least 1, got {words_per_line}")
    lines = 0
    line: list[str] = []
    with _text_output(out) as fh:
        for _, keys in dataset.records():
            for key in keys:
                if WORD.fullmatch(key) is None or key != key.lower():
                    raise DatasetError(f"key {key!r} is not one lower-case word, so a text file would not "
                                       "read it back as one key; write CSV instead")
                line.append(key)
                if len(line) == words_per_line:
                    fh.write(" ".join(line) + "\n")
                    lines += 1
                    line.clear()
        if line:
            fh.write(" ".join(line) + "\n")
            lines += 1
        if not lines:
            raise DatasetError(f"dataset {dataset.spec!r} has no records to write")
    return f"text:{out}", lines


def _remove_dead_temporaries(folder: str, prefix: str) -> None:
    """Remove this user's ``<prefix><pid>-*.tmp`` files in ``folder`` whose process is gone: what a ``kill -9``
    of an earlier write of the same file left (the pid in the name says whose it is; a live one is left alone)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].split("-", 1)[0] if name.startswith(prefix) and name.endswith(".tmp") else ""
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (a write of the same file right now)
        except PermissionError:
            continue  # alive, another user's
        except (ProcessLookupError, OverflowError):
            pass
        path = os.path.join(folder, name)
        with contextlib.suppress(OSError):
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                os.unlink(path)


@contextlib.contextmanager
def _text_output(out: str) -> Iterator[IO[str]]:
    """UTF-8 text written under a hidden temporary name beside ``out`` (gzipped when ``out`` ends in .gz) and
    renamed to ``out`` only when complete: a failure or Ctrl-C removes it, and even ``kill -9`` leaves no
    truncated file under the final name. (Not :func:`keysplit.outputs.atomic_file`: the dataset readers travel
    in the topology jar, which holds no CLI module.)"""
    folder = os.path.dirname(os.path.abspath(out))
    prefix = f".{os.path.basename(out)}."
    _remove_dead_temporaries(folder, prefix)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{os.getpid()}-", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise DatasetError(f"cannot write {out}: {exc.strerror or exc}") from None
    try:
        with open(fd, "wb") as raw:
            # a gzip member names no file: the temporary name would otherwise be recorded in its header
            binary = gzip.GzipFile(filename="", mode="wb", fileobj=raw) if out.endswith(".gz") else raw
            with binary, io.TextIOWrapper(binary, encoding="utf-8", newline="") as fh:
                yield fh
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # mkstemp makes 0600; a dataset file gets the usual mode
        os.replace(tmp, out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise DatasetError(f"cannot write {out}: {exc.strerror or exc}") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _chain(first: Record, rest):
    yield first
    yield from rest


__all__ = [
    "GENERATORS",
    "READERS",
    "Dataset",
    "FileDataset",
    "Generator",
    "Record",
    "decode_record",
    "encode_record",
    "open_dataset",
    "require_records",
    "write_dataset",
]
