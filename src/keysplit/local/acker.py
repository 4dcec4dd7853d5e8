"""Storm's acker: one XOR ledger per spout tuple (a tuple tree's root), and the message timeout.

Storm's guarantee ("Guaranteeing message processing"): every tuple sent along an edge of the tree gets a
random 64-bit edge id. Sending it XORs the id into the ledger of each root the tuple descends from, acking
it XORs the same id in again; the tree is complete when the ledger returns to zero (with probability
1 - 2^-64 per tree not before every edge is acked). A ``fail`` of any tuple in the tree, or the tree
staying incomplete for ``topology.message.timeout.secs``, fails the root: its spout task receives
``fail`` with the spout's message id. Ledger updates are applied at emit time instead of being batched
with the parent's ack (Storm's optimisation); the ledger reaches zero at the same moment.

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
from typing import Any


def rotation_deadline(emitted: float, origin: float, timeout: float) -> float:
    """When a tree emitted at ``emitted`` times out, for a spout executor started at ``origin``: at the second
    rotation of its pending map after the emit (rotations at ``origin + k x timeout``, k >= 1).

    >>> rotation_deadline(10.0, 0.0, 3.0), rotation_deadline(11.9, 0.0, 3.0), rotation_deadline(12.0, 0.0, 3.0)
    (15.0, 15.0, 18.0)
    """
    return origin + (math.floor((emitted - origin) / timeout) + 2) * timeout


class RootRecord:
    """A pending tuple tree: its ledger, the spout task that owns it and the spout's message id."""

    __slots__ = ("ledger", "msg_id", "spout")

    def __init__(self, spout: Any, msg_id: Any) -> None:
        self.ledger = 0
        self.spout = spout
        self.msg_id = msg_id


class Acker:
    """Tuple-tree tracking for the whole local cluster.

    ``spout`` objects only need an integer ``pending`` attribute, kept equal to their number of pending
    trees (what ``topology.max.spout.pending`` bounds).
    """

    def __init__(self, seed: int) -> None:
        self.roots: dict[int, RootRecord] = {}
        self._expiry: list[tuple[float, int]] = []  # a heap: spout executors rotate at their own phases
        self._next_root = 1
        self.edge_id = random.Random(seed).getrandbits  # edge_id(64): a fresh random edge id

    def new_root(self, spout: Any, msg_id: Any, deadline: float) -> int:
        """Start tracking a spout tuple; it times out at ``deadline`` (monotonic seconds)."""
        root = self._next_root
        self._next_root += 1
        self.roots[root] = RootRecord(spout, msg_id)
        heapq.heappush(self._expiry, (deadline, root))
        spout.pending += 1
        return root

    def complete_if_done(self, root: int) -> RootRecord | None:
        """Remove and return the tree if its ledger is zero (e.g. a spout tuple nobody subscribes to)."""
        rec = self.roots.get(root)
        if rec is not None and rec.ledger == 0:
            del self.roots[root]
            rec.spout.pending -= 1
            return rec
        return None

    def ack(self, roots: tuple[int, ...], edge: int) -> list[RootRecord]:
        """XOR ``edge`` into the ledgers of ``roots``; return the trees this completes."""
        done = []
        for root in roots:
            rec = self.roots.get(root)
            if rec is not None:
                rec.ledger ^= edge
                if rec.ledger == 0:
                    del self.roots[root]
                    rec.spout.pending -= 1
                    done.append(rec)
        return done

    def fail(self, roots: tuple[int, ...]) -> list[RootRecord]:
        """Fail the trees ``roots`` (those still pending); return them."""
        failed = []
        for root in roots:
            rec = self.roots.pop(root, None)
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
            rec = self.roots.pop(root, None)
            if rec is not None:
                rec.spout.pending -= 1
                out.append(rec)
        return out

    def drop_spout(self, spout: Any) -> int:
        """Forget every tree of a spout task that died: nobody is left to tell (Storm loses them too)."""
        dead = [root for root, rec in self.roots.items() if rec.spout is spout]
        for root in dead:
            del self.roots[root]
        spout.pending -= len(dead)
        return len(dead)

    def next_deadline(self) -> float | None:
        """The earliest pending timeout, or None."""
        return self._expiry[0][0] if self._expiry else None
