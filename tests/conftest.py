"""Shared fixtures: one real local SparkSession for every test that needs Spark."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """A real ``local[2]`` SparkSession (the replay's own settings), started once and stopped at the end."""
    from spark_replay.session import get_session

    session, created = get_session("local[2]", driver_memory="1g")
    yield session
    if created:
        session.stop()
