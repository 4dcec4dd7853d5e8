"""The Redis clients every command and component opens pack commands in Python, byte for byte as redis-py does.

With hiredis installed, redis-py packs with ``hiredis.pack_command``, which crashes the process (SIGSEGV) when a
signal handler raises while it runs: a SIGTERM, SIGHUP or Ctrl-C during ``keysplit run``'s load of the feed once
killed it instead of stopping it with 143, 129 or 130.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import redis
from redis._parsers import Encoder
from redis.connection import PythonRespSerializer

from keysplit.redis_client import CommandPacker, client

COMMANDS = [
    ("SET", "k", "v"),
    ("CONFIG GET", "maxmemory"),  # a command name of two words is sent as two
    (b"HSET", "h", "f", 3, -2, 2.5, 1e-300, b"x" * 10_000, "é\u20ac", bytearray(b"ba"), memoryview(b"mv")),
    ("XADD", "feed:L", "*", "r", "a\tb c", "n", 12, "s", 0),
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: str(c[0]))
def test_a_command_is_packed_to_the_bytes_redis_py_sends(command):
    reference = PythonRespSerializer(6000, Encoder("utf-8", "strict", False).encode)
    assert b"".join(CommandPacker().pack(*command)) == b"".join(reference.pack(*command))


@pytest.mark.parametrize("value", [True, None, [1], {"a": 1}])
def test_what_redis_py_refuses_is_refused(value):
    with pytest.raises(redis.DataError, match="Invalid input of type"):
        CommandPacker().pack("SET", "k", value)


def test_a_client_packs_with_it():
    conn = client("redis://127.0.0.1:1/0")  # packing needs no server
    connection = conn.connection_pool.make_connection()
    assert isinstance(connection._command_packer, CommandPacker)
    assert connection.pack_commands([("SET", "k", 1)]) == [b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n"]


def test_a_signal_handler_that_raises_while_a_client_packs_cannot_crash_the_process():
    # 2,000 timer signals, each raising out of a loop of pipelined XADDs being packed, as a SIGHUP does out of the
    # feed's load; with hiredis's packer this process died of SIGSEGV every time it was tried (hiredis 3.5.0)
    script = textwrap.dedent("""
        import signal
        from keysplit.redis_client import client

        class Stop(BaseException):
            pass

        def handler(signum, frame):
            raise Stop

        signal.signal(signal.SIGALRM, handler)
        connection = client("redis://127.0.0.1:1/0").connection_pool.make_connection()
        stopped = 0
        for trial in range(2000):
            try:
                signal.setitimer(signal.ITIMER_REAL, 0.0001 + (trial % 50) * 0.00001)
                i = 0
                while True:
                    i += 1
                    connection.pack_commands([("XADD", "feed:L", "*", "r", "a\\tb c", "n", i, "s", 7 * i)] * 4)
            except Stop:
                stopped += 1
        signal.setitimer(signal.ITIMER_REAL, 0)
        print(stopped)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "2000", (done.returncode, done.stderr[-2000:])
