"""Test components: a numbered spout that logs its acks/fails, splitting, direct, counting and crashing bolts, and
a bolt emitting values of a chosen JSON type with a bolt recording them.

Every component writes what it sees as lines to files under ``conf["test.out"]`` (one file per task), so
the test can check, after the run, what each real subprocess received.
"""

from __future__ import annotations

import json
import os
import time

from streamparse import Bolt, Spout, Stream


def _out(conf: dict, kind: str, task_id: int):
    return open(os.path.join(conf["test.out"], f"{kind}-{task_id}.log"), "a", buffering=1)


class NumberSpout(Spout):
    """Emits ``[n, key]`` for its share of ``n in range(test.n)`` with tuple id ``n``; replays on fail.

    ``test.per_call`` tuples per ``next_tuple`` call (default 1).
    """

    outputs = ["n", "key"]

    def initialize(self, conf, context):
        tasks = sorted(int(t) for t, c in context["task->component"].items() if c == self.component_name)
        index = tasks.index(self.task_id)
        self.todo = list(range(index, int(conf["test.n"]), len(tasks)))
        self.keys = int(conf.get("test.keys", 7))
        self.per_call = int(conf.get("test.per_call", 1))
        self.replay: list[int] = []
        self.inflight: set[int] = set()
        self.log_file = _out(conf, "spout", self.task_id)

    def next_tuple(self):
        for _ in range(self.per_call):
            if self.replay:
                n = self.replay.pop(0)
            elif self.todo:
                n = self.todo.pop(0)
            else:
                return
            self.inflight.add(n)
            self.emit([n, f"k{n % self.keys}"], tup_id=n)
            self.log_file.write(f"emit {n} {len(self.inflight)}\n")

    def ack(self, tup_id):
        self.inflight.discard(tup_id)
        self.log_file.write(f"ack {tup_id}\n")

    def fail(self, tup_id):
        self.inflight.discard(tup_id)
        self.replay.append(tup_id)
        self.log_file.write(f"fail {tup_id}\n")


class SplitBolt(Bolt):
    """Emits ``test.fanout`` copies ``[n, key, part]`` of each input, anchored to it."""

    outputs = ["n", "key", "part"]

    def initialize(self, conf, context):
        self.fanout = int(conf.get("test.fanout", 2))

    def process(self, tup):
        n, key = tup.values
        for part in range(self.fanout):
            self.emit([n, key, part])


class DirectBolt(Bolt):
    """Emits each input directly to task ``n mod W`` of component ``test.direct_to`` (sorted task ids)."""

    outputs = [Stream(["n", "key", "part"], direct=True)]

    def initialize(self, conf, context):
        target = conf["test.direct_to"]
        self.targets = sorted(int(t) for t, c in context["task->component"].items() if c == target)

    def process(self, tup):
        n, key = tup.values[:2]
        self.emit([n, key, 0], direct_task=self.targets[n % len(self.targets)])


class PlainBolt(Bolt):
    """Emits ``[n, key, 0]`` with a regular (non-direct) emit and asks for the target task ids."""

    outputs = ["n", "key", "part"]

    def initialize(self, conf, context):
        self.log_file = _out(conf, "plain", self.task_id)

    def process(self, tup):
        n, key = tup.values[:2]
        tasks = self.emit([n, key, 0], need_task_ids=True)
        self.log_file.write(f"tasks {n} {' '.join(map(str, tasks))}\n")


class RecordBolt(Bolt):
    """Records ``n key part stream`` of each input; holds its acks until a tick when ``test.hold`` is set.

    ``test.sleep`` seconds of sleep per tuple; ``test.hang_at``: hang for an hour on that tuple, once.
    """

    auto_ack = False

    def initialize(self, conf, context):
        self.hold = bool(conf.get("test.hold", False))
        self.sleep = float(conf.get("test.sleep", 0))
        self.held = []
        self.log_file = _out(conf, "record", self.task_id)
        self.hang_at = conf.get("test.hang_at")
        self.marker = os.path.join(conf["test.out"], "hung")

    def process(self, tup):
        if self.sleep:
            time.sleep(self.sleep)
        if tup.values[0] == self.hang_at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            time.sleep(3600)  # hangs without answering heartbeats, once
        values = list(tup.values) + [None] * (3 - len(tup.values))
        self.log_file.write(f"tuple {values[0]} {values[1]} {values[2]} {tup.component} {tup.task}\n")
        if self.hold:
            self.held.append(tup)
        else:
            self.ack(tup)

    def process_tick(self, tup):
        self.log_file.write(f"tick {len(self.held)} {tup.values[0]}\n")
        for held in self.held:
            self.ack(held)
        self.held = []
        self.ack(tup)


class CrashOnceBolt(Bolt):
    """Forwards inputs; raises on ``n == test.crash_at`` the first time (marker file), killing its process."""

    outputs = ["n", "key", "part"]

    def initialize(self, conf, context):
        self.crash_at = int(conf["test.crash_at"])
        self.marker = os.path.join(conf["test.out"], "crashed")

    def process(self, tup):
        n, key = tup.values[:2]
        if n == self.crash_at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise RuntimeError(f"deliberate crash on tuple {n}")
        self.emit([n, key, 0])


#: what ValueBolt puts in its ``value`` field, per ``test.value``
VALUES = {
    "list": lambda n, key: [n, key],  # a JSON array: Kryo has no registration for the JVM's JSONArray
    "dict": lambda n, key: {"n": n, "key": key},  # a JSON object
    "long_float": lambda n, key: 0.1 + 0.2,  # 0.30000000000000004: json-smart reads 19+ characters as a BigDecimal
    # registered in Storm's Kryo: String, Integer/Long, BigInteger, Double, Boolean, null
    "scalars": lambda n, key: [key, -(2 ** 40) - n, 2 ** 70 + n, n + 0.25, n % 2 == 0, None][n % 6],
}


class ValueBolt(Bolt):
    """Forwards ``[n, key]`` as ``[n, key, value]`` (anchored, acked by streamparse), ``value`` made by
    ``VALUES[test.value]``; with ``test.bad_at`` only tuple ``n == test.bad_at`` gets that value, and only the
    first time (a marker file), the others ``n``."""

    outputs = ["n", "key", "value"]

    def initialize(self, conf, context):
        self.make = VALUES[conf.get("test.value", "scalars")]
        self.bad_at = conf.get("test.bad_at")
        self.marker = os.path.join(conf["test.out"], "bad-value-sent")

    def process(self, tup):
        n, key = tup.values[:2]
        if self.bad_at is None:
            value = self.make(n, key)
        elif n == self.bad_at and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            value = self.make(n, key)
        else:
            value = n
        self.emit([n, key, value])


class JsonRecordBolt(Bolt):
    """Writes each input's values as one JSON line (``jrecord-TASK.log``), so a test sees their types."""

    def initialize(self, conf, context):
        self.log_file = _out(conf, "jrecord", self.task_id)

    def process(self, tup):
        self.log_file.write(json.dumps(tup.values) + "\n")
