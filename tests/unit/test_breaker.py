"""The breaker state machine, and FleetHealth combining it with active checks and drains."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from config.policy import BreakerConfig, RoutingConfig
from gateway.observability.metrics import GatewayMetrics
from gateway.upstream.breaker import Breaker
from gateway.upstream.health import FleetHealth
from router.exact_index import ExactIndex
from router.pool import PoolRouter
from router.replica import ReplicaState

CFG = BreakerConfig(transport_failures=3, status_failures=5, open_s=1.0, max_open_s=4.0, close_after=2)


def test_opens_after_consecutive_transport_failures_and_success_resets() -> None:
    b = Breaker(CFG)
    assert not b.failure("transport", 0.0)
    assert not b.failure("transport", 0.0)
    b.answered()
    b.completed()  # a whole answer resets the transport count
    assert not b.failure("transport", 0.0)
    assert not b.failure("transport", 0.0)
    assert b.failure("transport", 0.0)
    assert b.state == "open" and not b.allows_routing


def test_status_and_transport_failures_count_apart() -> None:
    b = Breaker(CFG)
    for _ in range(2):
        b.failure("transport", 0.0)
    for _ in range(4):
        b.failure("status", 0.0)
    assert b.state == "closed"  # 2 < 3 transport, 4 < 5 status, though 6 failures in a row
    assert b.failure("status", 0.0)
    assert b.state == "open"


def test_headers_then_dropped_streams_still_open_it() -> None:
    """A replica that answers headers and drops every stream: ``answered`` must not reset the
    transport count, or such a replica would never be ejected."""
    b = Breaker(CFG)
    for _ in range(3):
        b.answered()
        b.failure("transport", 0.0)
    assert b.state == "open"


def test_half_open_probe_and_exponential_capped_backoff() -> None:
    b = Breaker(CFG)
    for _ in range(3):
        b.failure("transport", 10.0)
    assert b.open_until == 11.0
    assert not b.poll(10.5) and b.state == "open"
    assert b.poll(11.0) and b.state == "half_open"
    assert b.allows_routing
    assert b.dispatch()  # the probe
    assert not b.allows_routing and not b.dispatch()  # one probe at a time
    assert b.failure("transport", 11.1)  # probe failed: open again, twice as long
    assert b.open_until == 11.1 + 2.0
    b.poll(13.1)
    b.dispatch()
    b.failure("status", 13.2)
    assert b.open_until == 13.2 + 4.0
    b.poll(17.2)
    b.dispatch()
    b.failure("status", 17.3)
    assert b.open_until == 17.3 + 4.0  # capped at max_open_s
    b.poll(21.3)
    assert b.dispatch()
    assert not b.answered()  # 1 of 2
    assert b.state == "half_open"
    assert b.dispatch()
    assert b.answered()
    assert b.state == "closed" and b.opened_times == 0


def _fleet(n: int = 2) -> tuple[FleetHealth, PoolRouter, list[ReplicaState]]:
    now = [0.0]
    replicas = [ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}") for i in range(n)]
    router = PoolRouter(replicas, RoutingConfig(policy="round_robin"))
    fleet = FleetHealth(CFG, GatewayMetrics(CollectorRegistry()), clock=lambda: now[0])
    fleet.attach([router])
    fleet._now = now  # type: ignore[attr-defined]
    return fleet, router, replicas


def test_active_check_and_breaker_do_not_override_each_other() -> None:
    fleet, _router, (r0, _) = _fleet()
    url = r0.url
    for _ in range(3):
        fleet.failed(url, "transport")
    assert not r0.healthy  # breaker open
    fleet.set_active(url, True)
    assert not r0.healthy  # a passing active check does not close the breaker
    fleet._now[0] = 2.0  # type: ignore[attr-defined]
    fleet.set_active(url, False)
    fleet.poll(url)  # breaker half-open, but the active check says down
    assert fleet.get(url).breaker.state == "half_open"  # type: ignore[union-attr]
    assert not r0.healthy
    fleet.set_active(url, True)
    assert r0.healthy  # both agree now


def test_drain_keeps_index_ejection_drops_it_and_readmission_readds() -> None:
    fleet, router, (r0, _r1) = _fleet()
    assert "r0" in router.index.replica_ids()
    fleet.set_drained("r0", True)
    assert not r0.healthy and "r0" in router.index.replica_ids()
    fleet.set_drained("r0", False)
    assert r0.healthy
    fleet.set_active(r0.url, False)
    assert not r0.healthy and "r0" not in router.index.replica_ids()
    assert [r.id for r in router.healthy()] == ["r1"]
    fleet.set_active(r0.url, True)
    assert r0.healthy and "r0" in router.index.replica_ids()


def test_set_replicas_does_not_resurrect_an_ejected_replica() -> None:
    """PoolRouter.set_replicas copies ``healthy`` from the new objects; attach() must re-apply."""
    fleet, router, (r0, r1) = _fleet()
    fleet.set_active(r0.url, False)
    router.set_replicas([ReplicaState(id="r0", url=r0.url), ReplicaState(id="r1", url=r1.url)])
    fleet.attach([router])
    assert not router.replica("r0").healthy  # type: ignore[union-attr]
    assert "r0" not in router.index.replica_ids()


def test_half_open_admits_one_probe_then_closes() -> None:
    fleet, _router, (r0, _) = _fleet()
    for _ in range(3):
        fleet.failed(r0.url, "transport")
    fleet._now[0] = 1.0  # type: ignore[attr-defined]
    fleet.poll(r0.url)
    assert r0.healthy
    assert fleet.before_send(r0.url)
    assert not r0.healthy  # the probe is out: no one else is routed there
    assert not fleet.before_send(r0.url)
    fleet.answered(r0.url)
    assert r0.healthy
    assert fleet.before_send(r0.url)
    fleet.answered(r0.url)
    assert fleet.get(r0.url).breaker.state == "closed"  # type: ignore[union-attr]


def test_ejection_purges_the_precise_index_as_it_drops_the_approximate_one() -> None:
    """Issue 19, item 9: a replica ejected (it died, its KV cache with it) must not keep its exact
    blocks: after a restart the router would send a request there for blocks it no longer has."""
    fleet, router, (r0, r1) = _fleet()
    exact = ExactIndex()
    router.attach_exact(exact)
    exact.stored("r0", [11, 12, 13])
    exact.stored("r1", [11])
    assert exact.is_live("r0") and exact.match("r0", [11, 12, 13], 0.0) == 3
    fleet.set_active(r0.url, False)  # ejected by the active checks
    assert not exact.is_live("r0") and exact.match("r0", [11, 12, 13], 0.0) == 0
    assert exact.match("r1", [11], 0.0) == 1  # the others keep theirs
    fleet.set_active(r0.url, True)
    exact.stored("r0", [21])  # its events after the restart make it live again
    assert exact.is_live("r0") and exact.match("r0", [11], 0.0) == 0
    for _ in range(3):
        fleet.failed(r1.url, "transport")  # the breaker opens: ejected too
    assert not exact.is_live("r1")
