"""Fixtures shared by every suite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import RedisServer


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server for the whole session (flushed per test by ``redis_url``)."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    redis_server.flushall()
    return redis_server.url
