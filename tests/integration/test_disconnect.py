"""A client that goes away mid-stream cancels the upstream request at once."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.support.stack import gateway, policy_for, sim_fleet, sim_stats


async def test_client_disconnect_cancels_upstream() -> None:
    async with (
        sim_fleet(1, speed=1.0, decode_s_per_token=0.05, overhead_s=0.0) as fleet,
        gateway(policy_for(fleet.urls)) as gw,
    ):
        body = {
            "model": "sim-llama",
            "messages": [{"role": "user", "content": "tell me"}],
            "stream": True,
            "max_tokens": 400,
        }
        async with aiohttp.ClientSession() as s:
            resp = await s.post(gw.url + "/v1/chat/completions", json=body)
            assert resp.status == 200
            await resp.content.readany()  # the stream has started
            resp.close()  # the client goes away, 20 s before the answer would end
        for _ in range(50):
            stats = await sim_stats(fleet.urls[0])
            if stats["cancelled"] >= 1:
                break
            await asyncio.sleep(0.05)
        assert stats["cancelled"] == 1
        assert stats["running"] == 0
        router = gw.state.pools["sim-llama"].router
        for _ in range(50):
            if router.replicas[0].in_flight == 0:
                break
            await asyncio.sleep(0.02)
        assert router.replicas[0].in_flight == 0
