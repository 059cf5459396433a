"""What the batch service needs of the gateway it runs in: its model pools, its request path.

- ``PoolFleet`` is the service's ``Fleet`` over the process's current pools (read afresh on every call,
  so a reload or discovery is seen at the next plan): the healthy replicas of a pool's router, its
  routing config and tokenizer (the planner hashes prompts as the router does), and each replica's
  online queue as its metrics last reported it (``vllm:num_requests_waiting``, scraped by
  ``gateway.fleet.scrape``): the signal the runner's share shrinks with.
- ``request_path`` is the service's ``send``: each line through ``pipeline.handler.call`` as the tenant
  that created the batch, under the line's request id, with its slot as the router's placement (a soft
  pin within the batch's share, ``router.filters.planned``).

Both receive what they use of the process (its current pools and tenants, read afresh on every call;
the request path bound to it), not the ``Process``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson
from aiohttp import web

from config.routing import RoutingConfig
from gateway.batch.runner import BatchLine, Send, Slot
from gateway.errors import error_body
from gateway.fleet.pools import CurrentPools, Pool
from gateway.pipeline.tenant import TenantResolver, allows
from router.tokenizers import Tokenizer

CurrentTenants = Callable[[], TenantResolver]
# ``pipeline.handler.call`` bound to the process: (endpoint, body, *, tenant, request_id, batch_id, placement)
CallLine = Callable[..., Awaitable[web.Response]]


class PoolFleet:
    def __init__(self, pools: CurrentPools, tenants: CurrentTenants):
        self._pools = pools
        self._tenants = tenants

    def _pool(self, model: str) -> Pool:
        return self._pools()[model]

    def serves(self, model: str) -> bool:
        return model in self._pools()

    def allows(self, tenant: str, model: str) -> bool:
        return allows(self._tenants().tenant(tenant), model)

    def replicas(self, model: str) -> Sequence[str]:
        return [r.id for r in self._pool(model).router.replicas if r.healthy]

    def routing(self, model: str) -> RoutingConfig:
        return self._pool(model).router.cfg

    def tokenizer(self, model: str) -> Tokenizer:
        return self._pool(model).router.tokenizer

    def waiting(self, model: str, replica_id: str) -> float | None:
        """Online requests waiting on the replica (its last scraped report; None: unknown)."""
        pool = self._pools().get(model)
        replica = pool.router.replica(replica_id) if pool is not None else None
        return replica.reported_waiting if replica is not None else None


def request_path(call: CallLine, tenants: CurrentTenants) -> Send:
    async def send(line: BatchLine, slot: Slot) -> tuple[int, Any]:
        resp = await call(
            line.endpoint,
            line.body,
            tenant=tenants().tenant(line.tenant),
            request_id=line.request_id,
            batch_id=line.batch_id,
            placement=slot,
        )
        assert isinstance(resp.body, bytes)
        try:
            return resp.status, orjson.loads(resp.body)
        except orjson.JSONDecodeError:  # a replica's non-JSON answer, relayed as it came
            return resp.status, error_body(
                f"the replica answered {resp.status} with a body that is not JSON", "upstream_error"
            )

    return send
