"""A gateway in the test's event loop whose app can be adjusted before it starts (resolver, file)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from config.policy import Policy
from tests.support.stack import gateway

ADMIN_TOKEN = "admin-test-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def gateway_with(policy: Policy, *, policy_path: str | None = None, resolver: Any = None):  # type: ignore[no-untyped-def]
    """The shared gateway fixture (tests.support.stack.gateway) with a policy file or a resolver."""
    return gateway(policy, policy_path=policy_path, resolver=resolver)


# How long a test waits for a condition before it fails. Only a failure waits this long, so it is sized
# for the slowest machine the suite runs on, not for how soon the condition comes: 5 s was exceeded by
# conditions that take 0.1 s on a quiet machine (50 answers of 8 clients, a reload's first answers) when
# a two-core machine ran four test workers at load 15.
WAIT_S = 30.0


async def wait_for(cond: Callable[[], Any], timeout: float = WAIT_S, interval: float = 0.02) -> None:
    """Poll a sync or async condition until true, at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def chat(content: str = "hello", *, stream: bool = False, model: str = "sim-llama", **extra: Any) -> dict:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}]}
    if stream:
        body["stream"] = True
    body.update(extra)
    return body


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, dict[str, str], bytes]:
    async with s.post(url + "/v1/chat/completions", json=body) as r:
        return r.status, dict(r.headers), await r.read()


async def admin_replicas(s: aiohttp.ClientSession, url: str) -> dict[str, dict[str, Any]]:
    """Replica rows of every pool by replica id."""
    async with s.get(url + "/admin/replicas", headers=ADMIN) as r:
        assert r.status == 200, await r.text()
        data = await r.json()
    return {row["id"]: row for pool in data["models"].values() for row in pool["replicas"]}
