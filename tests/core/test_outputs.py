"""An output is replaced whole or not at all: the temporary file beside it goes whatever ends the write, a signal
that lands the instant the file appears included (SIGTERM raises Stopped there, Ctrl-C KeyboardInterrupt)."""

from __future__ import annotations

import os

import pytest

from keysplit import outputs
from keysplit.errors import KeysplitError
from keysplit.outputs import atomic_file


def test_a_signal_just_after_the_temporary_file_appears_leaves_nothing(tmp_path, monkeypatch):
    real_open = os.open

    def open_then_interrupted(path, flags, mode=0o777):
        real_open(path, flags, mode)  # the file exists now, before any name of it returns to the caller
        raise KeyboardInterrupt

    monkeypatch.setattr(outputs.os, "open", open_then_interrupted)
    with pytest.raises(KeyboardInterrupt), atomic_file(tmp_path / "app.jar", "--out", "wb"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_a_write_that_fails_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "counts.csv"
    out.write_text("old\n")
    with pytest.raises(ValueError), atomic_file(out, "--out") as fh:
        fh.write("half")
        raise ValueError("the writer failed")
    assert out.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["counts.csv"]


def test_a_folder_that_cannot_be_written_is_one_line(tmp_path):
    with pytest.raises(KeysplitError, match=r"cannot write --out .*missing/x.csv"), \
            atomic_file(tmp_path / "missing" / "x.csv", "--out"):
        pass
