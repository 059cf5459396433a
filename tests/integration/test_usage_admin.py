"""Usage reports (admin endpoint and CLI) and cache purge, with admin auth."""

from __future__ import annotations

import csv
import hashlib
import io
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.support.cli import run_cli
from tests.support.stack import gateway, policy_for, sim_fleet

TOKEN = "admin-secret"
KEYS = {"alpha": "sk-alpha", "beta": "sk-beta"}
TENANCY = {
    "allow_anonymous": False,
    "tenants": [
        {"id": t, "api_key_sha256": [hashlib.sha256(k.encode()).hexdigest()]} for t, k in KEYS.items()
    ],
}
PRICES = {"models": {"sim-llama": {"input_per_1m": "1.0", "output_per_1m": "4.0"}}}


async def chat(s: aiohttp.ClientSession, url: str, tenant: str, text: str, **extra) -> dict:
    body = {"model": "sim-llama", "max_tokens": 8, "messages": [{"role": "user", "content": text}], **extra}
    async with s.post(
        url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEYS[tenant]}"}
    ) as r:
        assert r.status == 200
        return await r.json()


async def test_admin_usage_needs_the_token_and_reports_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls, tenancy=TENANCY, billing={**PRICES, "ledger": {"path": ":memory:"}})
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            async with s.get(gw.url + "/admin/usage") as r:
                assert r.status == 404  # no admin token configured: the admin API does not exist
            monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", TOKEN)
            async with s.get(gw.url + "/admin/usage") as r:
                assert r.status == 401 and (await r.json())["error"]["code"] == "missing_admin_token"
            async with s.get(gw.url + "/admin/usage", headers={"Authorization": "Bearer nope"}) as r:
                assert r.status == 403
            answers = [await chat(s, gw.url, "alpha", f"question {i}") for i in range(3)]
            answers.append(await chat(s, gw.url, "beta", "hello"))
            auth = {"Authorization": f"Bearer {TOKEN}"}
            async with s.get(gw.url + "/admin/usage?group_by=tenant", headers=auth) as r:
                report = await r.json()
            rows = {row["tenant"]: row for row in report["rows"]}
            alpha_prompt = sum(a["usage"]["prompt_tokens"] for a in answers[:3])
            assert rows["alpha"]["requests"] == 3 and rows["beta"]["requests"] == 1
            assert rows["alpha"]["tokens"]["uncached"] == alpha_prompt  # short prompts: no implicit discount
            assert rows["alpha"]["tokens"]["output"] == 24
            assert rows["alpha"]["cost_micros"] == alpha_prompt * 1 + 24 * 4  # 1 and 4 micros per token
            assert report["totals"]["requests"] == 4
            async with s.get(gw.url + "/admin/usage?tenant=beta&since=not-a-date", headers=auth) as r:
                assert r.status == 400 and "since" in (await r.json())["error"]["message"]


def test_usage_cli_reads_the_sqlite_ledger(tmp_path: Path) -> None:
    import asyncio

    ledger = tmp_path / "ledger.db"
    policy_file = tmp_path / "policy.yaml"

    async def traffic() -> None:
        async with sim_fleet(1) as fleet:
            raw = {
                "models": [{"name": "sim-llama", "replicas": [{"url": fleet.urls[0]}]}],
                "tenancy": TENANCY,
                "billing": {**PRICES, "ledger": {"path": str(ledger)}},
            }
            policy_file.write_text(yaml.safe_dump(raw))
            policy = policy_for(
                fleet.urls, tenancy=TENANCY, billing={**PRICES, "ledger": {"path": str(ledger)}}
            )
            async with gateway(policy) as gw, aiohttp.ClientSession() as s:
                await chat(s, gw.url, "alpha", "one")
                await chat(s, gw.url, "beta", "two")

    asyncio.run(traffic())
    table = subprocess.run(
        [sys.executable, "-m", "gateway", "usage", "--config", str(policy_file)],
        capture_output=True,
        text=True,
    )
    assert table.returncode == 0, table.stderr
    assert "alpha" in table.stdout and "beta" in table.stdout and "total: 2 requests" in table.stdout
    # The first command above ran as a user runs it; the rest in this process (tests/support/cli.py).
    out = run_cli("usage", "--config", str(policy_file), "--format", "csv", "--tenant", "alpha")
    rows = list(csv.DictReader(io.StringIO(out.stdout)))
    assert len(rows) == 1 and rows[0]["tenant"] == "alpha" and rows[0]["output"] == "8"
    assert rows[0]["currency"] == "USD"
    bad = run_cli("usage", "--config", str(policy_file), "--since", "yesterday")
    assert bad.returncode == 1 and "--since" in bad.stderr
    # issue 31, item 6: the ledger by its path, without the policy (the demo's ./var/ledger.db)
    by_path = run_cli("usage", "--ledger", str(ledger))
    assert by_path.returncode == 0, by_path.stderr
    assert "alpha" in by_path.stdout and "total: 2 requests" in by_path.stdout
    for args in (["--ledger", str(ledger.parent / "nothing.db")], []):
        missing = run_cli("usage", *args)
        assert missing.returncode == 1 and "Traceback" not in missing.stderr
        assert ("no SQLite ledger" if args else "--ledger PATH") in missing.stderr, missing.stderr


async def test_cache_purge_by_tenant(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", TOKEN)
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls, tenancy=TENANCY, cache={"enabled": True})
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            for tenant in ("alpha", "beta"):
                await chat(s, gw.url, tenant, "same question", temperature=0)
            assert len(gw.state.cache.store) == 2
            auth = {"Authorization": f"Bearer {TOKEN}"}
            async with s.post(gw.url + "/admin/cache/purge", json={"tenant": "alpha"}, headers=auth) as r:
                assert r.status == 200 and (await r.json())["entries"] == 1
            assert len(gw.state.cache.store) == 1
            async with s.post(gw.url + "/admin/cache/purge", json={}, headers=auth) as r:
                assert r.status == 400
