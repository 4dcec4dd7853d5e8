"""The replay job: one Spark application that replays a dataset through several groupings.

Library use: ``run_replay(spark, ReplayOptions(...))`` returns the summary it wrote to ``OUT/summary.json``.
On a cluster: ``spark-submit [--master URL] spark_replay/__main__.py --dataset SPEC --groupings ... --out DIR``
(the same options as ``keysplit replay``; the entry point is :mod:`spark_replay.__main__`, and this file still runs
as the script it was).

The walk of :func:`run_replay`, one module per step: check everything (:func:`validate`, the output folder in
:mod:`~spark_replay.storage`); **read** the dataset into chunks (:mod:`~spark_replay.sparkinput`,
:mod:`~spark_replay.text_input`, :mod:`~spark_replay.chunks`); **deal** them into S ordered sub-streams
(:mod:`~spark_replay.ingest`) and count every key exactly (:mod:`~spark_replay.key_counts`); for each grouping,
**route** (:mod:`~spark_replay.routing`), **model** (:mod:`~spark_replay.model_task`, or
:mod:`~spark_replay.queueing` for ``--arrivals lindley``) and **summarise** (:mod:`~spark_replay.summary`,
:mod:`~spark_replay.aggregates`); write the outputs (:mod:`~spark_replay.storage`).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from keysplit.datasets import FileDataset
from keysplit.errors import KeysplitError, SpecError
from keysplit.groupings import build_grouping
from keysplit.groupings.hosting import check_resizes
from keysplit.metrics import default_checkpoint
from keysplit.outputs import json_text
from keysplit.sizes import MAX_CPU_DELAY_MS
from keysplit.stream import SPLITS, check_checkpoint
from keysplit.topology_model import ARRIVALS, model_params
from spark_replay import aggregates, routing, storage
from spark_replay.ingest import Ingested, facts, ingest
from spark_replay.key_counts import count_keys
from spark_replay.model_task import merged_decisions, model_estimate
from spark_replay.options import ReplayOptions
from spark_replay.session import worker_problem
from spark_replay.sparkinput import check_lines, materialise, open_for_spark
from spark_replay.storage import is_uri, uri_of
from spark_replay.summary import replay_grouping, write_timeseries

_REMOTE_ERROR = re.compile(r"keysplit\.errors\.(\w+Error): (.+)")


@contextmanager
def user_errors(master: str = "") -> Iterator[None]:
    """A KeysplitError raised inside a Spark task (a bad CSV time value) surfaces as that one line, and so does
    a worker environment problem (:func:`spark_replay.session.worker_problem`)."""
    try:
        yield
    except KeysplitError:
        raise
    except Exception as exc:
        if type(exc).__module__.split(".")[0] not in ("pyspark", "py4j"):
            raise
        match = _REMOTE_ERROR.search(str(exc))
        if match is not None:
            raise KeysplitError(match.group(2).strip()) from None
        full = _WRITE_FAILURE.search(str(exc))
        if full is not None:  # an executor's write: --out's disk, or Spark's local folder (shuffle, spill)
            raise KeysplitError(f"a Spark task could not write: {full.group(0)} (on the disk of --out or of Spark's "
                                "local folder, spark.local.dir); free space there or choose another --out (nothing "
                                "was replaced)") from None
        problem = worker_problem(str(exc), os.environ.get("PYSPARK_PYTHON", sys.executable), master)
        if problem is None:
            raise
        raise KeysplitError(problem) from None


def validate(opts: ReplayOptions) -> list[str]:
    """Check everything before Spark reads a byte; return each grouping's routing mode."""
    if opts.workers < 1 or opts.sources < 1:
        raise SpecError("workers and sources must be at least 1")
    if opts.rate <= 0:
        raise SpecError(f"rate must be positive, got {opts.rate}")
    if not 0 <= opts.cpu_delay_ms <= MAX_CPU_DELAY_MS:
        raise SpecError(f"cpu delay must be between 0 and {MAX_CPU_DELAY_MS:,.0f} ms, got {opts.cpu_delay_ms}")
    if opts.split not in SPLITS:
        raise SpecError(f"unknown split {opts.split!r}; valid: {', '.join(SPLITS)}")
    if not opts.groupings:
        raise SpecError("no grouping to replay")
    if opts.arrivals not in ARRIVALS:
        raise SpecError(f"unknown arrivals {opts.arrivals!r}; valid: {', '.join(ARRIVALS)}")
    if opts.arrivals != "lindley":
        model_params(opts)  # the model's knobs are checked before Spark starts too
    if opts.capacities is not None and len(opts.capacities) != opts.workers:
        raise SpecError(f"--capacities needs {opts.workers} values, got {len(opts.capacities)}")
    check_resizes(opts.groupings, opts.workers, opts.resizes)
    return [routing.routing_mode(spec, opts.workers, opts.sources) for spec in opts.groupings]


