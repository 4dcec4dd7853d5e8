"""``keysplit replay FILE --dataset csv:...``: a topology file's keyed stage replayed in Spark.

The file is the one ``keysplit run FILE`` runs, read with streamparse's own loader
(:func:`keysplit.runs.topology_file.load_topology`); its specs give what the word count's options give (the grouping,
the routers, the partial and merge tasks, the period, the batches: :class:`keysplit.toolkit.shape.KeyedStage`), so
those options are refused, and the Storm settings ``keysplit run FILE`` takes (``--max-pending``,
``--message-timeout``, ``--split``) apply under the same names and defaults.
"""

from __future__ import annotations

import argparse
from typing import Any

from keysplit.errors import KeysplitError

#: `keysplit replay` options that a topology file states in its specs instead.
STATED_BY_FILE = ("groupings", "workers", "sources", "cpu_delay", "aggregators", "spouts", "flush", "batch",
                  "batch_ms", "arrivals", "resize", "capacities")


def load_stage(target: str) -> tuple[Any, Any]:
    """``(KeyedStage, project root)`` of ``path/to/topology.py``: the class ``keysplit run`` and ``sparse submit``
    find (streamparse's own loader, :func:`keysplit.runs.topology_file.load_topology`), checked."""
    from keysplit.runs.topology_file import load_topology
    from keysplit.toolkit.shape import keyed_stage

    loaded = load_topology(target)
    return keyed_stage(loaded.cls), loaded.root


def replay_options(args: argparse.Namespace, defaults: dict[str, Any], overheads: dict) -> Any:
    """The replay's options for the topology file ``args.topology``: its keyed stage's knobs, the dataset as its
    router reads it (with its time field), the Storm settings of the command line."""
    from keysplit.datasets import open_dataset
    from keysplit.datasets.readers import CsvDataset
    from keysplit.toolkit.shape import source_folder
    from spark_replay.options import ReplayOptions

    given = [f"--{name.replace('_', '-')}" for name in STATED_BY_FILE
             if getattr(args, name, None) != defaults.get(name)]
    if given:
        raise KeysplitError(f"{', '.join(given)}: a topology file states its grouping, parallelism, period and batches "
                            "in its specs; replay it without these (they are for the word count)")
    stage, root = load_stage(args.topology)
    dataset = open_dataset(args.dataset)
    if not isinstance(dataset, CsvDataset):
        raise KeysplitError(f"--dataset {args.dataset}: {stage.topology}'s feed spout emits the columns of a CSV "
                            "file's rows; give csv:FILE,key=COLUMN, as to `keysplit run`")
    if dataset.key_column != stage.key:
        raise KeysplitError(f"--dataset keys records by {dataset.key_column!r} but {stage.router} routes by "
                            f"{stage.key!r}: give key={stage.key}, as to `keysplit run`")
    missing = [f for f in stage.feed_fields if f not in dataset.columns]
    if missing:
        raise KeysplitError(f"{dataset.path} has no column {missing[0]!r}, which {stage.topology}'s feed spout emits")
    knobs = stage.knobs()
    return ReplayOptions(
        dataset=stage.dataset_spec(dataset.spec), groupings=[stage.grouping], workers=knobs["workers"],
        sources=knobs["sources"], cpu_delay_ms=0.0, rate=args.rate, split=args.split, checkpoint=args.checkpoint,
        top_k=args.top,
        out=args.out, force=args.force, partitions=args.partitions, fast=args.engine == "auto",
        aggregators=knobs["aggregators"], spouts=knobs["spouts"], flush_secs=knobs["flush_secs"],
        max_pending=args.max_pending, message_timeout=args.message_timeout, batch=knobs["batch"],
        batch_ms=knobs["batch_ms"], arrivals="closed", overheads=overheads, shape="toolkit",
        topology={**stage.describe(), "src": source_folder(root)})
