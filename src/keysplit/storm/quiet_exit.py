"""A component's clean stop is silent.

When the worker (Storm's, or the local runner) closes a component's stdin, pystorm logs "Exiting because parent
Storm process went away." through its StormHandler, which writes to the pipe that is already closed: Python's
logging then prints a "--- Logging error ---" traceback into the task's stderr at every normal shutdown, hiding
the real errors there. The record carries no information (the stop was asked for), so it is dropped.
(pystorm/component.py, Component.run: ``except StormWentAwayError: log.info(...)``.)
"""

from __future__ import annotations

import logging

CLEAN_EXIT = "Exiting because parent Storm process went away."


class _DropCleanExit(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.levelno <= logging.INFO and record.msg == CLEAN_EXIT)


def install() -> None:
    """Idempotent: one filter on pystorm's component logger."""
    logger = logging.getLogger("pystorm.component")
    if not any(isinstance(f, _DropCleanExit) for f in logger.filters):
        logger.addFilter(_DropCleanExit())
