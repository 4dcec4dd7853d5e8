"""Storm's multi-lang wire format: JSON messages, each followed by a line ``end`` (``Multilang-protocol.md``).

The runner side of the protocol, written for throughput: incoming bytes are split on ``\\nend\\n`` and all
complete messages of a read are decoded with one ``json.loads`` call; outgoing messages are built as
strings from pre-serialised pieces and written in batches.
"""

from __future__ import annotations

import json
from typing import Any

END = b"\nend\n"
NEXT = '{"command":"next"}\nend\n'
ACTIVATE = '{"command":"activate"}\nend\n'
_dumps = json.dumps
_loads = json.loads


def encode(message: Any) -> str:
    """One message (dict, or a list of task ids) in wire form."""
    return _dumps(message, separators=(",", ":")) + "\nend\n"


def tuple_prefix(component: str, stream: str, task: int) -> str:
    """The constant part of a tuple sent to a bolt, between its id and its values."""
    return f'","comp":{_dumps(component)},"stream":{_dumps(stream)},"task":{task},"tuple":'


def encode_tuple(tuple_id: str, prefix: str, values_json: str) -> str:
    """A tuple for a bolt: ``{"id", "comp", "stream", "task", "tuple"}``; ``prefix`` from :func:`tuple_prefix`."""
    return '{"id":"' + tuple_id + prefix + values_json + "}\nend\n"


def encode_spout_command(command: str, msg_id: Any) -> str:
    """``ack`` or ``fail`` for a spout, carrying the message id the spout emitted with."""
    return '{"command":"' + command + '","id":' + _dumps(msg_id) + "}\nend\n"


class MessageReader:
    """Accumulates bytes from a component's stdout and yields the complete messages."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[Any]:
        """Add ``data``; return the messages it completes (dicts, or lists for task ids)."""
        buf = self._buf + data if self._buf else data
        if END not in buf:
            self._buf = buf
            return []
        parts = buf.split(END)
        self._buf = parts.pop()
        try:
            return _loads(b"[" + b",".join(parts) + b"]")
        except ValueError:
            return [self._decode_one(p) for p in parts if p.strip()]

    @staticmethod
    def _decode_one(part: bytes) -> Any:
        try:
            return _loads(part)
        except ValueError:
            return {"command": "__garbage__", "msg": part.decode("utf-8", "replace")[:500]}
