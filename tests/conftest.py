"""Fixtures shared by every suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer

CHECKOUT = Path(__file__).resolve().parents[1]


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="session", autouse=True)
def checkout_stays_clean() -> Iterator[None]:
    """Tests write into temporary directories only: never the checkout's ``var/`` (the default place
    of a quick-start gateway's SQLite ledger) nor ledgers beside the shipped example policies."""
    watched = [CHECKOUT / "var", CHECKOUT / "config" / "examples"]
    before = [_tree(d) for d in watched]
    yield
    after = [_tree(d) for d in watched]
    changed = [str(d) for d, b, a in zip(watched, before, after, strict=True) if a != b]
    assert not changed, f"the test suite wrote into the checkout: {changed}"


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
