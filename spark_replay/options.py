"""The options of one replay (what ``keysplit replay`` and ``spark-submit spark_replay/__main__.py`` take), in a
module of their own so that every step of the replay can name them without importing the job that runs the steps."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from keysplit.storm.cpu_delay import DEFAULT_CPU_DELAY_MS
from keysplit.storm.window import DEFAULT_MAX_PENDING
from keysplit.stream import DEFAULT_BATCH, DEFAULT_BATCH_MS, DEFAULT_RATE, Resize

DEFAULT_OUT = os.path.join(".keysplit", "replay")
DEFAULT_TOP_K = 10


@dataclass
class ReplayOptions:
    dataset: str
    groupings: list[str]
    workers: int = 10
    sources: int = 5
    cpu_delay_ms: float = DEFAULT_CPU_DELAY_MS
    rate: float = DEFAULT_RATE
    split: str = "shuffle"
    checkpoint: int | None = None
    top_k: int = DEFAULT_TOP_K
    out: str = DEFAULT_OUT
    force: bool = False  # replace the outputs in an --out folder that does not hold a replay
    capacities: list[float] | None = None
    partitions: int | None = None  # input partitions (default: by file size and cores)
    fast: bool = True  # route kg/sg/pkg with keysplit.simulator.fast's proven kernel
    resizes: list[Resize] = field(default_factory=list)  # worker changes mid-stream, as simulate's --resize
    # the topology the estimate models (keysplit run's knobs, same names) and how its words arrive
    aggregators: int = 2
    spouts: int = 1
    flush_secs: float = 1.0
    max_pending: int = DEFAULT_MAX_PENDING  # keysplit run's default: the spouts' window grows up to it
    message_timeout: int = 30
    batch: int = DEFAULT_BATCH  # keysplit run's --batch / --batch-ms: words per tuple from a router to a counter
    batch_ms: float = DEFAULT_BATCH_MS
    arrivals: str = "closed"  # closed | open (the topology model) | lindley (one D/D/1 queue per worker)
    overheads: dict = field(default_factory=dict)  # the model's calibrated overheads (topology_model.CALIBRATED)
    shape: str = "wordcount"  # the topology the model follows (topology_model.SHAPES)
    # a toolkit topology's keyed stage (keysplit.toolkit.shape.KeyedStage.describe(), with "src": the project's
    # src/ folder or None): every key's result is computed with its accumulator (spark_replay.results)
    topology: dict | None = None
