"""vLLM's endpoints besides generation, through the gateway: routed by model, behind the tenant's key,
bad input answered in OpenAI's shape before any replica sees it."""

from __future__ import annotations

import hashlib

import aiohttp
import pytest

from tests.support.stack import gateway, policy_for, sim_fleet, sim_requests

KEY = "sk-pass"
TENANCY = {
    "allow_anonymous": False,
    "tenants": [{"id": "t1", "api_key_sha256": [hashlib.sha256(KEY.encode()).hexdigest()]}],
}
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture
async def stack():
    async with sim_fleet(2) as fleet:
        policy = policy_for(fleet.urls, tenancy=TENANCY, routing={"policy": "prefix_affinity"})
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            yield fleet, gw, s


async def post(s: aiohttp.ClientSession, url: str, body: dict, headers: dict = AUTH) -> tuple[int, dict]:
    async with s.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def test_each_endpoint_answers_in_vllms_shape(stack) -> None:
    fleet, gw, s = stack
    m = {"model": "sim-llama"}
    status, tok = await post(s, gw.url + "/tokenize", {**m, "prompt": "hello world"})
    assert status == 200 and tok["count"] == len(tok["tokens"]) == 3
    status, detok = await post(s, gw.url + "/detokenize", {**m, "tokens": tok["tokens"]})
    assert status == 200 and detok["prompt"] == "hello world"
    status, chat_tok = await post(
        s, gw.url + "/tokenize", {**m, "messages": [{"role": "user", "content": "hi"}]}
    )
    assert status == 200 and chat_tok["count"] > 0
    status, rr = await post(
        s, gw.url + "/v1/rerank", {**m, "query": "q", "documents": ["a", "b", "c"], "top_n": 2}
    )
    assert status == 200 and len(rr["results"]) == 2
    assert rr["results"][0]["relevance_score"] >= rr["results"][1]["relevance_score"]
    status, sc = await post(s, gw.url + "/v1/score", {**m, "text_1": "q", "text_2": ["a", "b"]})
    assert status == 200 and [d["index"] for d in sc["data"]] == [0, 1] and sc["usage"]["prompt_tokens"] > 0
    status, pool = await post(s, gw.url + "/pooling", {**m, "input": ["x", "y"]})
    assert status == 200 and len(pool["data"]) == 2 and len(pool["data"][0]["data"]) == 8
    status, cls = await post(s, gw.url + "/classify", {**m, "input": "great"})
    assert status == 200 and cls["data"][0]["num_classes"] == 2
    traces = [await _traces(s, u) for u in fleet.urls]
    assert traces == [[], []]  # no trace context was sent: none invented without tracing
    assert sum([len(await sim_requests(u)) for u in fleet.urls]) == 7
    # billed where vLLM reports usage (score, pooling, classify), never tokenize/detokenize
    (row,) = await gw.process.metering.ledger.query(tenant="t1")
    assert row.requests == 4  # rerank reports usage too


async def test_tenancy_model_and_bad_input(stack) -> None:
    fleet, gw, s = stack
    status, body = await post(s, gw.url + "/tokenize", {"model": "sim-llama", "prompt": "x"}, headers={})
    assert status == 401 and body["error"]["type"] == "authentication_error"
    status, body = await post(s, gw.url + "/v1/rerank", {"model": "other", "query": "q", "documents": ["a"]})
    assert status == 404 and body["error"]["code"] == "model_not_found"
    cases = [
        ("/tokenize", {"model": "sim-llama"}, "prompt"),
        ("/detokenize", {"model": "sim-llama", "tokens": "abc"}, "tokens"),
        ("/v1/rerank", {"model": "sim-llama", "query": "q", "documents": []}, "documents"),
        ("/v1/rerank", {"model": "sim-llama", "documents": ["a"]}, "query"),
        ("/v1/score", {"model": "sim-llama", "text_1": "a"}, "text_2"),
        ("/v1/score", {"model": "sim-llama", "text_1": 3, "text_2": "b"}, "text_1"),
        ("/pooling", {"model": "sim-llama", "input": [1.5]}, "input"),
        ("/classify", {"model": "sim-llama", "input": []}, "input"),
        ("/classify", {"input": "x"}, "model"),
    ]
    for path, body, param in cases:
        status, err = await post(s, gw.url + path, body)
        assert status == 400, (path, body)
        assert err["error"]["param"] == param and err["error"]["type"] == "invalid_request_error", (path, err)
    assert [await sim_requests(u) for u in fleet.urls] == [[], []]


async def _traces(s: aiohttp.ClientSession, url: str) -> list[dict]:
    async with s.get(url + "/sim/traces") as r:
        return await r.json()
