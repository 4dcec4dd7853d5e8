"""Run a streamparse topology on one machine over Storm's real multi-lang protocol.

Storm cannot be installed here, so :class:`LocalCluster` plays Nimbus, the supervisor and the workers for
one topology: it starts one OS process per task, each running the component exactly as Storm would
(``streamparse_run module.Class``, i.e. ``python -m streamparse.run``, in the jar's ``resources/`` tree), and
talks Storm's multi-lang JSON protocol with it over stdin/stdout.

>>> from keysplit.local import LocalCluster, TopologyError

Typical use (``MyTopology`` is a ``streamparse.Topology`` subclass)::

    with LocalCluster(MyTopology, {"topology.max.spout.pending": 1000}, cwd=project_root,
                      log_dir="logs/run-1") as cluster:
        done = cluster.run_until(lambda: cluster.stats()["spout"]["acked"] >= n, timeout=600)
        cluster.kill_task("counter", 0)        # SIGKILL: its worker goes down and restarts, as on Storm
        print(cluster.stats()["spout"]["timed_out"])

With ``topology.workers`` > 1, a tuple bound for a task of another worker goes through an emulation of Storm's
Kryo serialization (:mod:`.serialization`): a list or dict value (or a float that Storm >= 2.6 reads as a
``BigDecimal``) halts the sending worker, which restarts, as on a Storm cluster, unless
``topology.fall.back.on.java.serialization`` is true; tuples within a worker are not serialized.

Modules: :mod:`.protocol` (wire codec), :mod:`.context` (reading ``Topology.specs``, task numbering,
handshake context), :mod:`.grouper` (Storm's groupers: shuffle, fields, global, all, direct, and Storm's direct
errors; Java's ``hashCode`` is :mod:`keysplit.javahash`, the components' too), :mod:`.acker` (XOR ledgers,
message timeout), :mod:`.task` (a task's process and queues), :mod:`.submission` (the jar's ``resources/``
tree and the conf ``sparse submit`` sends), :mod:`.cluster` (the facade and its event loop),
:mod:`.supervisor` (worker processes, deaths, restarts), :mod:`.executor` (the ShellBolt/ShellSpout side:
one handler per multi-lang command), :mod:`.collector` (the output collector: routing, rooting and anchoring in
the acker, the Kryo check, delivery), :mod:`.pacing` (heartbeats, ticks, message timeouts, spout ``next``),
:mod:`.serialization` (what Storm's Kryo refuses to send between workers), :mod:`.state` (what the cluster's
parts share). The executor hands each emitted, acked or failed tuple to the collector, which updates the
acker's trees, as Storm's ``ShellBolt`` hands it to its output collector (:mod:`.cluster` draws the layers).
"""

from .cluster import LocalCluster
from .context import TopologyError

__all__ = ["LocalCluster", "TopologyError"]
