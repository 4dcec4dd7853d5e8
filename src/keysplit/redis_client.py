"""Clients of a Redis server, as every component of the topology and every command opens them.

Clients decode responses to ``str`` and reconnect after a lost connection: a command that fails with a
connection error (or while a restarted server loads its data) is retried with exponential back-off for about
:data:`RECONNECT_SECS` before the error reaches the caller. This module ships in the topology jar; starting and
stopping a server of the project's own is :mod:`keysplit.runs.redis_server`, which does not.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.retry import Retry

from keysplit.errors import KeysplitError

#: Seconds to wait for a server to answer before giving up.
CONNECT_TIMEOUT = 3.0
#: Retries of a command after a connection error, with back-off from 50 ms doubling up to 1 s: ~16 s in all.
RECONNECT_RETRIES = 20
RECONNECT_SECS = 16


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc}"))


class CommandPacker:
    """Redis commands in the protocol's bytes (RESP arrays of bulk strings), in Python.

    With hiredis installed redis-py packs commands with ``hiredis.pack_command``, which crashes the whole process
    (SIGSEGV) when a signal handler raises while it runs: SIGTERM, SIGHUP or Ctrl-C during ``keysplit run``'s load
    of the feed (hiredis 3.5.0; ``tests/core/test_redis_client.py``). Packing in Python cannot crash; hiredis still
    parses the replies, which is where it saves time (the spout's reads). Arguments as redis-py takes them: a
    command name with spaces (``"CONFIG GET"``) is split into words."""

    def pack(self, *args) -> list[bytes]:
        name = args[0].encode() if isinstance(args[0], str) else bytes(args[0])
        words = (*name.split(), *args[1:]) if b" " in name else (name, *args[1:])
        parts = [b"*%d\r\n" % len(words)]
        for word in words:
            value = _encode(word)
            parts += (b"$%d\r\n" % len(value), value, b"\r\n")
        return [b"".join(parts)]


def _encode(value) -> bytes:
    """One argument's bytes, as redis-py's encoder gives them (and refuses what it refuses)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int) and not isinstance(value, bool):  # redis-py refuses a bool: "True" or 1?
        return b"%d" % value
    if isinstance(value, float):
        return repr(value).encode()
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    raise redis.DataError(f"Invalid input of type: {type(value).__name__!r}. Convert to a bytes, string, int or "
                          "float first.")


def client(url: str, timeout: float = CONNECT_TIMEOUT, reconnect: bool = True) -> redis.Redis:
    """A client for ``url`` (str responses), not yet checked; with ``reconnect`` it retries a command that lost
    its connection for about RECONNECT_SECS (a server restarting), else it fails at once."""
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), RECONNECT_RETRIES if reconnect else 0,
                  supported_errors=(redis.ConnectionError, redis.TimeoutError, ConnectionResetError))
    try:
        return redis.Redis.from_url(url, decode_responses=True, socket_connect_timeout=timeout,
                                    health_check_interval=30, retry=retry, command_packer=CommandPacker())
    except ValueError as exc:
        raise KeysplitError(f"bad Redis URL {redact(url)!r}: {exc}") from None


def fresh_connections(conn: redis.Redis) -> redis.Redis:
    """``conn`` with its pooled connections closed, for clean-up after an interruption: a signal that raised
    (SIGTERM, SIGHUP, Ctrl-C) in the middle of a command leaves its reply unread on a pooled connection (redis-py
    drops a connection only on its own errors), and the next command would take that reply for its own."""
    conn.connection_pool.disconnect()
    return conn
