"""The layout advisor wired into a running gateway: observation on the request path, GET /admin/advice,
its gauges, the ``prefix-gateway advise`` command; per tenant, with no prompt text in any output."""

from __future__ import annotations

import asyncio
import hashlib
import io
import logging
import random
import re
from contextlib import redirect_stdout
from pathlib import Path

import aiohttp
import orjson
import pytest
import yaml

from gateway.cli.main import main as cli_main
from tests.support.stack import gateway, policy_for, sim_fleet

ADMIN_TOKEN = "admin-token-for-advice"
KEYS = {"stamped": "key-stamped-0123", "tidy": "key-tidy-4567"}
TENANCY = {
    "tenants": [
        {"id": t, "api_key_sha256": [hashlib.sha256(k.encode()).hexdigest()]} for t, k in KEYS.items()
    ]
}
ADVISOR = {"enabled": True, "sample_rate": 1.0, "min_requests": 20}
WORD = re.compile(r"[a-z]{6,}")


def words(rng: random.Random, n: int) -> str:
    return " ".join("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8)) for _ in range(n))


def bodies(rng: random.Random, n: int) -> dict[str, list[dict]]:
    rules = words(rng, 400)  # ~900 tokens of fixed system text (below the explicit-cache minimum)
    return {
        # A timestamp ahead of the fixed rules: no prefix cache can hold them.
        "stamped": [
            {
                "model": "sim-llama",
                "max_tokens": 2,
                "messages": [
                    {"role": "system", "content": f"Now: {i * 7919:012d}.\n" + rules},
                    {"role": "user", "content": words(rng, 30)},
                ],
            }
            for i in range(n)
        ],
        # The same rules first, the variable part last: nothing to advise.
        "tidy": [
            {
                "model": "sim-llama",
                "max_tokens": 2,
                "messages": [
                    {"role": "system", "content": rules},
                    {"role": "user", "content": words(rng, 30)},
                ],
            }
            for _ in range(n)
        ],
    }


@pytest.mark.slow
async def test_advice_names_the_stamped_tenant_only(monkeypatch, tmp_path: Path, caplog) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    caplog.set_level(logging.DEBUG)
    sent = bodies(random.Random(7), 40)
    async with sim_fleet(2) as fleet:
        policy = policy_for(
            fleet.urls,
            routing={"policy": "prefix_affinity"},
            tenancy=TENANCY,
            advisor=ADVISOR,
            billing={
                "default": {"input_per_1m": "2.0", "output_per_1m": "8.0"},
                "ledger": {"path": ":memory:"},
            },
            admin={"token_env": "PREFIX_GATEWAY_ADMIN_TOKEN"},
            server={"host": "127.0.0.1", "port": 0, "access_log": True},
        )
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            for tenant, reqs in sent.items():
                for body in reqs:
                    headers = {"Authorization": f"Bearer {KEYS[tenant]}"}
                    async with s.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as r:
                        assert r.status == 200, await r.text()
            admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with s.get(gw.url + "/admin/advice", headers=admin) as r:
                assert r.status == 200, await r.text()
                raw = await r.read()
            async with s.get(gw.url + "/admin/advice?tenant=tidy", headers=admin) as r:
                only_tidy = await r.json()
            async with s.get(gw.url + "/admin/advice") as r:
                assert r.status == 401  # behind the admin token
            async with s.get(gw.metrics_url + "/metrics") as r:
                metrics = await r.text()

            # the command asks the running gateway (in a thread: it is a blocking client)
            path = tmp_path / "policy.yaml"
            path.write_text(yaml.safe_dump(policy.model_dump(mode="json", exclude_none=True)))
            out = io.StringIO()

            def advise() -> int:
                with redirect_stdout(out):
                    return cli_main(["advise", "--config", str(path), "--url", gw.url, "--format", "json"])

            assert await asyncio.to_thread(advise) == 0

    doc = orjson.loads(raw)
    by_tenant = {t["tenant"]: t for t in doc["advice"]["tenants"]}
    stamped = [f for m in by_tenant["stamped"]["models"] for f in m["findings"]]
    assert [f["kind"] for f in stamped] == ["variable_prefix"]
    assert stamped[0]["where"]["message"] == 0 and stamped[0]["where"]["role"] == "system"
    assert stamped[0]["saving"]["micros_per_day"] > 0
    assert [f for m in by_tenant["tidy"]["models"] for f in m["findings"]] == []
    assert [t["tenant"] for t in only_tidy["advice"]["tenants"]] == ["tidy"]  # isolation
    # the savings report per layer comes from the same gateway's ledger
    assert {t["tenant"] for t in doc["savings"]["tenants"]} >= {"stamped", "tidy"}
    assert 'prefix_gateway_advice_findings{kind="variable_prefix",tenant="stamped"} 1.0' in metrics
    assert 'prefix_gateway_advice_findings{kind="variable_prefix",tenant="tidy"} 0.0' in metrics

    def kinds(d: dict) -> dict[str, list[str]]:
        return {
            t["tenant"]: [f["kind"] for m in t["models"] for f in m["findings"]]
            for t in d["advice"]["tenants"]
        }

    assert kinds(orjson.loads(out.getvalue())) == kinds(doc) == {"stamped": ["variable_prefix"], "tidy": []}
    # no prompt text anywhere the advisor writes: the document, the command's output, metrics, logs
    prompt_words = {
        w for reqs in sent.values() for b in reqs for m in b["messages"] for w in WORD.findall(m["content"])
    }
    outputs = [raw.decode(), out.getvalue(), metrics, caplog.text]
    for text in outputs:
        assert prompt_words.isdisjoint(WORD.findall(text))
