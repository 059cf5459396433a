"""Tenant budgets through real gateways, the real ``openai`` and ``anthropic`` clients and a real Redis.

- Two gateway processes share one budget through Redis; concurrent clients on both exhaust it. The
  ledger's spend passes the limit by no more than the documented bound (``cache.billing.budgets``:
  in-flight requests x the most one request costs, both computed from the policy and the requests),
  the shared counter equals the ledger's spend exactly, and every request after answers 429
  ``budget_exceeded`` (OpenAI's shape, Anthropic's on /v1/messages) with ``Retry-After`` to the
  period's end; another tenant is still served; ``prefix-gateway usage --budgets`` and
  ``GET /admin/usage/budgets`` show the spend against the budget.
- Redis stopped: a process counts locally and admits the budgeted tenant up to
  ``tenancy.budgets.outage_pct`` of the budget (0: refuses it at once), never the other tenants; once
  Redis answers, what it counted reaches the shared counter.
- Without Redis: the budget is enforced from the SQLite ledger (a restarted gateway reads the day's spend
  back), and a soft limit and the exhaustion are one log line each, with no key.

Period resets run on an injectable clock in ``tests/unit/test_budgets.py``."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import httpx
import openai
import orjson
import pytest
import redis.asyncio as aioredis
import yaml

from bench.procs import running, start_gateway, start_sim
from cache.billing.budgets import BudgetCounters, budgets_of, spans
from cache.billing.ledger_redis import RedisLedger
from cache.billing.pricing import RequestUsage, bill, prices_from_config, rules_from_config
from config.loader import load_policy
from config.policy import Policy
from gateway.cli.main import main
from tests.support.redis_server import RedisServer
from tests.support.stack import gateway, policy_for, sim_fleet

KEYS = {"acme": "sk-acme-budget", "beta": "sk-beta-free"}
ADMIN = "budget-admin-token"
ENV = {"PREFIX_GATEWAY_SECRET": "budget-secret", "PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN}
MAX_TOKENS = 8
PRICES = {"sim-llama": {"input_per_1m": "1", "output_per_1m": "100"}}  # 1 and 100 µ$ a token
MSG = [{"role": "user", "content": "How long is a piece of string?"}]


def tenants(budget: dict[str, Any]) -> list[dict[str, Any]]:
    def digest(t: str) -> list[str]:
        return [hashlib.sha256(KEYS[t].encode()).hexdigest()]

    return [
        {"id": "acme", "api_key_sha256": digest("acme"), "budgets": [budget]},
        {"id": "beta", "api_key_sha256": digest("beta")},
    ]


def period_end_s(policy: Policy) -> float:
    """When acme's budget period ends (the reset a refusal names), from the policy."""
    (budget,) = budgets_of(policy.tenancy)["acme"]
    return spans(budget, int(time.time() * 1000))[-1].end_ms / 1000


def shared_policy(urls: list[str], redis_url: str) -> dict[str, Any]:
    return {
        "server": {"access_log": False},
        "cache": {"enabled": False},
        "redis": {"url": redis_url},
        "billing": {"ledger": {"kind": "redis"}, "models": PRICES},
        "models": [{"name": "sim-llama", "replicas": [{"url": u} for u in urls]}],
        "tenancy": {
            "allow_anonymous": False,
            "tenants": tenants({"name": "monthly", "spend": "0.02", "period": "month", "warn_at_pct": [50]}),
        },
    }


def max_cost(policy: Policy, prompt_tokens: int) -> int:
    """The most one of the test's requests costs at the policy's prices: its prompt and all of max_tokens."""
    item = bill(
        RequestUsage(prompt_tokens, MAX_TOKENS),
        prices_from_config(policy.billing, "sim-llama"),
        rules_from_config(policy.billing, "sim-llama"),
        None,
        "upstream",
        request_id="bound",
        tenant="acme",
        model="sim-llama",
        ts_ms=0,
    )
    return item.total_micros


