"""Tiny real streamparse components for ``tests/local/test_local_runner.py`` (run as subprocesses by the runner)."""
