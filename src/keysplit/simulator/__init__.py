"""The in-process simulator and its numba fast path.

:func:`simulate` runs one grouping over a dataset with S sources and W workers and measures it
(:class:`RunResult`); :mod:`.engine` is the reference loop, :mod:`.fast` the kernel path that makes the same
decisions, :mod:`.compiled` builds its kernels ahead of time. The commands that simulate import it, and so does the
Spark replay (kg, sg and pkg through :mod:`.fast`'s kernel, text through :mod:`.tokenize`); the Storm components, the
local runner and the runs never do (``tests/codebase/test_layers.py``). Every host meets its groupings in
:mod:`keysplit.groupings.hosting`.
"""

from keysplit.simulator.engine import ENGINES, simulate
from keysplit.simulator.result import RunResult

__all__ = ["ENGINES", "RunResult", "simulate"]
