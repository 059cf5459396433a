"""LoRA adapters: a request naming an adapter goes only to replicas that serve it (their ``/v1/models``
lists it, or the gateway loaded it there). When none does and the policy lets the gateway load it
(``lora.dynamic_loading`` and a path), every candidate stays and the policy picks where to load it;
else no replica may take the request."""

from __future__ import annotations

from router.filters.base import FilterContext, Registered
from router.replica import ReplicaState
from router.types import NoReplicaAvailable


def serves_adapter(candidates: list[ReplicaState], ctx: FilterContext) -> list[ReplicaState]:
    adapter = ctx.request.adapter
    if adapter is None:
        return candidates
    out = [r for r in candidates if adapter in r.adapters]
    if out or ctx.request.load_adapter:
        return out or candidates
    raise NoReplicaAvailable(f"no healthy replica serves adapter {adapter!r}")


# Reads the healthy candidates (its error says no *healthy* replica serves the adapter).
SERVES_ADAPTER = Registered("serves_adapter", serves_adapter, ("healthy",))
