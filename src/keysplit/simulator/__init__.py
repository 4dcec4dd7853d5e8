"""The in-process simulator and its numba fast path.

:func:`simulate` runs one grouping over a dataset with S sources and W workers and measures it
(:class:`RunResult`); :mod:`.engine` is the reference loop, :mod:`.fast` the kernel path that makes the same
decisions, :mod:`.compiled` builds its kernels ahead of time. Only the commands that simulate import this
package: the Storm router and the replay host their groupings through :mod:`keysplit.groupings.hosting`.
"""

from keysplit.simulator.engine import ENGINES, simulate
from keysplit.simulator.result import RunResult

__all__ = ["ENGINES", "RunResult", "simulate"]
