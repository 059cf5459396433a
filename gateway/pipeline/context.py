"""One request on its way through the pipeline, as three kinds of record (issue 27, item 1).

- **Inputs**, set once and then read: who and what (the process and state it is served with, the
  endpoint, ids, headers, a batch line's batch and placement; then the tenant, the parsed request and
  the front end's exchange, the pool and adapter). ``pipeline.handler`` is the stage that resolves
  every one of them (a front end's ``prepare`` returns its request instead of writing it), and
  ``tests/unit/test_request_record.py`` fails when another module assigns one. They are fields of
  the context rather than a frozen dataclass of their own because the handler resolves them one by
  one and a refusal on the way (401, 400, 404) is answered with what was resolved so far (the
  tenant, the endpoint's front end), not with nothing.
- **Attempts**: each try on a replica is its own ``Attempt`` (``dispatch.attempt_once`` makes it; it
  and ``relay`` write what came of it), in ``ctx.attempts``. ``ctx.decision``, the generation
  billing looks at and the upstream error are the last attempt's (derived: nothing copies them).
- **One outcome**: ``Outcome`` (how it ended, what the client saw, how it was served, its usage and
  answer), made only by ``respond.conclude`` at the end of the answer; the ledger row's source,
  metrics, the access log and the trace read it. How an answer is served (``Served``: x-cache,
  the bypass reason, age; the ledger source derives from it) is the cache stage's one decision,
  made before the answer starts: a stream's headers go out long before its end, so ``x-cache`` is
  derived from ``ctx.served``, which the outcome then carries unchanged.

The stages' own fields (the billing marker and pin, the reservation, the fairness ticket, the built
upstream request, the span, the ledger line, the encoder and first byte time) are each written by one
module, listed in ``WRITERS`` and enforced by the same test.

A request that came over HTTP has its ``request``; a line of an offline batch (``handler.call``) has
none, only ``headers`` (a plain mapping) and its ``batch_id`` and ``placement``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aiohttp import web

if TYPE_CHECKING:
    from cache.billing.pricing import LineItem
    from cache.buckets import Reservation
    from gateway.fleet.pools import Pool
    from gateway.pipeline.billing import Marked
    from gateway.pipeline.fairness import Ticket
    from gateway.pipeline.parse import ParsedRequest
    from gateway.pipeline.protocols.base import Encoder, FrontEnd
    from gateway.pipeline.services import Services
    from gateway.pipeline.tenant import Tenant
    from gateway.pipeline.upstream_request import UpstreamRequest
    from gateway.process.state import State
    from router.types import Decision, Placement


RESENT = "resent"
"""The message of a cancel after which the same request, under the same request id, will be sent again
(a batch line whose run stopped for a shutdown or a lost lease: the next holder re-runs it). Its
generation is billed by that run: the ledger keeps the first row of a request id, and the cut run's
estimate would stand for the whole answer."""

# x-cache → the ledger's source; anything else (miss, refresh, bypass, none) went to the fleet.
_SOURCES = {
    "hit": "response_cache",
    "semantic-hit": "semantic_cache",
    "coalesced": "coalesced",
    "fallback": "fallback",
}


@dataclass(frozen=True, slots=True)
class Served:
    """How the answer is served, decided by the cache stage before it starts (``pipeline.cache``)."""

    cache: str | None = None  # hit | semantic-hit | miss | bypass | coalesced | refresh | fallback (x-cache)
    bypass_reason: str | None = None  # why a bypass (x-cache-bypass-reason)
    age_s: float | None = None  # of a cached answer

    @property
    def source(self) -> str:
        """upstream | response_cache | semantic_cache | coalesced | fallback: derived, never set apart."""
        return _SOURCES.get(self.cache or "", "upstream")


NOT_CACHED = Served()
"""A pool without a response cache (or an endpoint it does not cache): no x-cache header."""

Ended = Literal["answered", "error", "cancelled", "resent"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the request ended, made once by ``respond.conclude`` (again only when a client that had its
    answer's end goes away while it is written: the access log's 499). A request shed for load (429,
    503 from a limit, a budget or the fair queue) is an ``error`` whose status says so: nothing that
    reads the outcome tells a shed request from another refusal, so it has no kind of its own."""

    ended: Ended  # answered: a 200 answer's end; error: an error status or a stream that broke off;
    # cancelled: the client went away (a batch line: its run stopped); resent: cancelled to be sent again
    status: int  # what the client saw (499: it went away)
    served: Served
    usage: dict[str, Any] | None  # the replica's (or the served answer's) usage, when it sent one
    response: dict[str, Any] | None  # the complete answer (parsed or assembled), when known

    @property
    def source(self) -> str:
        return self.served.source


@dataclass(slots=True, eq=False)
class Attempt:
    """One try on one replica: made by ``dispatch.attempt_once``; it and ``relay`` write what came of it."""

    decision: Decision
    propagate: dict[str, str] = field(default_factory=dict)  # the trace context sent with it
    # Its request went to the replica and was neither refused (an error status) nor given up before its
    # first byte (a retry's, or the request's error): a generation the replica started, which is a ledger
    # row whatever ends the request (``pipeline.hooks.billing.row_source``).
    generation_started: bool = False
    error: str | None = None  # its failure's kind (connect, status_503, aborted, midstream_*)
    usage: dict[str, Any] | None = None  # a stream's usage chunk (kept when the client goes away)
    response: dict[str, Any] | None = None  # a stream's assembled answer, when it ended normally
    chunks: int = 0  # stream events relayed (a stream cut before its usage is billed for these)


