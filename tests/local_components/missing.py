"""A component whose module cannot be imported in the component process (its dependency is missing)."""

import os

from streamparse import Bolt

if os.environ.get("KEYSPLIT_TEST_BREAK_IMPORT"):
    import keysplit_no_such_dependency  # noqa: F401


class UnimportableBolt(Bolt):
    """Never runs: its module fails to import when the runner sets KEYSPLIT_TEST_BREAK_IMPORT."""

    def process(self, tup):
        pass
