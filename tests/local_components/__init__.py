"""Tiny real streamparse components for ``tests/test_local_runner.py`` (run as subprocesses by the runner)."""
