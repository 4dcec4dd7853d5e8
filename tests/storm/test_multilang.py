"""The components' multi-lang serializer (storm/multilang.py): pystorm's bytes, in fewer writes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading

import pytest
from pystorm.exceptions import StormWentAwayError
from pystorm.serializers.json_serializer import JSONSerializer

from keysplit.storm.multilang import CoalescingJSONSerializer

MESSAGES = [
    {"command": "emit", "tuple": ["l\u2019homme", 7, "r1"], "id": "1-0", "need_task_ids": False},
    {"command": "ack", "id": "-6955786537413359385"},
    {"command": "fail", "id": "x"},
    {"command": "log", "msg": "caf\u00e9 \U0001f600", "level": 2},
    {"command": "emit", "tuple": ["a\tb", "1,0,1,1", 3], "stream": "batch", "anchors": ["1", "2"]},
    {"command": "sync"},
]


class Pipe(io.RawIOBase):
    """A byte sink that records each write it is given."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.writes.append(bytes(data))
        return len(data)


def serializer(cls, text_in: str = ""):
    out = Pipe()
    stdout = io.TextIOWrapper(io.BufferedWriter(out, buffer_size=1), encoding="utf-8")
    stdin = io.TextIOWrapper(io.BytesIO(text_in.encode("utf-8")), encoding="utf-8")
    ser = cls(stdin, stdout, threading.RLock(), threading.RLock())
    ser.keep_alive = (stdin, stdout)  # pystorm wraps their buffers anew: collecting these would close them
    return ser, out


def test_it_writes_exactly_the_bytes_pystorm_writes():
    ours, our_pipe = serializer(CoalescingJSONSerializer)
    theirs, their_pipe = serializer(JSONSerializer)
    for msg in MESSAGES:
        ours.send_message(msg)
        theirs.send_message(msg)
    assert b"".join(our_pipe.writes) == b"".join(their_pipe.writes)
    assert b"".join(our_pipe.writes).count(b"\nend\n") == len(MESSAGES)


def test_emits_acks_and_fails_wait_for_the_turns_end_and_every_other_command_writes_at_once():
    ours, pipe = serializer(CoalescingJSONSerializer, '{"command": "next"}\nend\n')
    for msg in MESSAGES[:3]:
        ours.send_message(msg)
    assert pipe.writes == []  # held: the component has not finished its turn
    ours.send_message(MESSAGES[3])  # a log line is written at once, after what was held, in one write
    assert len(pipe.writes) == 1 and pipe.writes[0].count(b"\nend\n") == 4
    ours.send_message(MESSAGES[4])
    assert ours.read_message() == {"command": "next"}  # waiting for input: what is held goes first
    assert len(pipe.writes) == 2 and b'"stream": "batch"' in pipe.writes[1]


def test_it_reads_what_storm_sends_blank_lines_unicode_and_task_ids():
    text = '\n{"id": "1", "tuple": ["caf\u00e9", 3],\n "task": 9}\nend\n[12, 22]\nend\n'
    ours, _ = serializer(CoalescingJSONSerializer, text)
    assert ours.read_message() == {"id": "1", "tuple": ["caf\u00e9", 3], "task": 9}
    assert ours.read_message() == [12, 22]
    with pytest.raises(StormWentAwayError):
        ours.read_message()


def test_a_component_speaks_it_over_a_real_pipe_and_print_stays_off_the_protocol(tmp_path):
    # a real subprocess: pystorm redirects print() to its log only when the serializer's output stream is
    # sys.stdout, and the component's held emits must reach the pipe before it waits for input
    (tmp_path / "echo_bolt.py").write_text(
        "from streamparse import Bolt\n"
        "from keysplit.storm.multilang import CoalescedWrites\n"
        "class EchoBolt(CoalescedWrites, Bolt):\n"
        "    auto_ack = False\n"
        "    def process(self, tup):\n"
        "        print('not on the protocol')\n"
        "        self.emit([tup.values[0].upper()], anchors=[tup.id], need_task_ids=False)\n"
        "        self.ack(tup)\n")
    handshake = ('{"conf": {}, "context": {"taskid": 3, "task->component": {"3": "echo"}, "componentid": "echo"},'
                 f' "pidDir": "{tmp_path}"}}\nend\n')
    tup = '{"id": "t1", "comp": "s", "stream": "default", "task": 1, "tuple": ["word"]}\nend\n'
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    proc = subprocess.Popen([sys.executable, "-m", "streamparse.run", "echo_bolt.EchoBolt"], cwd=tmp_path, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate((handshake + tup).encode(), timeout=60)
    messages = [m for m in out.decode().split("\nend\n") if m.strip()]
    assert messages[0].startswith('{"pid"')
    protocol = [m for m in messages[1:] if '"command": "log"' not in m]  # pystorm's own log lines aside
    assert '"tuple": ["WORD"]' in protocol[0] and '"anchors": ["t1"]' in protocol[0]
    assert protocol[1:] == ['{"command": "ack", "id": "t1"}'], err.decode()[-2000:]
    # print() became a log command (pystorm's redirect), not a stray line on the protocol
    logs = [json.loads(m) for m in messages if '"command": "log"' in m]
    assert any(log["msg"].endswith("not on the protocol") for log in logs)
