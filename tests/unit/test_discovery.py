"""Discovery: resolution with a real name, replica lists, and the few keys a fleet change moves."""

from __future__ import annotations

from config.policy import DiscoveryConfig, ModelPoolConfig, RoutingConfig
from gateway.fleet.discovery import discovered_states, pool_replicas, resolve_dns
from router.pool import PoolRouter
from router.types import RouteRequest


async def test_localhost_resolves_to_loopback() -> None:
    addresses = await resolve_dns("localhost", 8000)
    assert "127.0.0.1" in addresses
    assert len(addresses) == len(set(addresses))


def test_addresses_become_replicas_ipv6_bracketed() -> None:
    cfg = DiscoveryConfig(dns="vllm.ns.svc", port=8001, scheme="http", kv_capacity_blocks=100)
    states = discovered_states(cfg, ["10.0.0.5", "fd00::7"], "sglang")
    assert [(s.id, s.url, s.kind, s.kv_capacity_blocks) for s in states] == [
        ("10.0.0.5:8001", "http://10.0.0.5:8001", "sglang", 100),
        ("[fd00::7]:8001", "http://[fd00::7]:8001", "sglang", 100),
    ]


def test_static_replicas_first_and_not_duplicated() -> None:
    cfg = ModelPoolConfig.model_validate(
        {
            "name": "m",
            "replicas": [{"url": "http://10.0.0.5:8001"}],
            "discovery": {"dns": "x", "port": 8001},
        }
    )
    ids = [r.id for r in pool_replicas(cfg, ["10.0.0.5", "10.0.0.6"])]
    assert ids == ["10.0.0.5:8001", "10.0.0.6:8001"]


def _owners(router: PoolRouter, n: int) -> dict[int, str]:
    out = {}
    for i in range(n):
        body = {"model": "m", "prompt": f"prompt number {i} " + "x" * 40}
        d = router.route(RouteRequest("completions", "m", body))
        router.release(d)
        out[i] = d.replica.id
    return out


def test_consistent_hashing_moves_only_the_changed_replicas_keys() -> None:
    cfg = DiscoveryConfig(dns="x", port=8000)
    pool = ModelPoolConfig.model_validate({"name": "m", "discovery": cfg.model_dump()})
    routing = RoutingConfig(policy="consistent_hash", route_key_tokens=16)
    addrs = ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
    router = PoolRouter(pool_replicas(pool, addrs), routing)
    before = _owners(router, 600)
    assert len(set(before.values())) == 3

    router.set_replicas(pool_replicas(pool, [*addrs, "10.0.0.4"]))  # scale up
    after = _owners(router, 600)
    moved = [k for k in before if before[k] != after[k]]
    assert moved, "a new replica must take some keys"
    assert all(after[k] == "10.0.0.4:8000" for k in moved)
    assert len(moved) < 600 * 0.45  # about a quarter, never a reshuffle

    router.set_replicas(pool_replicas(pool, ["10.0.0.1", "10.0.0.3", "10.0.0.4"]))  # one pod gone
    final = _owners(router, 600)
    changed = [k for k in after if after[k] != final[k]]
    assert changed and all(after[k] == "10.0.0.2:8000" for k in changed)
