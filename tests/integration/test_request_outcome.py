"""One outcome per request (issue 27, item 1): how an answer was served is one value, and the ledger
source the access log reports derives from it, never set beside it by hand."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from gateway.observability import logs
from sim.config import Faults
from tests.fault.support import wait_for
from tests.support.stack import gateway, policy_for, sim_fleet


class _Stream:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> int:
        self.data += data
        return len(data)


async def test_a_follower_whose_leader_failed_went_upstream_and_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader hangs on its replica; the follower waits its ``follower_timeout_s`` and goes to the
    other replica itself: ``x-cache: miss``, and its source is ``upstream`` (the old shape set
    ``source: coalesced`` when it started following and never set it back)."""
    stream = _Stream()
    monkeypatch.setattr(logs.ACCESS_LOG, "stream", stream)
    monkeypatch.setattr(logs.ACCESS_LOG, "enabled", True)  # as the CLI configures it
    body = {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    async with sim_fleet(2) as fleet:
        policy = policy_for(
            fleet.urls,
            cache={"coalescing": {"follower_timeout_s": 0.5}},
            server={"access_log": True},
        )
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            for replica in fleet.replicas:
                replica.set_faults(Faults(hang=True))

            async def send(rid: str) -> tuple[int, dict[str, str]]:
                headers = {"x-request-id": rid}
                async with s.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as r:
                    await r.read()
                    return r.status, dict(r.headers)

            leader = asyncio.create_task(send("leader"))
            await wait_for(lambda: sum(r.counters.requests for r in fleet.replicas) == 1, timeout=30)
            other = [r.counters.requests for r in fleet.replicas].index(0)
            fleet.replicas[other].set_faults(Faults())  # the follower's own attempt is answered
            status, headers = await send("follower")
            leader.cancel()
            await asyncio.gather(leader, return_exceptions=True)
            for replica in fleet.replicas:
                replica.set_faults(Faults())
    assert status == 200 and headers["x-cache"] == "miss"
    await asyncio.sleep(0)  # the access log's lines of the last loop iteration
    lines = [orjson.loads(x) for x in stream.data.splitlines()]
    follower = next(x for x in lines if x.get("client_request_id") == "follower")
    assert (follower["cache"], follower["source"], follower["replica"]) == ("miss", "upstream", f"r{other}")
