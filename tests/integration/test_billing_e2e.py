"""Billing through the gateway: replica-reported cached tokens, explicit markers, streams, cache hits."""

from __future__ import annotations

import hashlib
from typing import Any

import aiohttp
import orjson

from tests.support.stack import gateway, policy_for, sim_fleet, sim_requests

KEY = "sk-billing-tenant"
TENANCY = {
    "allow_anonymous": False,
    "tenants": [{"id": "acme", "api_key_sha256": [hashlib.sha256(KEY.encode()).hexdigest()]}],
}
BILLING = {
    "ledger": {"path": ":memory:"},
    "currency": "USD",
    "price_version": "2026-11",
    "models": {"sim-llama": {"input_per_1m": "2.0", "output_per_1m": "8.0"}},
}
AUTH = {"Authorization": f"Bearer {KEY}"}
LONG_SYSTEM = "Policies of the travel desk, to be followed exactly. " * 120  # ≈ 1,600 tokens (4 B/token)


def billing_policy(urls: list[str], **extra: Any):
    return policy_for(urls, tenancy=TENANCY, billing=BILLING, routing={"policy": "prefix_affinity"}, **extra)


async def post(s: aiohttp.ClientSession, url: str, body: dict) -> tuple[int, Any, bytes]:
    async with s.post(url + "/v1/chat/completions", json=body, headers=AUTH) as r:
        return r.status, r.headers.copy(), await r.read()


