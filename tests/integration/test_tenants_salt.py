"""Tenants through the gateway: keys, anonymous access, and the cache_salt the replicas receive."""

from __future__ import annotations

import hashlib

import aiohttp
import pytest

from gateway.pipeline.tenant import derive_salt
from tests.support.stack import TEST_SECRET, gateway, policy_for, sim_fleet, sim_requests

KEY_A, KEY_B = "sk-a", "sk-b"
CHAT = {
    "model": "sim-llama",
    "messages": [{"role": "user", "content": "hello"}],
    "cache_salt": "client-chosen",
}


def tenancy(anonymous: bool = False) -> dict:
    return {
        "allow_anonymous": anonymous,
        "tenants": [
            {"id": "a", "api_key_sha256": [hashlib.sha256(KEY_A.encode()).hexdigest()]},
            {"id": "b", "api_key_sha256": [hashlib.sha256(KEY_B.encode()).hexdigest()]},
        ],
    }


async def call(s: aiohttp.ClientSession, url: str, key: str | None) -> int:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with s.post(url + "/v1/chat/completions", json=CHAT, headers=headers) as r:
        await r.read()
        return r.status


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
async def test_cache_salt_is_replaced_by_the_tenants(backend: str) -> None:
    async with (
        sim_fleet(1) as fleet,
        gateway(policy_for(fleet.urls, backend=backend, tenancy=tenancy())) as gw,
        aiohttp.ClientSession() as s,
    ):
        assert await call(s, gw.url, KEY_A) == 200
        assert await call(s, gw.url, KEY_B) == 200
        received = await sim_requests(fleet.urls[0])
        salts = [r["cache_salt"] for r in received[-2:]]
        assert salts == [derive_salt(TEST_SECRET, "a"), derive_salt(TEST_SECRET, "b")]
        assert "client-chosen" not in salts
        # The client's field order is kept: cache_salt stays where the client put it.
        assert list(received[-1]) == list(CHAT)


async def test_openai_backend_gets_no_cache_salt() -> None:
    async with (
        sim_fleet(1) as fleet,
        gateway(policy_for(fleet.urls, backend="openai", tenancy=tenancy())) as gw,
        aiohttp.ClientSession() as s,
    ):
        assert await call(s, gw.url, KEY_A) == 200
        assert "cache_salt" not in (await sim_requests(fleet.urls[0]))[-1]


async def test_unknown_key_401_and_anonymous_policy() -> None:
    async with sim_fleet(1) as fleet, aiohttp.ClientSession() as s:
        async with gateway(policy_for(fleet.urls, tenancy=tenancy(anonymous=False))) as gw:
            assert await call(s, gw.url, "sk-unknown") == 401
            assert await call(s, gw.url, None) == 401
            assert await call(s, gw.url, KEY_A) == 200
        async with gateway(policy_for(fleet.urls, tenancy=tenancy(anonymous=True))) as gw:
            assert await call(s, gw.url, None) == 200
            assert (await sim_requests(fleet.urls[0]))[-1]["cache_salt"] == derive_salt(
                TEST_SECRET, "anonymous"
            )
