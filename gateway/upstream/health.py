"""One verdict per replica from three independent inputs, written to ``ReplicaState.healthy``.

The router reads a single flag, ``ReplicaState.healthy``. Three things may take a replica out of the
routing set, and none may override another, so this module is the only writer of that flag:

    healthy = active_ok and breaker.allows_routing and not drained

- ``active_ok``: the active checker's verdict (``gateway.fleet.probes.health_loop``);
- the circuit breaker (``gateway.upstream.breaker``), fed by real requests through ``ObservedUpstream``;
- ``drained``: an operator's ``POST /admin/replicas/{id}/drain``.

An *ejected* replica (active check failing, or breaker open) also loses its prefix-index entries, the
approximate and the precise (KV-event) ones: its KV cache is gone or unknown, so predicting hits there
would be wrong; they are re-registered (empty) when it comes back, the precise ones live again at its
next event batch. A drained replica keeps them: it is alive, only taking no new work.

Records are keyed by the replica's base URL (one physical server may serve several pools), and
labelled in metrics by replica id. An attempt finds its record from the routing decision's replica
(``ObservedUpstream`` takes the ``ReplicaState``, whose URL is the key), never from the request URL: a
lookup by parsing the path before ``/v1/`` missed every endpoint without that prefix (``/tokenize``,
``/detokenize``, ``/pooling``, ``/classify``), whose attempts then neither fed nor obeyed the breaker
[``test_the_breaker_counts_and_stops_every_endpoint``]. The ``FleetHealth`` object outlives reloads: the new state's pools
are attached to the same records, so a reload does not reset breakers or drains.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from config.policy import BreakerConfig
from gateway.observability.metrics import GatewayMetrics
from gateway.upstream.breaker import STATE_VALUE, Breaker, FailureKind
from gateway.upstream.client import Response, Upstream, UpstreamFailure
from router.pool import PoolRouter
from router.replica import ReplicaState

log = logging.getLogger("prefix_gateway")


@dataclass(slots=True)
class ReplicaHealth:
    url: str
    replica_id: str
    breaker: Breaker
    active_ok: bool = True
    drained: bool = False
    members: list[tuple[PoolRouter, ReplicaState]] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None
    # An active check passed since the breaker last opened: a half-open breaker then stands for a
    # replica that is back, not one that died a second ago (readiness counts only the former).
    checked_since_open: bool = True

    @property
    def ejected(self) -> bool:
        return not self.active_ok or self.breaker.state == "open"

    @property
    def routable(self) -> bool:
        return self.active_ok and not self.drained and self.breaker.allows_routing


class FleetHealth:
    def __init__(
        self, cfg: BreakerConfig, metrics: GatewayMetrics, clock: Callable[[], float] = time.monotonic
    ):
        self.cfg = cfg
        self.metrics = metrics
        self.clock = clock
        self._by_url: dict[str, ReplicaHealth] = {}

    # -- membership -----------------------------------------------------------------------------------
    def attach(self, routers: Iterable[PoolRouter]) -> None:
        """Bind records to the replicas of these routers (at start, after a reload or a discovery
        change). Known URLs keep their breaker, active verdict and drain; URLs gone are forgotten."""
        members: dict[str, list[tuple[PoolRouter, ReplicaState]]] = {}
        ids: dict[str, str] = {}
        for router in routers:
            for replica in router.replicas:
                members.setdefault(replica.url, []).append((router, replica))
                ids.setdefault(replica.url, replica.id)
        for url in set(self._by_url) - set(members):
            gone = self._by_url.pop(url)
            if gone.timer is not None:
                gone.timer.cancel()
            self._forget_labels(gone.replica_id)
        for url, group in members.items():
            rec = self._by_url.get(url)
            if rec is None:
                rec = self._by_url[url] = ReplicaHealth(url, ids[url], Breaker(self.cfg))
                self.metrics.child(self.metrics.breaker_state, rec.replica_id).set(0)
            rec.members = group
            rec.breaker.cfg = self.cfg
            self.apply(rec)

    def reconfigure(self, cfg: BreakerConfig) -> None:
        """A reloaded policy's breaker settings (applied from the next transition on)."""
        self.cfg = cfg
        for rec in self._by_url.values():
            rec.breaker.cfg = cfg

    def _forget_labels(self, replica_id: str) -> None:
        """A replica gone for good (discovery, reload) leaves no stale series behind."""
        for gauge in (self.metrics.breaker_state, self.metrics.replica_healthy):
            self.metrics.forget(gauge, replica_id)

    def serving(self, replica: ReplicaState, *, active_checks: bool = True) -> bool:
        """Whether ``replica`` can serve now, for readiness: routable, and its breaker closed, or
        half-open with an active check passed since it opened (without active checks a half-open
        breaker counts: nothing else would ever make a pool ready again)."""
        rec = self._by_url.get(replica.url)
        if rec is None or not self.cfg.enabled:
            return replica.healthy
        state = rec.breaker.state
        if state == "open" or not rec.active_ok or rec.drained:
            return False
        return state == "closed" or rec.checked_since_open or not active_checks

    def records(self) -> list[ReplicaHealth]:
        return list(self._by_url.values())

    def get(self, url: str) -> ReplicaHealth | None:
        return self._by_url.get(url)

    def by_id(self, replica_id: str) -> list[ReplicaHealth]:
        return [r for r in self._by_url.values() if r.replica_id == replica_id or r.url == replica_id]

    # -- the one place that writes ReplicaState.healthy -----------------------------------------------
    def apply(self, rec: ReplicaHealth) -> None:
        routable = rec.routable if self.cfg.enabled else (rec.active_ok and not rec.drained)
        ejected = rec.ejected if self.cfg.enabled else not rec.active_ok
        for router, replica in rec.members:
            known = replica.id in router.index.replica_ids()
            if ejected and known:
                router.index.drop_replica(replica.id)
                if router.exact is not None:  # precise mode: its KV-event view is gone with its cache
                    router.exact.purge(replica.id)
            elif not ejected and not known:
                bound = router.capacity_bound(replica.id)
                router.index.add_replica(
                    replica.id, bound or replica.kv_capacity_blocks or router.cfg.default_kv_capacity_blocks
                )
            replica.healthy = routable
        self.metrics.child(self.metrics.replica_healthy, rec.replica_id).set(1 if routable else 0)

    # -- inputs ---------------------------------------------------------------------------------------
    def set_active(self, url: str, ok: bool) -> None:
        rec = self._by_url.get(url)
        if rec is None:
            return
        if ok:
            rec.checked_since_open = True
        if rec.active_ok == ok:
            return
        rec.active_ok = ok
        log.log(
            logging.INFO if ok else logging.WARNING,
            "replica healthy again" if ok else "replica ejected",
            extra={"event": "replica_up" if ok else "replica_down", "replica": rec.replica_id},
        )
        self.apply(rec)

    def set_drained(self, replica_id: str, drained: bool) -> list[ReplicaHealth]:
        recs = self.by_id(replica_id)
        for rec in recs:
            rec.drained = drained
            self.apply(rec)
        return recs

    def before_send(self, url: str) -> bool:
        """False: refuse this attempt (breaker open, or a half-open probe already in flight)."""
        rec = self._by_url.get(url)
        if rec is None or not self.cfg.enabled:
            return True
        if rec.breaker.state == "closed":  # admits and changes nothing: ``dispatch`` and 2 properties less
            return True
        was = rec.breaker.allows_routing
        ok = rec.breaker.dispatch()
        if was != rec.breaker.allows_routing:
            self.apply(rec)  # the probe is out: no more requests until it answers
        return ok

    def answered(self, url: str) -> None:
        rec = self._by_url.get(url)
        if rec is None or not self.cfg.enabled:
            return
        if rec.breaker.state == "closed":  # ``answered`` of a closed breaker: only its 5xx count resets
            rec.breaker.status_failures = 0
            return
        was = rec.breaker.allows_routing
        if rec.breaker.answered():
            self._transition(rec, "closed")
        if was != rec.breaker.allows_routing:
            self.apply(rec)

    def abandoned(self, url: str) -> None:
        rec = self._by_url.get(url)
        if rec is not None and rec.breaker.probe_in_flight:
            rec.breaker.probe_in_flight = False
            self.apply(rec)

    def completed(self, url: str) -> None:
        rec = self._by_url.get(url)
        if rec is not None:
            rec.breaker.completed()

    def failed(self, url: str, kind: FailureKind) -> None:
        rec = self._by_url.get(url)
        if rec is None or not self.cfg.enabled:
            return
        if rec.breaker.failure(kind, self.clock()):
            rec.checked_since_open = False
            self._transition(rec, "open")
            self.apply(rec)
            self._schedule(rec)

    # -- timers ---------------------------------------------------------------------------------------
    def _schedule(self, rec: ReplicaHealth) -> None:
        if rec.timer is not None:
            rec.timer.cancel()
        delay = max(0.0, rec.breaker.open_until - self.clock())
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (pure tests): the caller polls
            rec.timer = None
            return
        rec.timer = loop.call_later(delay, self.poll, rec.url)

    def poll(self, url: str) -> None:
        """Open → half-open once the open period passed (called by the timer)."""
        rec = self._by_url.get(url)
        if rec is None:
            return
        rec.timer = None
        if rec.breaker.poll(self.clock()):
            self._transition(rec, "half_open")
            self.apply(rec)
        elif rec.breaker.state == "open":
            self._schedule(rec)

    def _transition(self, rec: ReplicaHealth, to: str) -> None:
        self.metrics.child(self.metrics.breaker_state, rec.replica_id).set(STATE_VALUE[to])
        self.metrics.child(self.metrics.breaker_transitions, rec.replica_id, to).inc()
        log.log(
            logging.WARNING if to == "open" else logging.INFO,
            f"circuit breaker {to}",
            extra={"event": f"breaker_{to}", "replica": rec.replica_id},
        )

    def close(self) -> None:
        for rec in self._by_url.values():
            if rec.timer is not None:
                rec.timer.cancel()
                rec.timer = None

    def snapshot(self, rec: ReplicaHealth) -> dict[str, Any]:
        b = rec.breaker
        return {
            "active_ok": rec.active_ok,
            "drained": rec.drained,
            "breaker": b.state,
            "breaker_open_for_s": round(max(0.0, b.open_until - self.clock()), 3) if b.state == "open" else 0,
            "consecutive_transport_failures": b.transport_failures,
            "consecutive_status_failures": b.status_failures,
        }


