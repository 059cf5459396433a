"""Precise mode in every gateway process: two real vLLM CPU replicas that bind their own KV-event
publishers (``"endpoint": "tcp://*:PORT"``), two gateway processes that each connect to both.

This module starts its own pair of replicas (module scope; the file sorts before ``test_real_vllm.py``,
whose session pair publishes to a gateway-bound socket instead, so the two pairs never run at once).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from config.policy import Policy
from scripts.vllm_cpu import replicas as R
from tests.real_vllm.conftest import BLOCK, KV_BYTES, Fleet, policy
from tests.real_vllm.test_real_vllm import chat, post, system_prompt
from tests.support.ports import free_port
from tests.support.stack import gateway

pytestmark = pytest.mark.real_vllm


@pytest.fixture(scope="module")
def bound_fleet() -> Iterator[Fleet]:
    R.check_installed()
    specs = R.fleet_specs(2, bind_events=True, free_port=free_port, block_size=BLOCK, kv_bytes=KV_BYTES)
    started = [R.start(s) for s in specs]
    try:
        R.wait_ready(started)
        yield Fleet(started, "tcp://127.0.0.1:1")  # no gateway binds: connect mode below
    finally:
        for r in started:
            r.stop()


def connect_policy(fleet: Fleet) -> Policy:
    p = policy(fleet)
    ke = p.models[0].routing.kv_events
    assert ke is not None
    ke.mode = "connect"
    ke.endpoints = {r.spec.replica_id: r.spec.events_endpoint for r in fleet.replicas}  # type: ignore[misc]
    return p


async def test_two_gateway_processes_hear_every_replica_and_route_a_follow_up_alike(bound_fleet):
    async with gateway(connect_policy(bound_fleet)) as gw1, gateway(connect_policy(bound_fleet)) as gw2:
        routers = [g.state.pools[R.SERVED_NAME].router for g in (gw1, gw2)]
        system = system_prompt(300)
        _, headers = await post(gw1.url, chat(system, "first turn"))
        rid = headers["x-gateway-replica"]
        salt = gw1.state.tenants.salt_for("tenant-a")
        hashes = routers[0].engine_prompt.hashes("chat", chat(system, "first turn"), salt)
        assert len(hashes) > 5
        # Both processes' exact indexes confirm the blocks from the replica's own events.
        for _ in range(200):
            if all(all(r.exact.holds(rid, h) for h in hashes) for r in routers):
                break
            await asyncio.sleep(0.05)
        assert all(all(r.exact.holds(rid, h) for h in hashes) for r in routers)
        other = "r1" if rid == "r0" else "r0"
        assert not any(r.exact.holds(other, h) for r in routers for h in hashes)
        # The other process never saw the first turn, and sends the next one to the same replica.
        body, again = await post(gw2.url, chat(system, "second turn"))
        assert again["x-gateway-replica"] == rid
        assert routers[1].stats().precise_decisions >= 1
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] >= len(hashes) * BLOCK - BLOCK
