"""One request on its way through the gateway: who asked what, where it goes, and what happened."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.fleet.pools import Pool
from gateway.pipeline.parse import ParsedRequest
from gateway.pipeline.tenant import Tenant
from gateway.process.state import GatewayState


@dataclass(slots=True)
class Outcome:
    """What happened, for the access log and metrics (filled as the request goes)."""

    request_id: str
    started: float = field(default_factory=time.perf_counter)
    replica: str = "-"
    status: int = 0
    first_byte_s: float | None = None
    attempts: int = 0
    route_reason: str | None = None
    matched_tokens: int = 0
    prompt_tokens: int = 0
    upstream_error: str | None = None
    usage: dict[str, Any] | None = None
    response: dict[str, Any] | None = None  # the complete answer (parsed or assembled), when known
    cache: str | None = None  # x-cache value
    source: str = "upstream"  # upstream | response_cache | coalesced | fallback (billing, logs)
    generated_chunks: int = 0  # stream events relayed (an aborted stream is billed for these)
    settle: Callable[[], Awaitable[Any]] | None = None  # billing: called once before a stream's [DONE]
    pinned_replica: str | None = None  # routing hint: holds this request's live explicit cache entry
    extra_headers: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class Call:
    """Everything the request path passes along, in one value instead of six arguments."""

    request: web.Request
    state: GatewayState
    pool: Pool
    parsed: ParsedRequest
    tenant: Tenant
    outcome: Outcome