def run_replay(spark: Any, opts: ReplayOptions, progress: Callable[[str], None] | None = None) -> dict:
    """Replay ``opts.dataset`` through every grouping; write and return the summary (docs/guides/replay.md)."""
    say = progress or (lambda _msg: None)
    modes = validate(opts)
    dataset = open_for_spark(spark, opts.dataset)
    check_lines(dataset)  # run's line bound, before Spark's line reader holds a giant line
    if is_uri(opts.out):
        # A folder named by URI (hdfs://, s3a://) is written in place through Hadoop's file system, where a
        # rename of a folder is not atomic on every store (s3a copies): summary.json is written last.
        out = storage.prepare_out(spark, opts.out)
        summary = _replay_into(spark, opts, modes, dataset, out, say)
        storage.write_text(spark, storage.join(out, "summary.json"), json_text(summary, "summary.json") + "\n")
        return summary
    storage.check_out(dataset, opts.out, opts.force)
    final = os.path.abspath(opts.out)
    out, fresh = storage.stage_out(final)  # moved into place at the end: never a half-written set, even after kill -9
    try:
        storage.write_marker(out)
        # the staging folder is an implementation detail: progress names each file where it will be
        summary = _replay_into(spark, opts, modes, dataset, out, lambda msg: say(msg.replace(out, final)))
        summary = json.loads(json.dumps(summary).replace(out, final))  # paths as they will be
        storage.write_text(spark, os.path.join(out, "summary.json"), json_text(summary, "summary.json") + "\n")
        storage.publish_out(out, final, fresh, storage.OUTPUTS)  # the marker first, summary.json last
    except OSError as exc:
        if exc.errno not in WRITE_FAILURES:
            raise
        raise KeysplitError(f"cannot write the replay's outputs in {final}: {exc.strerror}; free space there or "
                            "choose another --out (nothing was replaced)") from None
    finally:
        shutil.rmtree(out, ignore_errors=True)  # the staging folder, whatever ended the replay (SIGTERM included)
    return summary


#: Errors of a write that no retry mends: a full disk, a file size limit, a quota, a read-only file system.
WRITE_FAILURES = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS)
#: The same errors as Java and Python name them in a Spark task's failure.
_WRITE_FAILURE = re.compile(r"No space left on device|File too large|Disk quota exceeded|Read-only file system")


