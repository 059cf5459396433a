"""Fixtures shared by every suite."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.support.redis_server import RedisServer

CHECKOUT = Path(__file__).resolve().parents[1]

# Property tests assert properties, not speed: Hypothesis's 200 ms per-example deadline and its
# too-slow health check fail a correct example on a loaded two-core machine (a 259 ms example of
# tests/unit/test_placements.py did under a helper's benchmark). Tests that set their own settings keep them.
# Derandomized: a property test draws the same examples on every run, so a red CI names a fixed input
# (a clean-clone run once failed on a normaliser input no earlier run had drawn); the cases it finds are
# kept as @example.
settings.register_profile(
    "suite", deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("suite")


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


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A private server: a test that stops it must not disturb the shared session server."""
    server = RedisServer()
    server.start()
    yield server
    server.stop()
