"""A tenant's models (``tenancy.tenants[].models``: names and glob patterns, LoRA adapters included)
through a real gateway: a model outside them is refused at every endpoint in the API's own shape (OpenAI's
404 ``model_not_found`` "does not exist or you do not have access to it"; Anthropic's ``not_found_error``
on /v1/messages), batch lines at validation, and ``/v1/models`` lists only the tenant's models. Driven by
the real ``openai`` and ``anthropic`` clients."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from config.policy import Policy
from sim.config import SimConfig
from sim.fleet import start_replicas
from tests.support.stack import Gateway, gateway, policy_for

KEYS = {"small": "sk-small", "nolora": "sk-nolora", "all": "sk-all"}
MODELS = {"small": ["sim-llama", "sql-*"], "nolora": ["sim-llama"], "all": None}
DENIED = "The model `sim-big` does not exist or you do not have access to it."


def tenant_policy(urls: list[str], tmp: Path) -> Policy:
    raw = policy_for(urls).model_dump(mode="json")
    base = raw["models"][0]
    base["lora"] = {"refresh_s": 0.1}
    big = {**base, "name": "sim-big", "served_model_name": "sim-llama", "lora": {"refresh_s": 0.1}}
    raw["models"] = [base, big]
    tenants = []
    for t, key in KEYS.items():
        entry: dict[str, Any] = {"id": t, "api_key_sha256": [hashlib.sha256(key.encode()).hexdigest()]}
        if MODELS[t] is not None:
            entry["models"] = MODELS[t]
        tenants.append(entry)
    raw["tenancy"] = {"allow_anonymous": False, "tenants": tenants}
    raw["batch"] = {
        "enabled": True,
        "dir": str(tmp / "files"),
        "sqlite_path": str(tmp / "jobs.db"),
        "poll_s": 0.05,
    }
    return Policy.model_validate(raw)


@pytest.fixture
async def gw(tmp_path: Path) -> AsyncIterator[Gateway]:
    fleet = await start_replicas([SimConfig(speed=0.0, lora_adapters=("sql-lora",))], base_port=0)
    try:
        async with gateway(tenant_policy(fleet.urls, tmp_path)) as g:
            yield g
    finally:
        await fleet.stop()


def oai(gw: Gateway, tenant: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=KEYS[tenant], max_retries=0)


async def listed(gw: Gateway, tenant: str) -> set[str]:
    async with oai(gw, tenant) as c:
        return {m.id async for m in c.models.list()}


async def until_adapters_listed(gw: Gateway) -> None:
    deadline = time.monotonic() + 10
    while "sql-lora" not in await listed(gw, "all"):
        assert time.monotonic() < deadline, "the adapter was never listed"
        await asyncio.sleep(0.05)


def assert_denied(err: openai.NotFoundError) -> None:
    assert err.status_code == 404 and err.code == "model_not_found"
    assert err.body["message"] == DENIED and err.body["param"] == "model"  # type: ignore[index]


async def test_every_endpoint_refuses_a_model_outside_the_tenants(gw: Gateway) -> None:
    msg = [{"role": "user", "content": "hello"}]
    async with oai(gw, "small") as c:
        calls = [
            c.chat.completions.create(model="sim-big", messages=msg, max_tokens=2),  # type: ignore[arg-type]
            c.chat.completions.create(model="sim-big", messages=msg, max_tokens=2, stream=True),  # type: ignore[arg-type]
            c.completions.create(model="sim-big", prompt="hello", max_tokens=2),
            c.responses.create(model="sim-big", input="hello", max_output_tokens=2),
            c.embeddings.create(model="sim-big", input="hello"),
        ]
        for call in calls:
            with pytest.raises(openai.NotFoundError) as nf:
                await call
            assert_denied(nf.value)
        # What it may call answers; so does every model for a tenant without a list.
        ok = await c.chat.completions.create(model="sim-llama", messages=msg, max_tokens=2)  # type: ignore[arg-type]
        assert ok.choices[0].message.content
    async with oai(gw, "all") as c:
        ok = await c.chat.completions.create(model="sim-big", messages=msg, max_tokens=2)  # type: ignore[arg-type]
        assert ok.choices[0].message.content
        emb = await c.embeddings.create(model="sim-big", input="hello")
        assert emb.data

    async with anthropic.AsyncAnthropic(base_url=gw.url, api_key=KEYS["small"], max_retries=0) as a:
        with pytest.raises(anthropic.NotFoundError) as nf:
            await a.messages.create(model="sim-big", max_tokens=5, messages=msg)  # type: ignore[arg-type]
        body = nf.value.body
        assert body["type"] == "error" and body["error"]["type"] == "not_found_error"  # type: ignore[index]
        assert body["error"]["message"] == DENIED  # type: ignore[index]
        ok_msg = await a.messages.create(model="sim-llama", max_tokens=5, messages=msg)  # type: ignore[arg-type]
        assert ok_msg.content


async def test_adapters_by_pattern_and_the_models_list(gw: Gateway) -> None:
    await until_adapters_listed(gw)
    assert {"sim-llama", "sim-big", "sql-lora"} <= await listed(gw, "all")
    assert await listed(gw, "small") == {"sim-llama", "sql-lora"}
    assert await listed(gw, "nolora") == {"sim-llama"}
    msg = [{"role": "user", "content": "hello"}]
    async with oai(gw, "small") as c:
        ok = await c.chat.completions.create(model="sql-lora", messages=msg, max_tokens=2)  # type: ignore[arg-type]
        assert ok.choices[0].message.content
    async with oai(gw, "nolora") as c:
        with pytest.raises(openai.NotFoundError) as nf:
            await c.chat.completions.create(model="sql-lora", messages=msg, max_tokens=2)  # type: ignore[arg-type]
        assert nf.value.code == "model_not_found" and "sql-lora" in nf.value.message


async def wait_batch(c: openai.AsyncOpenAI, batch_id: str, *statuses: str) -> Any:
    deadline = time.monotonic() + 30
    while True:
        b = await c.batches.retrieve(batch_id)
        if b.status in statuses:
            return b
        assert time.monotonic() < deadline, f"batch still {b.status}"
        await asyncio.sleep(0.03)


async def test_batch_lines_are_checked_at_validation(gw: Gateway) -> None:
    url = "/v1/chat/completions"
    lines = [
        {
            "custom_id": f"c{i}",
            "method": "POST",
            "url": url,
            "body": {"model": "sim-big", "messages": [{"role": "user", "content": f"q{i}"}], "max_tokens": 2},
        }
        for i in range(3)
    ]
    data = b"\n".join(orjson.dumps(x) for x in lines) + b"\n"
    async with oai(gw, "small") as small, oai(gw, "all") as everyone:
        up = await small.files.create(file=("in.jsonl", data), purpose="batch")
        created = await small.batches.create(input_file_id=up.id, endpoint=url, completion_window="24h")
        failed = await wait_batch(small, created.id, "failed", "completed")
        assert failed.status == "failed" and failed.errors is not None
        assert [(e.line, e.code) for e in failed.errors.data] == [(n, "model_not_found") for n in (1, 2, 3)]
        assert failed.request_counts.total == 0
        # The same lines from a tenant that may use the model run.
        up = await everyone.files.create(file=("in.jsonl", data), purpose="batch")
        created = await everyone.batches.create(input_file_id=up.id, endpoint=url, completion_window="24h")
        done = await wait_batch(everyone, created.id, "failed", "completed")
        assert done.status == "completed" and done.request_counts.completed == 3
