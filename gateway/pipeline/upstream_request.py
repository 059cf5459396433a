"""What a replica receives for one request, built in one place from the request's inputs, with what
its answer must undo (issue 27, item 1: the body was rewritten in four modules before).

``build`` starts from the client's parsed body and, in this order:

1. strips the ``cache_control`` markers when the pool's replicas do not take them (the billing stage
   found and counted them: ``marked``);
2. masks PII with typed placeholders when the cache's ``mask`` mode asks (``mask=True``): the cache
   key and the replica see the placeholders, the answer gets this request's own values back
   (``mapping``);

which is ``payload``, the request as the cache key and the gateway's own token estimate read it; then
the bytes sent (``body``): a stream asks for the usage chunk (billing needs it; ``strip_usage``: the
client did not ask, so the relay drops it again), LiteLLM's ``cache`` object is the gateway's and is
dropped, the pool's served model name replaces the client's (an adapter keeps its own: vLLM picks the
LoRA by it), the tenant's ``cache_salt`` is set where the replicas take one, and the request's fair
band (``rank`` of ``bands``: its class, or the batch band) becomes the engine's ``priority`` where the
pool's ``engine_priority`` asks (``router.fairness.classes.engine_priority``: the value and its sign
for vLLM or SGLang; a client's own ``priority`` is replaced, so the class its tenant may have is the
only one the engine sees; ``none``: the body's field, if any, passes as it is). The payload (the cache
key's view) never carries it. The client's fields
stay in the client's order, so the replica's own prefix cache sees the same prompt.

The body is serialised once, when the request is built, not per attempt. The builder takes the inputs
it reads, not the request's context: it is a pure function of them (and stays out of the request
record's type-only import cycle, ``tests/unit/test_capabilities.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from cache.billing.markers import strip_markers
from cache.pii import PiiMapping, mask_request
from router.fairness.classes import engine_priority

if TYPE_CHECKING:
    from gateway.fleet.pools import Pool
    from gateway.pipeline.parse import ParsedRequest
    from gateway.pipeline.tenant import Tenant


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    payload: dict[str, Any]  # the client's body as the replica sees it: markers stripped, PII masked
    body: bytes  # what is sent: the payload, the usage chunk asked for, model name, cache salt
    mapping: PiiMapping | None  # undo: the masked values, put back into the answer
    strip_usage: bool  # undo: the usage chunk was asked for billing, not by the client


def wants_usage(body: dict[str, Any]) -> bool:
    opts = body.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True


def build(
    parsed: ParsedRequest,
    pool: Pool,
    tenant: Tenant,
    adapter: str | None,
    *,
    marked: bool,
    mask: bool = False,
    rank: int | None = None,
    bands: int = 0,
) -> UpstreamRequest:
    """The request a replica of ``pool`` receives (see the module); ``marked``: the body has markers;
    ``rank`` of ``bands``: the request's fair band (None: fairness is off)."""
    payload = parsed.body
    if marked and not pool.cfg.accepts_cache_control:
        payload = strip_markers(payload)
    mapping: PiiMapping | None = None
    if mask:
        payload, mapping = mask_request(payload)
    body = dict(payload)
    asks_usage = wants_usage(body)
    if body.get("stream") and not asks_usage:
        opts = body.get("stream_options")
        body["stream_options"] = {**(opts if isinstance(opts, dict) else {}), "include_usage": True}
    body.pop("cache", None)  # LiteLLM's cache-control object is for the gateway, not the replica
    if pool.cfg.served_model_name and adapter is None:
        body["model"] = pool.cfg.served_model_name
    if pool.sends_cache_salt:
        body["cache_salt"] = tenant.salt
    else:
        body.pop("cache_salt", None)
    if rank is not None:
        priority = engine_priority(pool.cfg.engine_priority, rank, bands)
        if priority is not None:
            body["priority"] = priority
    # ``asks_usage`` is the client's: stripping markers and masking leave ``stream_options`` as sent
    return UpstreamRequest(payload, orjson.dumps(body), mapping or None, not asks_usage)
