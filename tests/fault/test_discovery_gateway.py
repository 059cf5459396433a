"""DNS discovery inside a running gateway: replicas come and go without a restart, a failed
resolution keeps the last known set, and a real name (``localhost``) works end to end."""

from __future__ import annotations

import aiohttp
from prometheus_client import CollectorRegistry

from config.policy import Policy
from gateway.fleet.discovery import resolve_dns
from tests.fault.support import chat, gateway_with, post, wait_for
from tests.support.stack import sim_fleet


def discovery_policy(port: int, interval_s: float = 0.05, static: list[str] | None = None) -> Policy:
    return Policy.model_validate(
        {
            "server": {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "access_log": False},
            # one failed probe ejects (and drops the index the test compares): a refused one, never a
            # late one of a loaded machine (policy_for's 5 s)
            "health": {"interval_s": 0.1, "timeout_s": 5.0, "fails_to_eject": 1},
            "cache": {"enabled": False},
            "billing": {"ledger": {"path": ":memory:"}},
            "models": [
                {
                    "name": "sim-llama",
                    "replicas": [{"url": u, "id": f"s{i}"} for i, u in enumerate(static or [])],
                    "discovery": {"dns": "gpu-pool.internal", "port": port, "interval_s": interval_s},
                    "routing": {"policy": "round_robin"},
                }
            ],
        }
    )


class FakeDNS:
    """A resolver whose answer the test sets; ``None`` means the name does not resolve."""

    def __init__(self) -> None:
        self.answer: list[str] | None = None
        self.calls = 0

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls += 1
        assert host == "gpu-pool.internal"
        if self.answer is None:
            raise OSError("Name or service not known")
        return list(self.answer)


def _metric(registry: CollectorRegistry, name: str, labels: dict[str, str]) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_replicas_appear_and_failures_keep_the_last_set() -> None:
    async with sim_fleet(2) as fleet:
        static_url, dyn_url = fleet.urls
        port = int(dyn_url.rsplit(":", 1)[1])
        dns = FakeDNS()
        async with gateway_with(discovery_policy(port, static=[static_url]), resolver=dns) as gw:
            router = gw.state.pools["sim-llama"].router
            registry = gw.process.metrics.registry
            await wait_for(lambda: dns.calls >= 2)
            assert [r.id for r in router.replicas] == ["s0"]  # nothing resolved yet: static only
            assert _metric(registry, "prefix_gateway_discovery_errors_total", {"model": "sim-llama"}) >= 1

            dns.answer = ["127.0.0.1"]
            await wait_for(lambda: len(router.replicas) == 2)
            assert router.replicas[1].id == f"127.0.0.1:{port}"
            async with aiohttp.ClientSession() as s:
                seen = {(await post(s, gw.url, chat(f"d{i}")))[1]["x-gateway-replica"] for i in range(6)}
            assert seen == {"s0", f"127.0.0.1:{port}"}
            index_before = set(router.index.replica_ids())

            dns.answer = None  # DNS outage: keep serving with what we know
            calls = dns.calls
            await wait_for(lambda: dns.calls > calls + 2)
            assert len(router.replicas) == 2 and set(router.index.replica_ids()) == index_before

            dns.answer = []  # the service scaled to zero pods
            await wait_for(lambda: len(router.replicas) == 1)
            assert f"127.0.0.1:{port}" not in router.index.replica_ids()
            assert (
                _metric(
                    registry,
                    "prefix_gateway_discovery_changes_total",
                    {"model": "sim-llama", "change": "removed"},
                )
                == 1
            )


async def test_discovery_only_pool_with_a_real_name() -> None:
    """``localhost`` through the real resolver (``loop.getaddrinfo``); only its IPv4 loopback answer is
    kept, since the simulator listens on 127.0.0.1 only."""

    async def localhost_v4(host: str, port: int) -> list[str]:
        return [a for a in await resolve_dns("localhost", port) if a == "127.0.0.1"]

    async with sim_fleet(1) as fleet:
        port = int(fleet.urls[0].rsplit(":", 1)[1])
        async with gateway_with(discovery_policy(port, interval_s=5.0), resolver=localhost_v4) as gw:
            await wait_for(lambda: len(gw.state.pools["sim-llama"].router.replicas) == 1)
            async with aiohttp.ClientSession() as s:
                status, headers, _ = await post(s, gw.url, chat())
                assert status == 200 and headers["x-gateway-replica"] == f"127.0.0.1:{port}"
                async with s.get(gw.url + "/ready") as r:
                    assert r.status == 200