@dataclass(slots=True, eq=False)
class RequestContext:
    # -- inputs: set by ``pipeline.handler`` (at construction, or as it resolves them), then read-only
    process: Services  # the process serving it, typed by what the stages read (pipeline.services)
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
    tenant: Tenant | None = None
    parsed: ParsedRequest | None = None  # what the stages read (a front end's request mapped onto chat)
    exchange: Any = None  # the front end's own data for this request (a response id, its history)
    pool: Pool | None = None
    adapter: str | None = None  # the LoRA adapter the client named (``parsed.model``), served by ``pool``
    # -- the stages' own (one writer each: ``WRITERS``)
    marked: Marked | None = None  # the explicit cache_control prefix, when the request has one
    pinned_replica: str | None = None  # holds that prefix's live explicit entry
    reservation: Reservation | None = None  # tokens reserved from the tenant's per-minute bucket
    fair: Ticket | None = None  # its priority class, weight and TTFT objective (``fairness.enabled``)
    served: Served = NOT_CACHED  # how the answer is served (x-cache), before it starts
    upstream: UpstreamRequest | None = None  # what a replica receives, and what its answer must undo
    trace: Any = None  # the open spans of this request, when tracing is on (gateway.pipeline.hooks.trace)
    line_item: LineItem | None = None  # the ledger row, once billed
    billed: bool = False
    first_byte_s: float | None = None  # when the answer's first byte was sent to the client
    encoder: Encoder | None = None  # the stream's, once it is open (the front end's events)
    # -- attempts, and the one outcome
    attempts: list[Attempt] = field(default_factory=list)
    outcome: Outcome | None = None

    @property
    def attempt(self) -> Attempt | None:
        """The last (current) attempt."""
        return self.attempts[-1] if self.attempts else None

    @property
    def decision(self) -> Decision | None:
        """The last attempt's routing decision."""
        return self.attempts[-1].decision if self.attempts else None

    @property
    def generation_started(self) -> bool:
        """Whether the last attempt started a generation the replica did not refuse (billing's rule)."""
        return bool(self.attempts) and self.attempts[-1].generation_started

    @property
    def upstream_error(self) -> str | None:
        """The latest failure of any attempt (an earlier attempt's when the last one succeeded)."""
        for a in reversed(self.attempts):  # a loop: ``next`` over a generator was 2 calls more
            if a.error is not None:
                return a.error
        return None

    @property
    def status(self) -> int:
        """What the client saw (0 before the outcome)."""
        return self.outcome.status if self.outcome is not None else 0

    @property
    def usage(self) -> dict[str, Any] | None:
        return self.outcome.usage if self.outcome is not None else None

    @property
    def replica_id(self) -> str:
        decision = self.attempts[-1].decision if self.attempts else None  # ``decision``, one call less
        return decision.replica.id if decision is not None else "-"

    @property
    def model(self) -> str:
        return self.pool.cfg.name if self.pool is not None else "-"  # ``pool.name``, one call less

    def answer_headers(self) -> dict[str, str]:
        """Headers every answer of this request carries, derived from what happened."""
        headers = {
            "x-request-id": self.client_request_id or self.request_id,
            "x-gateway-request-id": self.request_id,
        }
        served = self.served
        if served.cache is not None:
            headers["x-cache"] = served.cache
        if served.bypass_reason is not None:
            headers["x-cache-bypass-reason"] = served.bypass_reason
        if served.age_s is not None:
            headers["age"] = str(int(served.age_s))
        if self.fair is not None and self.fair.flow is not None:
            headers["x-gateway-priority"] = self.fair.spec.name  # the class it was served in (capped)
        return headers


INPUTS = (
    "process", "state", "endpoint", "request_id", "frontend", "headers", "request", "batch_id",
    "placement", "client_request_id", "started", "tenant", "parsed", "exchange", "pool", "adapter",
)  # fmt: skip
"""The fields set once by ``pipeline.handler``, read-only after."""

WRITERS: dict[str, str] = {
    **dict.fromkeys(INPUTS, "gateway/pipeline/handler.py"),
    "marked": "gateway/pipeline/billing.py",
    "pinned_replica": "gateway/pipeline/billing.py",
    "reservation": "gateway/pipeline/limits.py",
    "fair": "gateway/pipeline/fairness.py",
    "served": "gateway/pipeline/cache.py",
    "upstream": "gateway/pipeline/cache.py",
    "trace": "gateway/pipeline/hooks/trace.py",
    "line_item": "gateway/pipeline/hooks/billing.py",
    "billed": "gateway/pipeline/hooks/billing.py",
    "first_byte_s": "gateway/pipeline/respond.py",
    "encoder": "gateway/pipeline/respond.py",
    "attempts": "gateway/pipeline/dispatch.py",
    "outcome": "gateway/pipeline/respond.py",
}
"""The one module that writes each field of ``RequestContext`` (``tests/unit/test_request_record.py``)."""
