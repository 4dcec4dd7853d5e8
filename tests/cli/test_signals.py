"""A signal ends a command the way Ctrl-C does, even when a library turns the interrupt into an error of its own
on the way out (py4j does, when the signal lands in the middle of a call to Spark's JVM)."""

from __future__ import annotations

import signal

import pytest

from keysplit.commands.common import Stopped, stop_on_signals
from spark_replay.session import _keeping_the_sigint_handler


def test_an_error_raised_while_ctrl_c_unwinds_stands_for_the_ctrl_c():
    with pytest.raises(RuntimeError) as info, stop_on_signals() as caught:
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            raise RuntimeError("Gateway must be connected to send cancel cmd.") from None  # what py4j raises
    assert isinstance(caught.reason(info.value), KeyboardInterrupt)


def test_sigterm_is_remembered_as_itself():
    with pytest.raises(Stopped) as info, stop_on_signals() as caught:
        signal.raise_signal(signal.SIGTERM)
    assert caught.reason(info.value) is info.value and info.value.status == 143


def test_an_error_with_no_signal_before_it_is_an_error():
    with pytest.raises(ValueError) as info, stop_on_signals() as caught:
        raise ValueError("a bad value")
    assert caught.reason(info.value) is None


def test_a_spark_context_leaves_the_callers_sigint_handler_in_place():
    def callers(_signum, _frame):
        raise KeyboardInterrupt

    def pyspark_like(_signum, _frame):  # SparkContext's: calls the JVM from inside the handler
        raise AssertionError("not this one")

    previous = signal.signal(signal.SIGINT, callers)
    try:
        made = _keeping_the_sigint_handler(lambda: signal.signal(signal.SIGINT, pyspark_like) and "context")
        assert made == "context" and signal.getsignal(signal.SIGINT) is callers
    finally:
        signal.signal(signal.SIGINT, previous)
