"""Storm's multi-lang JSON protocol with fewer system calls: the same bytes on the pipe, written in fewer writes.

pystorm's JSON serializer (``pystorm/serializers/json_serializer.py``) flushes its output twice per message and
reads its input a text line at a time under a lock. A router writes an ack per line and an emit per batch, a
counter an ack per input at every tick, a spout up to 16 emits per ``next``: each one a ``write`` on the pipe, and
on the other side (the worker JVM's reader thread, or the local runner) a wake-up and a ``read``. So the words'
own work was a small part of a component's CPU (``benchmarks/topology_cpu.py``).

:class:`CoalescingJSONSerializer` writes what pystorm writes, message for message and in the same order
(``simplejson`` as pystorm configures it, each message followed by ``end``), but holds the frequent messages
(``emit``, ``ack``, ``fail``) in memory until the component is about to wait for input, and writes them then in
one call. Nothing a peer can observe changes but timing, and that only within one turn of the component: Storm's
ShellBolt and ShellSpout (apache/storm ``storm-client/src/jvm/org/apache/storm/task/ShellBolt.java``,
``spout/ShellSpout.java``) read messages from the stream one at a time whatever the chunking, a spout's emits reach
Storm before its ``sync`` (its turn's end, which ShellSpout waits for) as before, and a bolt's before it reads its
next tuple. Every other message (``sync``, ``log``, ``error``, metrics, the handshake's pid) is written at once
with whatever is held before it, so a heartbeat answer, a log line or a crash report is never held back; a thread
that writes while the main thread waits for input (the router's batch timer) calls :meth:`flush` itself.
"""

from __future__ import annotations

import simplejson as json
from pystorm.component import _SERIALIZERS
from pystorm.exceptions import StormWentAwayError
from pystorm.serializers.json_serializer import JSONSerializer
from pystorm.serializers.serializer import Serializer

#: Messages held until the component waits for input (every other command is written at once).
HELD = frozenset(("emit", "ack", "fail"))
#: The name components ask pystorm for (``_SERIALIZERS`` is pystorm's table of serializers by name).
NAME = "keysplit-json"
_END = b"end\n"
#: A spout answers every command with this; the bytes pystorm's serializer writes for it, made once.
_SYNC = {"command": "sync"}


class CoalescingJSONSerializer(JSONSerializer):
    """pystorm's JSON serializer, with writes gathered per turn and binary reads (module docstring)."""

    def __init__(self, input_stream, output_stream, reader_lock, writer_lock) -> None:
        # not JSONSerializer.__init__: the text wrappers it makes over the streams' buffers would close them when
        # collected. The text streams stay the serializer's streams (pystorm compares output_stream with sys.stdout
        # to redirect print() away from the protocol); the bytes go through their binary buffers
        Serializer.__init__(self, input_stream, output_stream, reader_lock, writer_lock)
        self._reader = getattr(input_stream, "buffer", input_stream)
        self._writer = getattr(output_stream, "buffer", output_stream)
        self._held: list[bytes] = []
        self._sync = self.serialize_dict(_SYNC).encode("utf-8")

    def read_message(self):
        """The next message; what this component wrote before is written first (it is about to wait)."""
        if self._held:
            self.flush()
        parts = []
        with self._reader_lock:
            readline = self._reader.readline
            while True:
                line = readline()
                if line == _END:
                    break
                if not line:
                    raise StormWentAwayError()
                if line != b"\n":  # Storm may send blank lines between messages: pystorm skips them too
                    parts.append(line)
        return json.loads(b"".join(parts).decode("utf-8"))

    def send_message(self, msg_dict) -> None:
        if msg_dict == _SYNC:  # once per command a spout gets: its acks too
            data = self._sync
        else:
            data = self.serialize_dict(msg_dict).encode("utf-8")
        with self._writer_lock:
            self._held.append(data)
            if msg_dict.get("command") not in HELD:
                self.flush()

    def flush(self) -> None:
        """Write every held message, in order, in one call."""
        with self._writer_lock:
            if not self._held:
                return
            data = b"".join(self._held)
            self._held.clear()
            try:
                self._writer.write(data)
                self._writer.flush()
            except OSError:
                raise StormWentAwayError() from None


_SERIALIZERS.setdefault(NAME, CoalescingJSONSerializer)


class CoalescedWrites:
    """Mix into a streamparse ``Spout`` or ``Bolt`` (first): it speaks JSON multi-lang through
    :class:`CoalescingJSONSerializer` where pystorm's JSON serializer was asked for."""

    def __init__(self, *args, serializer: str = "json", **kwargs) -> None:
        super().__init__(*args, serializer=NAME if serializer == "json" else serializer, **kwargs)