async def test_implicit_hits_come_from_the_replica_and_are_priced() -> None:
    async with sim_fleet(2) as fleet, gateway(billing_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        body = {
            "model": "sim-llama",
            "max_tokens": 10,
            "messages": [{"role": "system", "content": LONG_SYSTEM}, {"role": "user", "content": "Hi"}],
        }
        _, _, r1 = await post(s, gw.url, body)
        _, h2, r2 = await post(
            s,
            gw.url,
            {**body, "messages": [*body["messages"][:1], {"role": "user", "content": "Hello again"}]},
        )
        u1, u2 = orjson.loads(r1)["usage"], orjson.loads(r2)["usage"]
        assert u1["prompt_tokens_details"]["cached_tokens"] == 0
        cached = u2["prompt_tokens_details"]["cached_tokens"]
        assert cached > 1000
        assert h2["x-gateway-billing-source"] == "upstream"
        assert h2["x-gateway-billing-input-tokens"].startswith(
            f"uncached={u2['prompt_tokens'] - cached};implicit_hit={cached};"
        )
        # By hand: uncached at 2 USD/1M, cached at 20 % of it, output at 8 USD/1M; micros rounded half-up.
        expected = round((u2["prompt_tokens"] - cached) * 2) + round(cached * 2 * 0.2) + 10 * 8
        assert h2["x-gateway-billing-cost"] == f"{expected / 1e6:.6f}"
        rows = await gw.process.metering.ledger.query(group_by=("tenant",))
        assert rows[0].requests == 2 and rows[0].tokens.implicit_hit == cached


async def test_explicit_markers_create_then_hit_and_are_stripped() -> None:
    async with sim_fleet(1) as fleet, gateway(billing_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:

        def ask(q: str) -> dict:
            return {
                "model": "sim-llama",
                "max_tokens": 5,
                "messages": [
                    {
                        "role": "system",
                        "content": [
                            {"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}
                        ],
                    },
                    {"role": "user", "content": q},
                ],
            }

        _, h1, _ = await post(s, gw.url, ask("first"))
        _, h2, _ = await post(s, gw.url, ask("second"))
        assert "explicit_create=" in h1["x-gateway-billing-input-tokens"]
        create = int(h1["x-gateway-billing-input-tokens"].split("explicit_create=")[1].split(";")[0])
        hit = int(h2["x-gateway-billing-input-tokens"].split("explicit_hit=")[1].split(";")[0])
        assert create >= 1024 and hit == create
        assert "implicit_hit=0" in h2["x-gateway-billing-input-tokens"]  # exclusive with implicit
        received = await sim_requests(fleet.urls[0])
        assert all("cache_control" not in orjson.dumps(r).decode() for r in received)
        # Five markers is one too many.
        too_many = ask("x")
        too_many["messages"][0]["content"] = [
            {"type": "text", "text": f"part {i}", "cache_control": {"type": "ephemeral"}} for i in range(5)
        ]
        st, _, raw = await post(s, gw.url, too_many)
        assert st == 400 and orjson.loads(raw)["error"]["code"] == "too_many_cache_markers"


async def test_streams_are_billed_and_the_usage_chunk_is_only_sent_when_asked() -> None:
    async with sim_fleet(1) as fleet, gateway(billing_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        body = {
            "model": "sim-llama",
            "max_tokens": 7,
            "stream": True,
            "messages": [{"role": "user", "content": "Stream me"}],
        }
        _, _, raw = await post(s, gw.url, body)
        assert b'"usage"' not in raw or b'"usage":null' in raw
        assert raw.endswith(b"data: [DONE]\n\n")
        _, _, raw2 = await post(s, gw.url, {**body, "stream_options": {"include_usage": True}})
        assert b'"completion_tokens":7' in raw2
        rows = await gw.process.metering.ledger.query(group_by=("tenant",))
        assert rows[0].requests == 2 and rows[0].tokens.output == 14
        assert (await sim_requests(fleet.urls[0]))[-2]["stream_options"] == {"include_usage": True}


async def test_response_cache_hits_are_served_tokens_at_zero() -> None:
    async with (
        sim_fleet(1) as fleet,
        gateway(billing_policy(fleet.urls, cache={"enabled": True})) as gw,
        aiohttp.ClientSession() as s,
    ):
        body = {
            "model": "sim-llama",
            "temperature": 0,
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "cache me"}],
        }
        await post(s, gw.url, body)
        _, h, _ = await post(s, gw.url, body)
        assert h["x-cache"] == "hit" and h["x-gateway-billing-source"] == "response_cache"
        assert h["x-gateway-billing-cost"] == "0.000000"
        rows = await gw.process.metering.ledger.query(group_by=("source",))
        by_source = {r.source: r for r in rows}
        assert by_source["response_cache"].served_tokens > 0
        assert by_source["upstream"].tokens.output == 5


async def test_a_live_explicit_entry_pins_routing_to_its_replica() -> None:
    """Even under round-robin, a request whose marked prefix is live goes where the entry lives."""
    async with (
        sim_fleet(3) as fleet,
        gateway(
            policy_for(fleet.urls, tenancy=TENANCY, billing=BILLING, routing={"policy": "round_robin"})
        ) as gw,
        aiohttp.ClientSession() as s,
    ):

        def ask(q: str) -> dict:
            return {
                "model": "sim-llama",
                "max_tokens": 3,
                "messages": [
                    {
                        "role": "system",
                        "content": [
                            {"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}
                        ],
                    },
                    {"role": "user", "content": q},
                ],
            }

        replicas = [(await post(s, gw.url, ask(f"q{i}")))[1]["x-gateway-replica"] for i in range(4)]
        assert len(set(replicas)) == 1, replicas
        async with s.get(gw.metrics_url + "/metrics") as r:
            assert 'reason="explicit_pin"} 3.0' in await r.text()


async def test_explicit_entry_gauges_are_exported() -> None:
    async with sim_fleet(1) as fleet, gateway(billing_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        body = {
            "model": "sim-llama",
            "max_tokens": 2,
            "messages": [
                {
                    "role": "system",
                    "content": [
                        {"type": "text", "text": LONG_SYSTEM, "cache_control": {"type": "ephemeral"}}
                    ],
                },
                {"role": "user", "content": "q"},
            ],
        }
        await post(s, gw.url, body)
        await post(s, gw.url, body)
        async with s.get(gw.metrics_url + "/metrics") as r:
            text = await r.text()
        assert 'prefix_gateway_explicit_cache_entries{state="live"} 1.0' in text
        assert 'prefix_gateway_explicit_cache_entries{state="created"} 1.0' in text
        assert 'prefix_gateway_explicit_cache_entries{state="hits"} 1.0' in text
        assert 'prefix_gateway_billed_tokens_total{kind="explicit_hit",tenant="acme"}' in text