def _replay_into(spark: Any, opts: ReplayOptions, modes: list[str], dataset: Any, out: str,
                 say: Callable[[str], None]) -> dict:
    started = time.perf_counter()
    source = _materialise(spark, dataset, out)
    if source is not dataset:
        say(f"generator written to {source.path} (read back as {source.spec})")
    with user_errors(spark.sparkContext.master):
        ing, ingest_s, counts_path, counts_info, every, results = _replay_all(spark, opts, modes, source, out, say)
    ing.unpersist()
    keyed = _topology_results(spark, opts, source, out, say) if opts.topology is not None else None
    sha = ing.sha256  # computed by the executors (keysplit.fingerprint), equal to keysplit run's
    for r in results:
        r.summary.update(dataset_sha256=sha, counts=counts_path, top_k=counts_info["top_k"])
    summary = {
        "dataset": {"spec": source.spec, "requested": opts.dataset, "records": ing.records,
                    "messages": ing.messages, "keys": counts_info["keys"],
                    "p1": counts_info["top_count"] / ing.messages, "sha256": sha},
        "replay": {"master": spark.sparkContext.master, "workers": opts.workers, "sources": opts.sources,
                   "split": opts.split, "rate": opts.rate, "cpu_delay_ms": opts.cpu_delay_ms,
                   "aggregators": opts.aggregators, "spouts": opts.spouts, "flush_secs": opts.flush_secs,
                   "max_pending": opts.max_pending, "message_timeout_secs": opts.message_timeout,
                   "batch": opts.batch, "batch_ms": opts.batch_ms, "arrivals": opts.arrivals,
                   "overheads": opts.overheads, "checkpoint": every, "input_partitions": ing.partitions,
                   "ingest_seconds": ingest_s, "total_seconds": time.perf_counter() - started, "counts": counts_path,
                   "timeseries": storage.join(out, "timeseries.parquet")},
        "runs": [r.summary for r in results],
        **({"topology": keyed} if keyed is not None else {}),
    }
    write_timeseries(spark, storage.join(out, "timeseries.parquet"), results)
    return summary


def _topology_results(spark: Any, opts: ReplayOptions, source: Any, out: str, say: Callable[[str], None]) -> dict:
    """Every key's result of the topology's keyed stage, with its own accumulator (:mod:`spark_replay.results`):
    written to ``OUT/results.parquet``; the summary's ``topology`` section."""
    from keysplit.datasets.readers import CsvDataset
    from spark_replay import results as keyed

    stage = dict(opts.topology or {})
    if not isinstance(source, CsvDataset):
        raise KeysplitError(f"--dataset {source.spec}: a topology's feed spout emits the columns of a CSV file's rows; "
                            "give csv:FILE,key=COLUMN")
    keyed.ship_sources(spark.sparkContext, stage.pop("src", None))
    path = storage.join(out, "results.parquet")
    with user_errors(spark.sparkContext.master):
        keys = keyed.write_results(spark, source, stage, path)
    say(f"{keys:,} keys' results of {stage['partial']}'s accumulator written to {path}")
    return {**stage, "results": path, "keys": keys}


def _materialise(spark: Any, dataset: Any, out: str) -> Any:
    """The dataset as a file Spark reads: a generator is written to ``OUT/dataset.csv`` first (through a local
    scratch folder when OUT is a URI)."""
    if not is_uri(out) or isinstance(dataset, FileDataset):
        return materialise(dataset, out)
    scratch = storage.local_scratch()
    try:
        local = materialise(dataset, scratch)
        target = storage.join(out, "dataset.csv")
        storage.put_file(spark, local.path, target)
    finally:
        storage.remove(scratch)
    return open_for_spark(spark, local.spec.replace(local.path, target))


