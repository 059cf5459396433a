"""Prefix-aware routing end to end: gateway processes, simulators, real sockets."""

from __future__ import annotations

from pathlib import Path

import aiohttp
import httpx
import yaml

from bench.procs import running, start_gateway, start_sim
from tests.fault.support import wait_for
from tests.support.stack import gateway, policy_for, sim_fleet

SYSTEM = "You are a meticulous assistant for a travel agency. " * 40  # ~2k bytes ≈ 500 tokens


def chat(question: str, system: str = SYSTEM) -> dict:
    return {
        "model": "sim-llama",
        "max_tokens": 4,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
    }


async def test_shared_prefix_goes_to_the_same_replica_and_hits_its_cache() -> None:
    async with (
        sim_fleet(4) as fleet,
        gateway(policy_for(fleet.urls, routing={"policy": "prefix_affinity", "seed": 7})) as gw,
        aiohttp.ClientSession() as s,
    ):
        async with s.post(gw.url + "/v1/chat/completions", json=chat("Where is Lisbon?")) as r:
            first = r.headers["x-gateway-replica"]
            assert (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        async with s.post(gw.url + "/v1/chat/completions", json=chat("And Porto?")) as r:
            assert r.headers["x-gateway-replica"] == first
            matched, prompt = map(int, r.headers["x-gateway-prefix-match"].split("/"))
            assert prompt > 400 and matched >= 400
            cached = (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached >= 400  # the simulator itself reports the shared system prompt as cached
        async with s.get(gw.metrics_url + "/metrics") as r:
            text = await r.text()
        assert (
            'prefix_gateway_routing_decisions_total{model="sim-llama",policy="prefix_affinity",reason="affinity"}'
            in text
        )
        assert "prefix_gateway_prefix_reported_cached_tokens_total" in text


async def test_round_robin_gets_fewer_cache_hits_than_prefix_affinity() -> None:
    """Same traffic, two policies: prefix affinity makes the fleet report more cached tokens."""
    # Three prompts over four replicas: round-robin scatters each prompt over every replica.
    systems = [f"System prompt number {k}. " * 60 for k in range(3)]
    bodies = [chat(f"question {i}", systems[i % 3]) for i in range(24)]
    cached = {}
    for policy in ("round_robin", "prefix_affinity"):
        async with (
            sim_fleet(4) as fleet,
            gateway(policy_for(fleet.urls, routing={"policy": policy})) as gw,
            aiohttp.ClientSession() as s,
        ):
            total = 0
            for b in bodies:
                async with s.post(gw.url + "/v1/chat/completions", json=b) as r:
                    total += (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"]
            cached[policy] = total
    assert cached["prefix_affinity"] > cached["round_robin"] * 1.5


def test_two_gateway_processes_place_cold_prefixes_alike(tmp_path: Path) -> None:
    """No shared state: the same requests in the same order place each cold prefix on the same replica in
    two processes (ties go along the hash ring of the route key).

    Scraping and health probes are off: they are evidence each process reads at its own moments, and
    either changes a placement legitimately. A scrape that catches the other process's request in
    flight adds its load to one replica for a second; a replica whose first scrape has not landed yet
    (a 0.5 s timeout on a busy machine) is bounded by ``default_kv_capacity_blocks`` (8,192) instead of
    the simulator's published 2,048, so it looks roomiest; either one made CI fail once.
    """
    sim, urls = start_sim(4, extra=["--speed", "0"])
    env = {"PREFIX_GATEWAY_SECRET": "same-secret-in-both"}
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "models": [{"name": "sim-llama", "replicas": [{"url": u} for u in urls]}],
                "scrape": {"enabled": False},
                "health": {"enabled": False},
            }
        )
    )
    gw1 = start_gateway(["--config", str(policy)], env=env)
    gw2 = start_gateway(["--config", str(policy)], env=env)
    with running(gw1, gw2, sim), httpx.Client(timeout=10) as client:
        placements = []
        for k in range(12):
            body = chat("hi", f"Cold prefix {k} " * 50)
            a = client.post(gw1.url + "/v1/chat/completions", json=body).headers["x-gateway-replica"]
            b = client.post(gw2.url + "/v1/chat/completions", json={**body, "max_tokens": 5}).headers[
                "x-gateway-replica"
            ]
            placements.append((a, b))
        assert all(a == b for a, b in placements), placements
        assert len({a for a, _ in placements}) >= 3  # cold prefixes spread over the fleet


# Scrapes are given a loaded machine's time (5 s, not 0.5 s: a scrape slower than its timeout is skipped),
# and what they must see lasts until the test has seen it: the replica's three requests are streams the
# test ends (they were 2 s answers, which a loaded machine's late scrapes could miss entirely).
SCRAPE = {"interval_s": 0.1, "timeout_s": 5.0}


async def test_scraped_replica_load_reaches_the_router() -> None:
    async with (
        sim_fleet(2, speed=1.0, decode_s_per_token=0.05, overhead_s=0.0) as fleet,
        gateway(policy_for(fleet.urls, scrape=SCRAPE)) as gw,
        aiohttp.ClientSession() as s,
    ):
        # Load replica 0 directly (another gateway pod's traffic, say), bypassing this gateway.
        body = {**chat("busy"), "max_tokens": 400, "stream": True}  # 20 s each, ended below
        busy = [await s.post(fleet.urls[0] + "/v1/chat/completions", json=body) for _ in range(3)]
        router = gw.state.pools["sim-llama"].router
        await wait_for(lambda: (router.replicas[0].reported_running or 0) >= 3)
        assert router.replicas[0].reported_running == 3
        assert router.replicas[0].load() >= 3
        for r in busy:
            r.close()


async def test_kv_capacity_is_learnt_from_replica_metrics_unless_the_policy_sets_it() -> None:
    async with sim_fleet(2, kv_capacity_blocks=300) as fleet:
        policy = policy_for(fleet.urls, routing={"policy": "prefix_affinity"}, scrape=SCRAPE)
        policy.models[0].replicas[1].kv_capacity_blocks = 77  # the policy's word wins for r1
        async with gateway(policy) as gw:
            router = gw.state.pools["sim-llama"].router
            await wait_for(lambda: router.replicas[0].kv_capacity_blocks == 300)
            # The simulator's blocks are 16 tokens, as the router's: 300 blocks either way.
            assert router.replicas[0].kv_capacity_blocks == 300
            assert router.replicas[1].kv_capacity_blocks == 77
