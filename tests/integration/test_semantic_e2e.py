"""The semantic cache on the request path of a real gateway, memory and real Redis: a paraphrase is a
``semantic-hit`` (JSON and SSE, the real ``openai`` client), billed as a cache hit under its own ledger
source, never across tenants; wording the admission protocol bypasses and incomplete fingerprints go
to the replica and are counted by reason; a business event removes exactly the entries it touches."""

from __future__ import annotations

import hashlib
from pathlib import Path

import aiohttp
import pytest
import yaml
from openai import AsyncOpenAI

from config.loader import example_path
from tests.support.stack import gateway, policy_for, sim_fleet

ADMIN_TOKEN = "admin-token-semantic"
KEYS = {"shop-a": "key-shop-a-0001", "shop-b": "key-shop-b-0002"}
TENANCY = {
    "allow_anonymous": False,
    "tenants": [
        {"id": t, "api_key_sha256": [hashlib.sha256(k.encode()).hexdigest()]} for t, k in KEYS.items()
    ],
}


def semantic_section() -> dict:
    return yaml.safe_load(Path(example_path("semantic-ecommerce")).read_text())["cache"]["semantic"]


def ask(question: str, **extra: object) -> dict:
    return {
        "model": "sim-llama",
        "temperature": 0,
        "max_tokens": 8,
        "messages": [
            {"role": "system", "content": "You answer product questions."},
            {"role": "user", "content": question},
        ],
        **extra,
    }


@pytest.fixture(params=["memory", "redis"])
def store_sections(request, redis_url: str) -> dict:
    if request.param == "memory":
        return {"cache": {"enabled": True, "semantic": semantic_section()}}
    return {
        "cache": {"enabled": True, "store": "redis", "semantic": semantic_section()},
        "redis": {"url": redis_url},
    }


async def test_paraphrases_hit_events_invalidate_tenants_stay_apart(
    monkeypatch, store_sections: dict
) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    async with sim_fleet(1) as fleet:
        policy = policy_for(
            fleet.urls,
            tenancy=TENANCY,
            admin={"token_env": "PREFIX_GATEWAY_ADMIN_TOKEN"},
            billing={"ledger": {"path": ":memory:"}},
            **store_sections,
        )
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:

            async def post(body: dict, tenant: str = "shop-a") -> tuple[int, dict[str, str], bytes]:
                headers = {"Authorization": f"Bearer {KEYS[tenant]}"}
                async with s.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as r:
                    return r.status, dict(r.headers), await r.read()

            async def upstream_calls() -> int:
                async with s.get(fleet.urls[0] + "/sim/requests") as r:
                    return len(await r.json())

            status, headers, first = await post(ask("How long does the iPhone 15 battery last?"))
            assert status == 200 and headers["x-cache"] == "miss"
            calls = await upstream_calls()
            status, headers, again = await post(ask("iPhone 15 battery life in hours?"))
            assert status == 200 and headers["x-cache"] == "semantic-hit", headers
            assert again == first or b'"choices"' in again
            assert await upstream_calls() == calls  # served without the replica
            # the real openai client, streamed: the hit is replayed as SSE
            client = AsyncOpenAI(base_url=gw.url + "/v1", api_key=KEYS["shop-a"])
            stream = await client.chat.completions.create(
                **ask("What's the battery life of the iPhone 15?"), stream=True
            )
            chunks = [c async for c in stream]
            assert chunks and "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert await upstream_calls() == calls
            # never across tenants: the same paraphrase from another tenant goes to the replica
            status, headers, _ = await post(ask("iPhone 15 battery life in hours?"), tenant="shop-b")
            assert headers["x-cache"] == "miss"
            # the admission protocol: a comparison bypasses; an incomplete fingerprint never hits
            _, headers, _ = await post(ask("Is the iPhone 15 battery better than the Pixel 8 battery?"))
            assert headers["x-cache"] == "miss"
            _, headers, _ = await post(ask("How long does the battery last?"))  # no product slot
            assert headers["x-cache"] == "miss"
            # another product's entry, to show an event removes exactly the entries it touches
            await post(ask("How long does the Pixel 8 battery last?"))
            _, headers, _ = await post(ask("Pixel 8 battery life in hours?"))
            assert headers["x-cache"] == "semantic-hit"

            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            event = {"type": "ProductSpecUpdated", "product_id": "iphone15", "changed_fields": ["battery"]}
            async with s.post(gw.url + "/admin/cache/events", json=event, headers=admin) as r:
                assert r.status == 200, await r.text()
                result = await r.json()
            # shop-a's and shop-b's iPhone 15 battery entries, and the exact entries of the requests
            # that named the iPhone 15: both first questions and the comparison (which bypassed)
            assert result["removed_by_layer"] == {"semantic": 2, "exact": 3, "in_flight": 0}
            assert result["removed"] == 5
            async with s.post(gw.url + "/admin/cache/events", json={"type": "Nope"}, headers=admin) as r:
                assert r.status == 400 and (await r.json())["error"]["param"] == "type"
            numbered = {"type": "ProductSpecUpdated", "product_id": 123, "changed_fields": ["battery"]}
            async with s.post(gw.url + "/admin/cache/events", json=numbered, headers=admin) as r:
                err = (await r.json())["error"]
                assert r.status == 400 and (err["param"], err["code"]) == ("product_id", "invalid_event")
            _, headers, _ = await post(ask("iPhone 15 battery life in hours?"))
            assert headers["x-cache"] == "miss"  # removed: generated again
            _, headers, _ = await post(ask("Pixel 8 battery life in hours?"))
            assert headers["x-cache"] == "semantic-hit"  # untouched by the event

            async with s.get(gw.metrics_url + "/metrics") as r:
                metrics = await r.text()
            rows = {r.source: r for r in await gw.process.metering.ledger.query(group_by=("source",))}

    assert 'prefix_gateway_cache_requests_total{result="semantic-hit"} 4.0' in metrics
    assert 'prefix_gateway_semantic_bypass_total{reason="comparative"} 1.0' in metrics
    assert 'prefix_gateway_semantic_bypass_total{reason="missing_slot"} 1.0' in metrics
    assert 'prefix_gateway_semantic_events_total{type="ProductSpecUpdated"} 1.0' in metrics
    assert 'prefix_gateway_semantic_invalidated_entries_total{layer="semantic"} 2.0' in metrics
    assert 'prefix_gateway_semantic_invalidated_entries_total{layer="exact"} 3.0' in metrics
    assert rows["semantic_cache"].requests == 4  # billed as cache hits, under their own source
    assert rows["semantic_cache"].tokens.served_input > 0 and rows["semantic_cache"].cost_micros == 0
