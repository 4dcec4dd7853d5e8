"""The costs a topology pays between its components, as named terms of the model: what the runtime that ran it
(``keysplit run``'s local runner, or a Storm cluster) puts between the spout, the routers, the counters, the
aggregators and the acker. Some are read from the run's configuration (:class:`ClusterTerms`); the rest are
fitted to measured runs (:mod:`keysplit.topology_model.profile`), because no configuration says what a tuple's
JSON costs on a given machine.

Where each term comes from in Storm (apache/storm, read for this module):

- **ShellBolt's JSON, both ways.** Every multi-lang component runs behind a ``ShellBolt`` / ``ShellSpout``
  (``storm-client/src/jvm/org/apache/storm/task/ShellBolt.java``): a tuple for the subprocess is serialised to
  JSON by the bolt's writer thread (``BoltWriterRunnable`` -> ``ShellProcess.writeBoltMsg``), and what the
  subprocess emits is parsed by its reader thread (``BoltReaderRunnable`` -> ``ShellProcess.readShellMsg``), with
  ``topology.multilang.serializer`` = ``org.apache.storm.multilang.JsonSerializer`` (``conf/defaults.yaml``). So
  a tuple from a router to a counter is encoded by the router process, decoded by the worker JVM, encoded again
  for the counter process and decoded there: a per-*tuple* cost on the cores everything shares, which the
  local runner pays in its own protocol (``keysplit.local.protocol``). It is fitted (``tuple_us``).
- **Executor batching and flushing.** An executor's emits go to a per-destination batch of
  ``topology.producer.batch.size`` tuples (``utils/JCQueue.java``; ``executor/ExecutorTransfer.java`` for the
  local queues), and tuples for other workers to the worker's transfer queue in batches of
  ``topology.transfer.batch.size`` (``daemon/worker/WorkerTransfer.java``); a batch that does not fill is
  published by the flush tuple, which a timer sends every ``topology.batch.flush.interval.millis``
  (``daemon/worker/Worker.java``; ``Executor.publishFlushTuple``), the setting Storm 2.0 named
  ``topology.flush.tuple.freq.millis``. Defaults (``conf/defaults.yaml``): 1, 1 and 1 ms, and flushing is off
  when both batch sizes are 1. With batches a tuple waits, at light load, half the flush interval on average at
  each hop: :attr:`ClusterTerms.batch_wait_ms`.
- **The acker executors.** A tuple tree completes when the acker (``daemon/Acker.java``) has seen every ack
  (``__ack_ack``) and tells the spout's task: two more hops after the last bolt acks, with
  ``topology.acker.executors`` (default: one per worker, ``topology.ras.acker.executors.per.worker``). With no
  ackers Storm acks at emit, and the complete latency measures nothing (:meth:`ClusterTerms.problem`).
- **Hops between worker JVMs.** A tuple for a task in another worker is serialised (Kryo) and sent by the
  transfer thread over Netty (``WorkerTransfer.tryTransferRemote``); with the tasks spread evenly over P
  workers a share (P - 1) / P of the hops cross (:attr:`ClusterTerms.crossing`). Their time is in what the
  calibration measures (the first hop, per run) and fits (the return after the aggregators), so a profile is
  for runs with the worker count of the runs it came from.

For the local runner the terms take its values: one acker, no executor batches (the router's own batches,
``keysplit.batch``, are in the kernel), and every hop goes through the runner's one thread, whatever
``--worker-processes`` says.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

#: Storm's settings of these terms and their defaults (apache/storm ``conf/defaults.yaml``).
STORM_DEFAULTS: dict[str, Any] = {
    "topology.producer.batch.size": 1,
    "topology.transfer.batch.size": 1,
    "topology.batch.flush.interval.millis": 1,
    "topology.acker.executors": None,  # None: one per worker
}
#: Storm 2.0's name of the flush interval, read when a configuration has only that one.
OLD_FLUSH_KEY = "topology.flush.tuple.freq.millis"
#: Hops of a line after its words reach the counters: counter -> aggregator, aggregator -> acker, acker -> spout.
RETURN_HOPS = 3
#: Hops before: spout -> router, router -> counter.
FORWARD_HOPS = 2


@dataclass(frozen=True)
class ClusterTerms:
    """What the run's configuration says about the costs between components."""

    runtime: str  # "local" (keysplit run) or "storm" (a cluster run, --collect-ed)
    worker_processes: int = 1
    producer_batch: int = 1
    transfer_batch: int = 1
    flush_ms: float = 1.0
    ackers: int = 1

    @classmethod
    def of_run(cls, run: dict) -> ClusterTerms:
        """The terms of a stored run's summary: a run summarised by ``--collect`` ran on Storm (its components
        recorded the Storm settings they received under ``storm``); any other is the local runner's."""
        processes = int(run.get("worker_processes") or 1)
        if run.get("configuration") is None:  # only `--collect` writes it: this one ran under `keysplit run`
            return cls("local", processes, 1, 1, 0.0, 1)
        conf = {**STORM_DEFAULTS, **(run.get("storm") or {})}
        flush = conf["topology.batch.flush.interval.millis"]
        if (run.get("storm") or {}).get("topology.batch.flush.interval.millis") is None and conf.get(OLD_FLUSH_KEY):
            flush = conf[OLD_FLUSH_KEY]
        ackers = conf["topology.acker.executors"]
        return cls("storm", processes, int(conf["topology.producer.batch.size"]),
                   int(conf["topology.transfer.batch.size"]), float(flush),
                   processes if ackers is None else int(ackers))

    @property
    def batch_wait_ms(self) -> float:
        """A tuple's mean wait in an executor batch at one hop: half the flush interval when batches are on (at
        light load a batch leaves with the flush tuple; a full one leaves at once, so this is an upper bound)."""
        if self.runtime != "storm" or (self.producer_batch <= 1 and self.transfer_batch <= 1):
            return 0.0
        return self.flush_ms / 2.0

    @property
    def crossing(self) -> float:
        """The share of hops that go from one worker JVM to another (tasks spread evenly over the workers)."""
        return 0.0 if self.runtime != "storm" else (self.worker_processes - 1) / self.worker_processes

    def forward_ms(self) -> float:
        """Executor batching's wait before a word reaches its counter (beyond the measured first hop)."""
        return FORWARD_HOPS * self.batch_wait_ms

    def return_ms(self) -> float:
        """Executor batching's wait after the counters (to the aggregator, the acker, the spout)."""
        return RETURN_HOPS * self.batch_wait_ms

    def problem(self) -> str | None:
        """Why a run with these terms cannot calibrate the model, or None."""
        if self.ackers < 1:
            return ("ran with topology.acker.executors 0: Storm acks at emit, so its complete latency measures "
                    "nothing; calibrate from runs with ackers")
        return None

    def key(self) -> tuple:
        """What must agree between a profile's runs and a run it predicts (the fitted costs depend on it)."""
        return (self.runtime, self.worker_processes)

    def as_dict(self) -> dict:
        return asdict(self) | {"batch_wait_ms": self.batch_wait_ms, "crossing": self.crossing}
