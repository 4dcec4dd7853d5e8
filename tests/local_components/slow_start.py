"""A bolt whose process, the first time it starts, waits before its module is imported (so before the multi-lang
handshake): a test kills it there, during the topology's start-up. Later starts are quick.

The first start creates the file KEYSPLIT_TEST_SLOW_ONCE names, then sleeps.
"""

import os
import time

from local_components.comps import RecordBolt

_marker = os.environ.get("KEYSPLIT_TEST_SLOW_ONCE")
if _marker and not os.path.exists(_marker):
    with open(_marker, "w", encoding="ascii") as fh:
        fh.write(str(os.getpid()))
    time.sleep(60)  # killed by the test long before this ends


class SlowStartBolt(RecordBolt):
    """RecordBolt, started slowly the first time."""
