"""Storm's acker: one XOR ledger per spout tuple (a tuple tree's root), and the message timeout.

Storm's guarantee ("Guaranteeing message processing"): every tuple sent along an edge of the tree gets a
random 64-bit edge id. Sending it XORs the id into the ledger of each root the tuple descends from, acking
it XORs the same id in again; the tree is complete when the ledger returns to zero (with probability
1 - 2^-64 per tree not before every edge is acked). A ``fail`` of any tuple in the tree, or the tree
staying incomplete for ``topology.message.timeout.secs``, fails the root: its spout task receives
``fail`` with the spout's message id. Ledger updates are applied at emit time instead of being batched
with the parent's ack (Storm's optimisation); the ledger reaches zero at the same moment.

:class:`Acker` owns the ledgers, as Storm's acker bolt owns its ``pending`` map (apache/storm
``storm-client/src/jvm/org/apache/storm/daemon/Acker.java``): :meth:`~Acker.root` is the spout collector's
``ACKER_INIT`` (``executor/spout/SpoutOutputCollectorImpl.java`` ``sendSpoutMsg``), :meth:`~Acker.anchor` the
bolt collector's edge id XORed into each root of an anchored tuple (``executor/bolt/BoltOutputCollectorImpl.java``
``boltEmit``), :meth:`~Acker.ack` and :meth:`~Acker.fail` its ``ACKER_ACK`` and ``ACKER_FAIL`` streams. Its methods
return the trees they finish; telling their spouts is the output collector's part (:mod:`.collector`).

A timeout is not exact: a spout executor keeps its pending trees in a ``RotatingMap`` of two buckets
(apache/storm ``storm-client/src/jvm/org/apache/storm/executor/spout/SpoutExecutor.java``), rotated by a system
tick every ``topology.message.timeout.secs`` from the executor's start (``StormCommon.java`` sets the spouts'
``topology.tick.tuple.freq.secs`` to the timeout; ``Executor.setupTicks`` schedules it), and a rotation fails
the trees of the bucket it drops. A tree emitted at ``t`` therefore fails at the second rotation after ``t``,
between T and 2T after its emit (:func:`rotation_deadline`).
"""

from __future__ import annotations

import heapq
import math
import random
import time
from typing import Any


def rotation_deadline(emitted: float, origin: float, timeout: float) -> float:
    """When a tree emitted at ``emitted`` times out, for a spout executor started at ``origin``: at the second
    rotation of its pending map after the emit (rotations at ``origin + k x timeout``, k >= 1).

    >>> rotation_deadline(10.0, 0.0, 3.0), rotation_deadline(11.9, 0.0, 3.0), rotation_deadline(12.0, 0.0, 3.0)
    (15.0, 15.0, 18.0)
    """
    return origin + (math.floor((emitted - origin) / timeout) + 2) * timeout


class RootRecord:
    """A pending tuple tree: its ledger, the spout task that owns it, the spout's message id and when it was emitted
    (monotonic seconds: the start of its complete latency, as Storm's spout executor times a tree from its emit to
    its ack; apache/storm storm-client/src/jvm/org/apache/storm/executor/spout/SpoutExecutor.java ``ackSpoutMsg``)."""

    __slots__ = ("emitted", "ledger", "msg_id", "spout")

    def __init__(self, spout: Any, msg_id: Any) -> None:
        self.ledger = 0
        self.spout = spout
        self.msg_id = msg_id
        self.emitted = time.monotonic()


class Acker:
    """Tuple-tree tracking for the whole local cluster: the ledgers, and the trees' timeouts.

    ``spout`` objects only need an integer ``pending`` attribute, kept equal to their number of pending
    trees (what ``topology.max.spout.pending`` bounds).
    """

    def __init__(self, seed: int) -> None:
        self._trees: dict[int, RootRecord] = {}
        self._expiry: list[tuple[float, int]] = []  # a heap: spout executors rotate at their own phases
        self._next_root = 1
        self._edge_id = random.Random(seed).getrandbits  # _edge_id(64): a fresh random edge id

    def __len__(self) -> int:
        """The number of pending trees."""
        return len(self._trees)

    def root(self, spout: Any, msg_id: Any, deadline: float) -> int:
        """Start tracking a spout tuple (a new tree, its ledger zero); it times out at ``deadline`` (monotonic
        seconds). Returns the root's id."""
        root = self._next_root
        self._next_root += 1
        self._trees[root] = RootRecord(spout, msg_id)
        heapq.heappush(self._expiry, (deadline, root))
        spout.pending += 1
        return root

    def anchor(self, roots: tuple[int, ...]) -> int | None:
        """A tuple descending from ``roots`` is sent along a new edge: draw the edge's id and XOR it into the
        ledger of each of those trees still pending. Returns the edge id, None (and draws none) when no tree of
        ``roots`` is pending any more."""
        trees = self._trees
        edge = None
        for root in roots:
            rec = trees.get(root)
            if rec is not None:
                if edge is None:
                    edge = self._edge_id(64)
                rec.ledger ^= edge
        return edge

    def complete_if_done(self, root: int) -> RootRecord | None:
        """Remove and return the tree if its ledger is zero (e.g. a spout tuple nobody subscribes to)."""
        rec = self._trees.get(root)
        if rec is not None and rec.ledger == 0:
            del self._trees[root]
            rec.spout.pending -= 1
            return rec
        return None

    def ack(self, roots: tuple[int, ...], edge: int) -> list[RootRecord]:
        """The tuple sent along ``edge`` is acked: XOR ``edge`` into the ledgers of ``roots``; return the trees this
        completes."""
        done = []
        for root in roots:
            rec = self._trees.get(root)
            if rec is not None:
                rec.ledger ^= edge
                if rec.ledger == 0:
                    del self._trees[root]
                    rec.spout.pending -= 1
                    done.append(rec)
        return done

    def fail(self, roots: tuple[int, ...]) -> list[RootRecord]:
        """Fail the trees ``roots`` (those still pending); return them."""
        failed = []
        for root in roots:
            rec = self._trees.pop(root, None)
            if rec is not None:
                rec.spout.pending -= 1
                failed.append(rec)
        return failed

    def expire(self, now: float) -> list[RootRecord]:
        """Remove and return the trees whose message timeout has passed."""
        out = []
        expiry = self._expiry
        while expiry and expiry[0][0] <= now:
            _, root = heapq.heappop(expiry)
            rec = self._trees.pop(root, None)
            if rec is not None:
                rec.spout.pending -= 1
                out.append(rec)
        return out

    def drop_spout(self, spout: Any) -> int:
        """Forget every tree of a spout task that died: nobody is left to tell (Storm loses them too)."""
        dead = [root for root, rec in self._trees.items() if rec.spout is spout]
        for root in dead:
            del self._trees[root]
        spout.pending -= len(dead)
        return len(dead)

    def next_deadline(self) -> float | None:
        """The earliest pending timeout, or None."""
        return self._expiry[0][0] if self._expiry else None
