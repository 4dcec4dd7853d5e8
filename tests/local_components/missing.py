"""A component whose module cannot be imported in the component process (its dependency is missing).

It breaks when KEYSPLIT_TEST_BREAK_IMPORT is set, or once the file named by KEYSPLIT_TEST_BREAK_IF exists; with
KEYSPLIT_TEST_SILENT_EXIT its process ends at once, writing nothing.
"""

import os

from streamparse import Bolt

if os.environ.get("KEYSPLIT_TEST_SILENT_EXIT"):
    os._exit(3)
if os.environ.get("KEYSPLIT_TEST_BREAK_IMPORT") or os.path.exists(os.environ.get("KEYSPLIT_TEST_BREAK_IF", "/-")):
    import keysplit_no_such_dependency  # noqa: F401


class UnimportableBolt(Bolt):
    """Does nothing (acks); its module fails to import when the environment says so."""

    def process(self, tup):
        pass
