"""One request on its way through the pipeline: what the stages read and write.

The stages fill it in order (``gateway.pipeline.handler`` lists them); the lifecycle hooks
(``gateway.pipeline.lifecycle``) read it. What can be derived is not stored: the replica, the route
reason and the prefix match come from the current ``decision``; the ``x-cache`` and ``age`` headers
from ``cache`` and ``age_s``.

A request that came over HTTP has its ``request``; a line of an offline batch (``handler.call``) has
none, only ``headers`` (a plain mapping) and its ``batch_id`` and ``placement``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

if TYPE_CHECKING:
    from cache.billing.pricing import LineItem
    from cache.buckets import Reservation
    from gateway.fleet.pools import Pool
    from gateway.pipeline.billing import Marked
    from gateway.pipeline.fairness import Ticket
    from gateway.pipeline.parse import ParsedRequest
    from gateway.pipeline.protocols.base import Encoder, FrontEnd
    from gateway.pipeline.tenant import Tenant
    from gateway.process.process import Process
    from gateway.process.state import State
    from router.types import Decision, Placement


RESENT = "resent"
"""The message of a cancel after which the same request, under the same request id, will be sent again
(a batch line whose run stopped for a shutdown or a lost lease: the next holder re-runs it). Its
generation is billed by that run: the ledger keeps the first row of a request id, and the cut run's
estimate would stand for the whole answer."""


@dataclass(slots=True, eq=False)
class RequestContext:
    process: Process
    state: State
    endpoint: str
    request_id: str  # the gateway's own id of this generation: the ledger row's key, sent upstream
    frontend: FrontEnd  # the API the client speaks (gateway.pipeline.protocols): its request and answer maps
    headers: Mapping[str, str]  # the request's (case-insensitive over HTTP)
    request: web.Request | None = None  # None for a batch line
    batch_id: str | None = None  # the offline batch a line belongs to (billed as ``batch``)
    placement: Placement | None = None  # a batch line's planned replica and share (router.filters.planned)
    client_request_id: str | None = None  # the client's x-request-id, kept in the row and echoed
    started: float = field(default_factory=time.perf_counter)
    # -- who and what (parse, tenant)
    tenant: Tenant | None = None
    parsed: ParsedRequest | None = None  # what the stages read (a front end's request mapped onto chat)
    exchange: Any = None  # the front end's own data for this request (a response id, its history)
    pool: Pool | None = None
    adapter: str | None = None  # the LoRA adapter the client named (``parsed.model``), served by ``pool``
    payload: dict[str, Any] | None = None  # what a replica receives: markers stripped, PII masked
    # -- billing and limits
    marked: Marked | None = None  # the explicit cache_control prefix, when the request has one
    pinned_replica: str | None = None  # holds that prefix's live explicit entry
    reservation: Reservation | None = None  # tokens reserved from the tenant's per-minute bucket
    fair: Ticket | None = None  # its priority class, weight and TTFT objective (``fairness.enabled``)
    line_item: LineItem | None = None  # the ledger row, once billed
    billed: bool = False
    # -- where it went (dispatch)
    trace: Any = None  # the open spans of this request, when tracing is on (gateway.pipeline.hooks.trace)
    decision: Decision | None = None  # the current (last) attempt's
    attempts: int = 0
    # The current attempt's request went to its replica and was neither refused (an error status) nor
    # given up before its first byte (a retry's, or the request's error): a generation the replica
    # started, which is a ledger row whatever ends the request (``pipeline.hooks.billing.row_source``).
    generation_started: bool = False
    resent: bool = False  # cancelled with ``RESENT``: billed by the run that sends it again
    upstream_error: str | None = None
    # -- the answer (relay, cache, respond)
    cache: str | None = None  # hit | miss | bypass | coalesced | refresh | fallback (x-cache)
    bypass_reason: str | None = None  # why a bypass (x-cache-bypass-reason): the request says why
    age_s: float | None = None  # of a cached answer
    source: str = "upstream"  # upstream | response_cache | coalesced | fallback
    status: int = 0  # what the client saw (499: it went away), for the access log and metrics
    first_byte_s: float | None = None  # when the answer's first byte was sent to the client
    encoder: Encoder | None = None  # the stream's, once it is open (the front end's events)
    usage: dict[str, Any] | None = None
    response: dict[str, Any] | None = None  # the complete answer (parsed or assembled), when known
    generated_chunks: int = 0  # stream events relayed (a stream cut before its usage is billed for these)

    @property
    def replica_id(self) -> str:
        return self.decision.replica.id if self.decision is not None else "-"

    @property
    def model(self) -> str:
        return self.pool.name if self.pool is not None else "-"

    def answer_headers(self) -> dict[str, str]:
        """Headers every answer of this request carries, derived from what happened."""
        headers = {
            "x-request-id": self.client_request_id or self.request_id,
            "x-gateway-request-id": self.request_id,
        }
        if self.cache is not None:
            headers["x-cache"] = self.cache
        if self.bypass_reason is not None:
            headers["x-cache-bypass-reason"] = self.bypass_reason
        if self.age_s is not None:
            headers["age"] = str(int(self.age_s))
        if self.fair is not None and self.fair.flow is not None:
            headers["x-gateway-priority"] = self.fair.spec.name  # the class it was served in (capped)
        return headers
