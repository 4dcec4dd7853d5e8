"""What a run on the local runner reports while it runs, in one place for both run drivers (runs/wordcount.py,
runs/topology_run.py): its tasks starting, then the feed's lines (or rows) acked and the spouts' in-flight window.
``keysplit run`` shows it on a terminal (commands/run_status.py); a library caller may pass its own callback.

The callback is ``progress(phase, done, total, **detail)``:

- ``"load"``: ``done`` lines loaded into the feed so far (``total`` 0: unknown until the end);
- ``"start"``: ``done`` of ``total`` tasks have answered the multi-lang handshake;
- ``"run"``: ``done`` of ``total`` lines acked; ``window``: the lines the spouts may have in flight now (-1:
  unlimited; None: not known yet, before their first acknowledgement).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from keysplit.runs.prepare import DEFAULT_STARTUP_TIMEOUT, RunTimeout

__all__ = ["DEFAULT_STARTUP_TIMEOUT", "RunProgress", "report_run", "startup_conf", "watch_start"]


class RunProgress(Protocol):
    def __call__(self, phase: str, done: int, total: int, **detail: Any) -> None: ...


def startup_conf(startup_timeout: float) -> dict[str, float]:
    """The runner's start-up setting for ``--startup-timeout``; --timeout bounds the start-up separately
    (:func:`watch_start`), so a slow start on a busy machine waits as long as --timeout lets it."""
    return {"keysplit.local.startup.timeout.secs": float(startup_timeout)}


def watch_start(deadline: float, progress: RunProgress | None,
                then: Callable[[Any], None] | None = None) -> Callable[[Any], None]:
    """The cluster's ``on_starting`` hook (called between the events of its start-up): ``then(cluster)`` (fault
    injection), the tasks that have answered their handshake so far to ``progress``, and a :class:`RunTimeout`
    once ``deadline`` (monotonic: --timeout) has passed."""
    def hook(cluster: Any) -> None:
        if then is not None:
            then(cluster)
        tasks = cluster.tasks.values()
        answered = sum(1 for t in tasks if t.answered)
        if progress is not None:
            progress("start", answered, len(tasks))
        if time.monotonic() > deadline:
            raise RunTimeout(f"{answered} of {len(tasks)} tasks had answered the multi-lang handshake; the feed "
                             "was loaded")

    return hook


def report_run(progress: RunProgress | None, metrics: dict[str, Any], total: int) -> None:
    """``metrics`` (runs/collect.py spout_metrics) to ``progress``: lines (a toolkit feed's rows) acked and the spouts'
    window."""
    if progress is None:
        return
    windows = [w["window"] for w in metrics.get("windows", ())]
    window = None if not windows else -1 if any(w < 0 for w in windows) else sum(windows)
    progress("run", metrics["rows_acked"], total, window=window)