@dataclass(slots=True)
class ObservedUpstream(Upstream):
    """The upstream client, reporting each attempt's outcome to the replica's breaker.

    Sits where failures are seen, so the proxy's attempt loop needs no breaker code: a refused
    attempt raises ``UpstreamFailure("breaker_open")`` before any byte is sent, which the loop retries
    on another replica like any failure before the first byte. Every method takes the decision's
    replica: its record is found by that, whatever the endpoint's path.
    """

    fleet: FleetHealth | None = None

    async def send(self, replica: ReplicaState, path: str, body: bytes, headers: dict[str, str]) -> Response:
        """POST ``path`` to ``replica`` (``Upstream.open``), behind its breaker."""
        url = replica.url + path
        fleet, key = self.fleet, replica.url
        if fleet is None:
            return await Upstream.open(self, url, body, headers)
        if not fleet.before_send(key):
            raise UpstreamFailure("breaker_open", "the replica's circuit breaker is open")
        try:
            resp = await Upstream.open(self, url, body, headers)
        except UpstreamFailure:
            fleet.failed(key, "transport")
            raise
        except BaseException:
            fleet.abandoned(key)  # cancelled (client went away): no verdict, but free a probe slot
            raise
        if resp.status >= 500:
            fleet.failed(key, "status")
        else:
            fleet.answered(key)
        return resp

    async def read_answer(self, replica: ReplicaState, resp: Response) -> tuple[bytes, dict[str, Any] | None]:
        """The whole body, and the answer parsed (the one parse of a whole answer) when it is a 200
        JSON object. A 200 JSON answer that does not parse is a failure of the replica (retried
        elsewhere by the attempt loop, since nothing reached the client yet)."""
        key = replica.url
        try:
            data = await self.read_all(resp)
        except UpstreamFailure:
            if self.fleet is not None:
                self.fleet.failed(key, "transport")
            raise
        parsed: dict[str, Any] | None = None
        declared = resp.content_type == "application/json"
        if resp.status == 200 and (declared or data[:1] == b"{"):
            try:
                value = orjson.loads(data)
            except orjson.JSONDecodeError:
                if declared:
                    if self.fleet is not None:
                        self.fleet.failed(key, "transport")
                    raise UpstreamFailure("protocol", "the replica answered invalid JSON") from None
                value = None
            parsed = value if isinstance(value, dict) else None
        if self.fleet is not None and resp.status < 500:
            self.fleet.completed(key)
        return data, parsed

    async def stream(self, replica: ReplicaState, resp: Response) -> AsyncIterator[bytes]:
        """``Upstream.iter_chunks``, a broken or silent stream counted against ``replica``."""
        try:
            async for chunk in Upstream.iter_chunks(self, resp):
                yield chunk
        except UpstreamFailure:
            if self.fleet is not None:
                self.fleet.failed(replica.url, "transport")
            raise
        if self.fleet is not None:
            self.fleet.completed(replica.url)
