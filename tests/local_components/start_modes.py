"""A bolt whose process, before its module is imported (so before the multi-lang handshake), does what
KEYSPLIT_TEST_START says: ``busy:SECS`` works on the CPU that long (a slow start on a busy machine: every task
importing at once), ``hang`` sleeps for an hour (a start that will never end). Unset: a normal start.
"""

import os
import time

from local_components.comps import RecordBolt

_mode = os.environ.get("KEYSPLIT_TEST_START", "")
if _mode.startswith("busy:"):
    _end = time.monotonic() + float(_mode.split(":", 1)[1])
    while time.monotonic() < _end:
        sum(range(10_000))  # on the CPU, writing nothing
elif _mode == "hang":
    time.sleep(3600)


class StartModeBolt(RecordBolt):
    """RecordBolt, started as KEYSPLIT_TEST_START says."""
