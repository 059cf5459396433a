"""The admin API: token handling, replica listing, drain/undrain, extension point."""

from __future__ import annotations

import aiohttp
import orjson
from aiohttp import web

from gateway.admin.auth import add_admin_route
from gateway.server.app import create_app, runner_for
from tests.fault.support import ADMIN, ADMIN_TOKEN, admin_replicas, chat, gateway_with, post
from tests.support.stack import TEST_SECRET, policy_for, sim_fleet


async def test_admin_is_absent_without_a_token(monkeypatch) -> None:
    monkeypatch.delenv("PREFIX_GATEWAY_ADMIN_TOKEN", raising=False)
    async with (
        sim_fleet(1) as fleet,
        gateway_with(policy_for(fleet.urls)) as gw,
        aiohttp.ClientSession() as s,
    ):
        for method, path in (("GET", "/admin/replicas"), ("POST", "/admin/reload")):
            async with s.request(method, gw.url + path, headers=ADMIN) as r:
                assert r.status == 404
                assert (await r.json())["error"]["code"] == "not_found"


async def test_token_missing_wrong_right(monkeypatch) -> None:
    monkeypatch.setenv("OPS_TOKEN", ADMIN_TOKEN)
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls, admin={"token_env": "OPS_TOKEN"})
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            async with s.get(gw.url + "/admin/replicas") as r:
                assert r.status == 401
                body = await r.json()
                assert body["error"]["type"] == "authentication_error"
                assert r.headers["WWW-Authenticate"] == "Bearer"
            async with s.get(gw.url + "/admin/replicas", headers={"Authorization": "Bearer nope"}) as r:
                assert r.status == 403
                assert (await r.json())["error"]["code"] == "invalid_admin_token"
            async with s.get(
                gw.url + "/admin/replicas", headers={"Authorization": "Basic " + ADMIN_TOKEN}
            ) as r:
                assert r.status == 401
            rows = await admin_replicas(s, gw.url)
            row = rows["r0"]
            assert row["healthy"] is True and row["breaker"] == "closed" and row["drained"] is False
            assert {"in_flight", "reported", "index_blocks", "active_ok", "url"} <= set(row)


async def test_drain_and_undrain(monkeypatch) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    async with sim_fleet(2) as fleet:
        policy = policy_for(fleet.urls, routing={"policy": "prefix_affinity"})
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            for i in range(4):
                await post(s, gw.url, chat(f"warm {i}" * 20))
            async with s.post(gw.url + "/admin/replicas/r0/drain", headers=ADMIN) as r:
                assert r.status == 200 and (await r.json())["drained"] is True
            rows = await admin_replicas(s, gw.url)
            assert rows["r0"]["drained"] and not rows["r0"]["healthy"]
            for i in range(8):
                status, headers, _ = await post(s, gw.url, chat(f"after {i}" * 20))
                assert status == 200 and headers["x-gateway-replica"] == "r1"
            async with s.get(gw.url + "/ready") as r:
                assert r.status == 200  # r1 still serves the model
            async with s.post(gw.url + "/admin/replicas/r0/undrain", headers=ADMIN) as r:
                assert r.status == 200
            seen = set()
            for i in range(12):
                _, headers, _ = await post(s, gw.url, chat(f"again {i}" * 20))
                seen.add(headers["x-gateway-replica"])
            assert seen == {"r0", "r1"}
            async with s.post(gw.url + "/admin/replicas/nope/drain", headers=ADMIN) as r:
                assert r.status == 404
                assert (await r.json())["error"]["code"] == "replica_not_found"


async def test_add_admin_route_is_protected(monkeypatch) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls)
        app = create_app(policy, secret=TEST_SECRET)

        async def purge(request: web.Request) -> web.Response:
            return web.Response(body=orjson.dumps({"purged": 0}), content_type="application/json")

        add_admin_route(app, "POST", "/test/echo", purge)
        runner = runner_for(app, policy)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        try:
            async with aiohttp.ClientSession() as s:
                async with s.post(url + "/admin/test/echo") as r:
                    assert r.status == 401
                async with s.post(url + "/admin/test/echo", headers=ADMIN) as r:
                    assert r.status == 200 and (await r.json()) == {"purged": 0}
        finally:
            await runner.cleanup()


async def test_debug_counts_tasks_and_connections(monkeypatch) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    async with (
        sim_fleet(1) as fleet,
        gateway_with(policy_for(fleet.urls)) as gw,
        aiohttp.ClientSession() as s,
    ):
        async with s.get(gw.url + "/admin/debug", headers=ADMIN) as r:
            data = await r.json()
        assert data["tasks"] >= 1 and data["client_connections"] >= 1
