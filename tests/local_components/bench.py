"""Minimal components for ``benchmarks/runner.py``: no work, so the runner's own cost shows."""

from __future__ import annotations

from streamparse import Bolt, Spout


class CountingSpout(Spout):
    """Emits ``[i]`` with tuple id ``i`` for ever (``bench.n`` tuples if set, then nothing)."""

    outputs = ["i"]

    def initialize(self, conf, context):
        self.i = 0
        self.n = int(conf.get("bench.n") or 0)

    def next_tuple(self):
        if self.n and self.i >= self.n:
            return
        self.i += 1
        self.emit([self.i], tup_id=self.i)


class PassBolt(Bolt):
    """Forwards every tuple (anchored, acked by pystorm's auto-ack)."""

    outputs = ["i"]

    def process(self, tup):
        self.emit(tup.values)


class FanoutBolt(Bolt):
    """Emits ``bench.fanout`` tuples ``[i, j]`` per input (anchored), like a router splitting a line into words."""

    outputs = ["i", "j"]

    def initialize(self, conf, context):
        self.fanout = int(conf.get("bench.fanout", 5))

    def process(self, tup):
        i = tup.values[0]
        for j in range(self.fanout):
            self.emit([i, j])


class SinkBolt(Bolt):
    """Acks every tuple."""

    def process(self, tup):
        pass