def _replay_all(spark: Any, opts: ReplayOptions, modes: list[str], source: Any, out: str,
                say: Callable[[str], None]) -> tuple:
    """Ingest once, write the exact counts, then replay every grouping."""
    t0 = time.perf_counter()
    ing = ingest(spark, source, opts.sources, opts.split, opts.partitions, opts.rate,
                 merged=routing.GLOBAL in modes)
    ingest_s = time.perf_counter() - t0
    say(f"read {ing.messages:,} messages in {ing.records:,} records from {ing.partitions} partition(s) "
        f"into {opts.sources} sub-stream(s) in {ingest_s:.1f} s")
    check_resizes(opts.groupings, opts.workers, opts.resizes, ing.messages)
    check_checkpoint(opts.checkpoint, ing.messages)
    groups = max(2, spark.sparkContext.defaultParallelism)
    counts_path = storage.join(out, "counts.parquet")
    counts_info = None
    frequencies = None
    if any(g.needs_full_pass for spec in opts.groupings
           for g in build_grouping(spec, opts.workers, opts.sources)[:1]):
        counts_info = count_keys(ing, groups, opts.top_k)  # the offline groupings route by the exact counts
        frequencies = spark.sparkContext.broadcast(ing.counts.collectAsMap())
    hashed = ing.hashed is not False  # unchecked yet: trusted now, checked by the counts below
    n_workers = max([opts.workers] + [r.workers for r in opts.resizes])  # every worker that ever exists
    every = opts.checkpoint or default_checkpoint(ing.messages)
    # The topology model's estimates start first, from threads of this driver: each ends in ONE task, which
    # leaves the other cores idle for as long as the model runs, so the dataset's facts, the exact counts and
    # the routing jobs below run in the meantime (Spark's FIFO scheduler gives a later job the cores an earlier
    # one leaves).
    submitted = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, len(opts.groupings))) as pool:
        # where the model's task routes the grouping's own decisions (merged_decisions), it measures them too
        estimates = [pool.submit(model_estimate, ing, spec, mode, opts, frequencies, hashed,
                                 aggregates.one_task(n_workers, every, ing.messages, len(ing.order), opts.rate)
                                 if merged_decisions(spec, mode, opts) else None)
                     if opts.arrivals != "lindley" else None for spec, mode in zip(opts.groupings, modes)]
        try:
            facts(ing)  # the fingerprint, and whether event times rise (the queues of --arrivals lindley need it)
            if counts_info is None:
                counts_info = count_keys(ing, groups, opts.top_k)
            write_counts(spark, ing, counts_path)
            say(f"exact counts of {counts_info['keys']:,} keys written to {counts_path}")
            results = [replay_grouping(spark, ing, spec, mode, opts, every, frequencies, estimate, hashed, submitted)
                       for spec, mode, estimate in zip(opts.groupings, modes, estimates)]
        except BaseException:  # a failure, Ctrl-C or SIGTERM: the model's threads wait on jobs that must end too
            spark.sparkContext.cancelAllJobs()
            raise
    if hashed and not ing.hashed:  # two keys share a fingerprint: every decision again, keys told apart by name
        say("two keys share a 64-bit fingerprint: routing again by key name")
        results = [replay_grouping(spark, ing, spec, mode, opts, every, frequencies, None, False)
                   for spec, mode in zip(opts.groupings, modes)]
    # The groupings' jobs share the cores from one start, so their times are one clock: a grouping's seconds say
    # when it was done, and only the whole pass has a rate of its own.
    routed_s = max(r.summary["seconds"] for r in results)
    if len(results) > 1:
        say(f"routed {', '.join(r.summary['grouping'].split(' ')[0] for r in results)} at once (their Spark jobs "
            f"share the cores): {ing.messages:,} messages each, all done after {routed_s:.2f} s "
            f"({ing.messages * len(results) / routed_s if routed_s > 0 else 0.0:,.0f} msg/s over all)")
    for n, r in enumerate(results, 1):
        s = r.summary
        said = "done after" if len(results) > 1 else f"{ing.messages:,} messages in"
        say(f"[{n}/{len(opts.groupings)}] {s['grouping']} ({s['mode']}): {said} {s['seconds']:.2f} s; "
            f"final imbalance {s['final_imbalance_fraction']:.3e}")
    return ing, ingest_s, counts_path, counts_info, every, results


def write_counts(spark: Any, ing: Ingested, path: str) -> None:
    """The exact counts as Parquet (``key``, ``count``), written by the executors."""
    frame = spark.createDataFrame(ing.counts, schema="key string, count long")
    frame.write.mode("overwrite").parquet(uri_of(path))  # a local folder as file:, not the default file system




if __name__ == "__main__":  # spark-submit spark_replay/job.py ARGS, as before the entry point moved
    from spark_replay.__main__ import main

    sys.exit(main())
