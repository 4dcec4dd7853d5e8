"""A counter flushes every period T by its own clock, at the wall clock's multiples of T, not only at its tick.

A tick waits in a task's input queue behind the tuples queued before it (on Storm as in the local runner), so a
counter that flushed only at ticks would, with a backlog, hold every line it served until the whole backlog is
counted (docs/design/batches.md, "Fourth round"). Here the real ``CounterBolt`` runs as a multi-lang subprocess,
is handed a backlog of batches that takes about 1 s to count, and no tick: it flushes (partial counts, then the
acks of what they cover) once a period as it goes, right after the batch that ends past each multiple of T (storm/
flush_clock.py); what it counted after its last flush waits for the tick.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys

import pytest

from keysplit.local.protocol import MessageReader, encode
from keysplit.runs import redis_server
from keysplit.storm.components import AGGREGATOR, COUNTER, ROUTER
from keysplit.storm.settings import PASSWORD_ENV, split_password
from keysplit.storm.streams import BATCH_STREAM, FLUSH_STREAM, encode_pairs, encode_words, occurrence

FLUSH_SECS = 0.2
DELAY_MS = 5.0
BATCHES, WORDS = 20, 10  # 200 words at 5 ms: about 1 s of counting, five periods


@pytest.fixture
def redis_url(tmp_path):
    yield redis_server.start_server(tmp_path).url
    redis_server.stop_server(tmp_path, force=True)


class Wire:
    """The multi-lang pipes of one component subprocess, in the local runner's wire form
    (:mod:`keysplit.local.protocol`)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.reader = MessageReader()
        self.received: list = []

    def send(self, message: dict) -> None:
        self.proc.stdin.write(encode(message).encode())
        self.proc.stdin.flush()

    def receive(self, wait: float = 5.0) -> dict:
        """The component's next message; fails if none comes within ``wait`` seconds."""
        while not self.received:
            ready, _, _ = select.select([self.proc.stdout], [], [], wait)
            assert ready, f"the counter sent nothing for {wait} s"
            data = os.read(self.proc.stdout.fileno(), 65536)
            assert data, "the counter exited"
            self.received += self.reader.feed(data)
        return self.received.pop(0)


def test_a_counter_with_a_backlog_flushes_every_period_without_waiting_for_its_tick(tmp_path, redis_url):
    url, password = split_password(redis_url)
    conf = {"keysplit.run_id": "clock", "keysplit.redis_url": url, "keysplit.redis_password_env": PASSWORD_ENV,
            "keysplit.cpu_delay_ms": DELAY_MS, "keysplit.flush_secs": FLUSH_SECS, "keysplit.batch": WORDS}
    context = {"taskid": 2, "componentid": COUNTER,
               "task->component": {"1": ROUTER, "2": COUNTER, "3": AGGREGATOR, "4": AGGREGATOR}}
    proc = subprocess.Popen([sys.executable, "-m", "streamparse.run", "keysplit.storm.bolts.CounterBolt"],
                            cwd=tmp_path, env={**os.environ, PASSWORD_ENV: password},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    wire = Wire(proc)
    try:
        wire.send({"conf": conf, "context": context, "pidDir": str(tmp_path)})
        assert "pid" in wire.receive()
        for b in range(BATCHES):  # the whole backlog at once, as a router's batches queue behind a busy counter
            words = [f"w{(b * WORDS + k) % 7}" for k in range(WORDS)]
            occurrences = encode_pairs([occurrence(b, k) for k in range(WORDS)])
            wire.send({"id": f"b{b}", "comp": ROUTER, "stream": BATCH_STREAM, "task": 1,
                        "tuple": [encode_words(words), 0, occurrences]})
        flushes: list[dict] = []  # per flush: its partial counts' words, the batches it acked
        while sum(len(f["acked"]) for f in flushes) < BATCHES:
            message = wire.receive(wait=30.0)  # a flush is due every 0.2 s; the wait only guards against a hang
            if message.get("command") == "emit":
                assert message["stream"] == FLUSH_STREAM
                if not flushes or flushes[-1]["acked"]:  # a flush's partial counts leave before its acks
                    if len(flushes) == 4:
                        break  # enough periods seen; the rest waits for the tick below
                    flushes.append({"counted": 0, "acked": [], "anchors": set()})
                flushes[-1]["counted"] += sum(int(c) for c in message["tuple"][1].split(","))
                flushes[-1]["anchors"] |= set(message["anchors"])
            elif message.get("command") == "ack":
                flushes[-1]["acked"].append(message["id"])

        assert len(flushes) >= 3, flushes  # about every 0.2 s, with no tick sent
        acked = [b for f in flushes for b in f["acked"]]
        assert acked == [f"b{b}" for b in range(len(acked))]  # each batch once, in order
        assert len(acked) < BATCHES  # the counter is still counting: it did not wait for its backlog's end
        for f in flushes:
            assert set(f["acked"]) == f["anchors"]  # each flush acks exactly the batches its counts cover
            assert f["counted"] == WORDS * len(f["acked"])  # and counts each of their words once

        # the tick flushes the rest once the counter reaches it, behind its backlog, and is acked too
        wire.send({"id": "tick", "comp": "__system", "stream": "__tick", "task": -1, "tuple": [1]})
        rest = []
        while "tick" not in rest:
            message = wire.receive()
            if message.get("command") == "ack":
                rest.append(message["id"])
        assert acked + rest == [f"b{b}" for b in range(BATCHES)] + ["tick"]
    finally:
        proc.kill()
        proc.wait()