async def spend_until_refused(url: str, prompts: list[int]) -> int:
    """Chats as acme until the budget refuses one; the answers it got (their prompt sizes in ``prompts``)."""
    served = 0
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEYS["acme"], max_retries=0) as c:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                r = await c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=MAX_TOKENS)  # type: ignore[arg-type]
            except openai.RateLimitError as err:
                assert err.code == "budget_exceeded"
                return served
            assert r.usage is not None
            prompts.append(r.usage.prompt_tokens)
            served += 1
    raise AssertionError("the budget never refused")


def test_two_processes_share_a_budget_and_overshoot_within_the_bound(
    tmp_path: Path, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sim, urls = start_sim(1, extra=["--mode", "simple"])
    with running(sim):
        path = tmp_path / "policy.yaml"
        raw = shared_policy(urls, redis_url)
        path.write_text(yaml.safe_dump(raw))
        policy = load_policy(path)
        limit = budgets_of(policy.tenancy)["acme"][0].limit
        gws = [start_gateway(["--config", str(path)], env=ENV) for _ in range(2)]
        with running(*gws):
            per_gateway = 6
            prompts: list[int] = []

            async def exhaust() -> list[int]:
                runs = [spend_until_refused(g.url, prompts) for g in gws for _ in range(per_gateway)]
                return await asyncio.gather(*runs)

            served = asyncio.run(exhaust())
            in_flight = per_gateway * len(gws)  # every client waits for its answer before the next request
            assert sum(served) > in_flight  # the budget ran out under load, not at the first requests

            async def ledger_spend() -> tuple[int, int]:
                client = aioredis.from_url(redis_url)
                try:
                    rows = await RedisLedger(client).query(tenant="acme", group_by=("tenant",))
                    counters = BudgetCounters(redis=client)
                    (s,) = await counters.spent(budgets_of(policy.tenancy)["acme"])
                    return rows[0].cost_micros, s.spent
                finally:
                    await client.aclose()

            spent, counted = asyncio.run(ledger_spend())
            bound = in_flight * max_cost(policy, max(prompts))
            assert limit <= spent <= limit + bound, (spent, limit, bound)
            assert counted == spent  # the shared counter is the ledger's rows, each counted once

            # After: the API's own 429 from either process, with the reset, the period's end.
            for g in gws:
                r = httpx.post(
                    g.url + "/v1/chat/completions",
                    json={"model": "sim-llama", "messages": MSG, "max_tokens": 2},
                    headers={"Authorization": f"Bearer {KEYS['acme']}"},
                )
                assert r.status_code == 429
                err = r.json()["error"]
                assert (err["code"], err["type"]) == ("budget_exceeded", "insufficient_quota")
                reset = period_end_s(policy)
                assert abs(int(r.headers["Retry-After"]) - (reset - time.time())) <= 5
                at = datetime.fromtimestamp(reset, tz=UTC).isoformat(timespec="seconds")
                assert r.headers["x-budget-reset"] == at and at in err["message"]
                assert "'monthly'" in err["message"] and "0.020000 USD" in err["message"]
                msg = httpx.post(
                    g.url + "/v1/messages",
                    json={"model": "sim-llama", "messages": MSG, "max_tokens": 2},
                    headers={"x-api-key": KEYS["acme"], "anthropic-version": "2023-06-01"},
                )
                assert msg.status_code == 429
                assert abs(int(msg.headers["Retry-After"]) - int(r.headers["Retry-After"])) <= 2
                body = msg.json()
                assert body["type"] == "error" and body["error"]["type"] == "rate_limit_error"
                assert "Budget 'monthly' is exhausted" in body["error"]["message"]

            async def clients_after() -> None:
                async with anthropic.AsyncAnthropic(
                    base_url=gws[1].url, api_key=KEYS["acme"], max_retries=0
                ) as a:
                    with pytest.raises(anthropic.RateLimitError):
                        await a.messages.create(model="sim-llama", max_tokens=5, messages=MSG)  # type: ignore[arg-type]
                async with openai.AsyncOpenAI(
                    base_url=gws[0].url + "/v1", api_key=KEYS["acme"], max_retries=0
                ) as c:
                    with pytest.raises(openai.RateLimitError) as rl:
                        await c.completions.create(model="sim-llama", prompt="hi", max_tokens=2)
                    assert rl.value.code == "budget_exceeded"
                for g in gws:  # another tenant is not blocked
                    async with openai.AsyncOpenAI(
                        base_url=g.url + "/v1", api_key=KEYS["beta"], max_retries=0
                    ) as c:
                        ok = await c.chat.completions.create(model="sim-llama", messages=MSG, max_tokens=2)  # type: ignore[arg-type]
                        assert ok.choices[0].message.content

            asyncio.run(clients_after())

            # Spend against budget: the CLI (from Redis) and the admin endpoint agree with the ledger.
            capsys.readouterr()
            assert main(["usage", "--budgets", "--config", str(path), "--format", "json"]) == 0
            (row,) = orjson.loads(capsys.readouterr().out)["budgets"]
            assert (row["tenant"], row["budget"], row["spent"], row["limit"]) == (
                "acme",
                "monthly",
                spent,
                limit,
            )
            assert row["exhausted"] and row["currency"] == "USD"
            assert main(["usage", "--budgets", "--config", str(path)]) == 0
            table = capsys.readouterr().out
            assert "monthly" in table and "EXHAUSTED" in table and "0.020000 USD" in table
            admin = httpx.get(
                gws[1].url + "/admin/usage/budgets", headers={"Authorization": f"Bearer {ADMIN}"}
            )
            assert admin.status_code == 200
            (live,) = admin.json()["budgets"]
            assert live["spent"] == spent and live["exhausted"] and not live["degraded"]
            # The soft limit at 50 % and the exhaustion were each counted once across both processes.
            crossed = sum(soft_limit_count(g.metrics_url, pct) for g in gws for pct in ("50", "100"))
            assert crossed == 2
            assert all(g.stop() == 0 for g in gws)


def soft_limit_count(metrics_url: str | None, pct: str) -> float:
    assert metrics_url is not None
    text = httpx.get(metrics_url + "/metrics").text
    for line in text.splitlines():
        if line.startswith("prefix_gateway_budget_soft_limit_total{") and f'pct="{pct}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("outage_pct", [25, 0])
async def test_a_redis_outage_fails_open_within_the_allowance(outage_pct: int) -> None:
    server = RedisServer()
    server.start()
    try:
        async with sim_fleet(1) as fleet:
            budget = {"name": "daily", "spend": "0.01", "period": "day"}
            policy = policy_for(
                fleet.urls,
                redis={"url": server.url},
                billing={"ledger": {"path": ":memory:"}, "models": PRICES},
                tenancy={
                    "allow_anonymous": False,
                    "tenants": tenants(budget),
                    "budgets": {"outage_pct": outage_pct},
                },
            )
            limit = budgets_of(policy.tenancy)["acme"][0].limit
            async with gateway(policy) as gw, aiohttp.ClientSession() as s:

                async def ask(tenant: str) -> tuple[int, int, dict[str, Any]]:
                    body = {"model": "sim-llama", "messages": MSG, "max_tokens": MAX_TOKENS}
                    auth = {"Authorization": f"Bearer {KEYS[tenant]}"}
                    async with s.post(gw.url + "/v1/chat/completions", json=body, headers=auth) as r:
                        data = await r.json()
                        cost = round(float(r.headers.get("x-gateway-billing-cost", "0")) * 1e6)
                        return r.status, cost, data

                status, before, answer = await ask("acme")
                assert status == 200 and 0 < before < limit
                prompt = answer["usage"]["prompt_tokens"]
                counters = gw.process.budgets
                assert counters is not None
                server.stop()
                assert (await ask("beta"))[0] == 200  # a tenant without budgets never waits on it
                outage = 0
                for _ in range(200):
                    status, cost, data = await ask("acme")
                    if status != 200:
                        break
                    outage += cost
                assert status == 429 and data["error"]["code"] == "budget_exceeded"
                assert "unreachable" in data["error"]["message"]
                allowance = outage_pct * limit // 100
                # One request at a time: the allowance, overshot by at most the one admitted just before it.
                assert allowance <= outage <= allowance + max_cost(policy, prompt)
                if outage_pct == 0:
                    assert outage == 0  # fail closed for the budgeted tenant only
                assert counters.unsynced == outage
                assert (await ask("beta"))[0] == 200
                server.start()
                deadline = time.monotonic() + 30
                while counters.unsynced:
                    assert time.monotonic() < deadline, (
                        "the counts kept during the outage never reached Redis"
                    )
                    await asyncio.sleep(0.05)
                # The test's Redis restarted empty: what it holds now is exactly what was counted meanwhile.
                while (now := (await counters.spent(budgets_of(policy.tenancy)["acme"]))[0]).degraded:
                    assert time.monotonic() < deadline, "Redis never answered a read again"
                    await asyncio.sleep(0.05)
                assert now.spent == outage
                status, _, _ = await ask("acme")
                assert status == 200
    finally:
        server.stop()


async def test_without_redis_a_budget_is_read_from_the_ledger_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One process without Redis: the soft limit and the exhaustion are each one log line (the tenant's
    label, no key), and a restarted gateway reads the period's spend back from the SQLite ledger."""
    caplog.set_level(logging.INFO, logger="prefix_gateway")
    async with sim_fleet(1) as fleet:
        budget = {"name": "tokens-today", "tokens": 300, "period": "day", "warn_at_pct": [50]}
        policy = policy_for(
            fleet.urls,
            billing={"ledger": {"path": str(tmp_path / "ledger.db")}, "models": PRICES},
            tenancy={"allow_anonymous": False, "tenants": tenants(budget)},
        )
        auth = {"Authorization": f"Bearer {KEYS['acme']}"}
        body = {"model": "sim-llama", "messages": MSG, "max_tokens": MAX_TOKENS}
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            statuses = []
            for _ in range(100):
                async with s.post(gw.url + "/v1/chat/completions", json=body, headers=auth) as r:
                    statuses.append(r.status)
                    refusal = await r.json()
                if r.status != 200:
                    break
            assert statuses[-1] == 429 and set(statuses[:-1]) == {200} and len(statuses) > 2
            assert (
                refusal["error"]["code"] == "budget_exceeded"
                and "tokens of 300 tokens" in refusal["error"]["message"]
            )
        events = [getattr(rec, "event", None) for rec in caplog.records]
        assert events.count("budget_soft_limit") == 1 and events.count("budget_exhausted") == 1
        soft = next(rec for rec in caplog.records if getattr(rec, "event", None) == "budget_soft_limit")
        assert (soft.tenant, soft.budget, soft.pct) == ("acme", "tokens-today", 50)  # type: ignore[attr-defined]
        assert KEYS["acme"] not in caplog.text
        # A new process on the same ledger: the day's spend is read back, the first request refused.
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            async with s.post(gw.url + "/v1/chat/completions", json=body, headers=auth) as r:
                assert r.status == 429 and (await r.json())["error"]["code"] == "budget_exceeded"
            tokenize = {"model": "sim-llama", "prompt": "hello world"}  # never billed: never refused
            async with s.post(gw.url + "/tokenize", json=tokenize, headers=auth) as r:
                assert r.status == 200 and (await r.json())["tokens"]
            beta = {"Authorization": f"Bearer {KEYS['beta']}"}
            async with s.post(gw.url + "/v1/chat/completions", json=body, headers=beta) as r:
                assert r.status == 200
