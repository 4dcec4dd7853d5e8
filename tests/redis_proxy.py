"""A TCP proxy on 127.0.0.1 in front of a Redis server that breaks one chosen command, for real and deterministically:

- ``drop_reply``: the command reaches Redis and runs; its reply never reaches the client (the connection is cut once
  the reply starts to arrive), as when a network drops between the two;
- ``reset``: the connection is cut when the command arrives; Redis never sees it;
- ``restart``: the command reaches Redis and runs; when its reply starts to arrive, Redis is killed -9 and started
  again (a callback does both), and the reply is lost with every connection.

The proxy reads the requests (RESP arrays of bulk strings, as every client sends them) to find the command; replies
are copied as they come. A command is chosen by its name, an optional test of its arguments and how many such
commands pass first. It fires once. One asyncio loop in a daemon thread; loopback only; at most
:data:`MAX_CONNECTIONS` connections at once (a client beyond that is closed at once and retries).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable
from urllib.parse import urlsplit

#: Connections the proxy serves at once (a run's tasks hold a few each).
MAX_CONNECTIONS = 200
#: Bytes a request may take before the proxy gives up on it (the run's largest request is far smaller).
MAX_REQUEST = 64 << 20


#: What breaks: (command name, action, test of its arguments, how many pass first, the restart callback).
Trigger = tuple[str, str, "Callable[[list[bytes]], bool] | None", int, "Callable[[], None] | None"]


def parse_requests(buffer: bytearray) -> list[tuple[int, list[bytes]]]:
    """The complete requests at the start of ``buffer``: ``(end offset, arguments)`` each, in order."""
    found, at = [], 0
    while True:
        parsed = _parse_one(buffer, at)
        if parsed is None:
            return found
        at, args = parsed
        found.append((at, args))


def _parse_one(buffer: bytearray, at: int) -> tuple[int, list[bytes]] | None:
    end = buffer.find(b"\r\n", at)
    if end < 0:
        return None
    if buffer[at:at + 1] != b"*":
        raise ValueError(f"not a RESP array: {bytes(buffer[at:at + 20])!r}")
    count, at, args = int(buffer[at + 1:end]), end + 2, []
    for _ in range(count):
        end = buffer.find(b"\r\n", at)
        if end < 0:
            return None
        size = int(buffer[at + 1:end])
        if len(buffer) < end + 2 + size + 2:
            return None
        args.append(bytes(buffer[end + 2:end + 2 + size]))
        at = end + 2 + size + 2
    return at, args


class RedisProxy:
    """Listens on a free loopback port and forwards to ``upstream`` (a ``redis://`` or ``unix://`` URL)."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self.unix = parts.path if parts.scheme == "unix" else None
        self.host, self.upstream_port = parts.hostname or "127.0.0.1", parts.port or 6379
        self.password = parts.password
        self.fired = 0
        self.seen = 0  # commands that matched, fired or not
        self._trigger: Trigger | None = None
        self._restart_with: Callable[[], None] | None = None
        self._lock = threading.Lock()
        self._connections = 0
        self._loop = asyncio.new_event_loop()
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")

    @property
    def url(self) -> str:
        """The URL clients use: the upstream's password, the proxy's address."""
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0" if self.password else \
            f"redis://127.0.0.1:{self.port}/0"

    def arm(self, command: str, action: str, *, after: int = 0, match: Callable[[list[bytes]], bool] | None = None,
            restart: Callable[[], None] | None = None) -> None:
        """Break the (``after`` + 1)-th ``command`` (name, any case) whose arguments pass ``match``, once."""
        if action not in ("drop_reply", "reset", "restart") or (action == "restart") != (restart is not None):
            raise ValueError(f"bad trigger {action!r}")
        with self._lock:
            self._trigger = (command.upper(), action, match, after, restart)
            self.seen = 0

    def close(self) -> None:
        """Cut every connection and stop the loop."""
        asyncio.run_coroutine_threadsafe(self._cancel_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _cancel_all(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- the loop --------------------------------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    def _fires(self, args: list[bytes]) -> str | None:
        """The action if this request is the one to break."""
        with self._lock:
            if self._trigger is None:
                return None
            name, action, match, after, _ = self._trigger
            if args[0].upper() != name.encode() or (match is not None and not match(args)):
                return None
            self.seen += 1
            if self.seen <= after:
                return None
            self._restart_with = self._trigger[4]
            self._trigger = None
            self.fired += 1
            return action

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._connections >= MAX_CONNECTIONS:
            writer.transport.abort()
            return
        self._connections += 1
        try:
            if self.unix:
                up_reader, up_writer = await asyncio.open_unix_connection(self.unix)
            else:
                up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
        except OSError:  # Redis is down: the client retries
            self._connections -= 1
            writer.transport.abort()
            return
        cut = asyncio.Event()
        broken: list[str] = []  # the action to take when the next reply arrives

        async def requests() -> None:
            buffer = bytearray()
            while not cut.is_set():
                data = await reader.read(1 << 16)
                if not data:
                    return
                buffer += data
                if len(buffer) > MAX_REQUEST:
                    return
                sent = 0
                for end, args in parse_requests(buffer):
                    action = self._fires(args)
                    if action == "reset":  # the requests before it go through, not this one
                        up_writer.write(bytes(buffer[:sent]))
                        await up_writer.drain()
                        return
                    sent = end
                    if action is not None:
                        broken.append(action)
                        break  # the client waits for this reply: nothing follows it
                up_writer.write(bytes(buffer[:sent]))
                del buffer[:sent]
                await up_writer.drain()

        async def replies() -> None:
            while not cut.is_set():
                data = await up_reader.read(1 << 16)
                if not data:
                    return
                if broken:
                    if broken[0] == "restart":
                        await asyncio.get_running_loop().run_in_executor(None, self._restart)
                    return  # the reply goes nowhere, and the connection with it
                writer.write(data)
                await writer.drain()

        tasks = [asyncio.ensure_future(requests()), asyncio.ensure_future(replies())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cut.set()
            for task in tasks:
                task.cancel()
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.transport.abort()
            self._connections -= 1

    def _restart(self) -> None:
        with self._lock:
            restart, self._restart_with = self._restart_with, None
        if restart is not None:
            restart()
