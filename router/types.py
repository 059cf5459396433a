"""Values that cross the router's boundary."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from router.explain import Explanation
from router.replica import ReplicaState


class Placement(Protocol):
    """Where an offline batch line runs: ``replica``, the one it holds a slot of its batch's share on
    (its plan's choice until the router places it elsewhere); ``has_room``, whether another replica's
    share has a slot free for it; ``move``, the router placed it on ``replica_id`` (the slot follows).
    ``gateway.batch.runner.Slot`` implements it; ``router.filters.planned`` reads it."""

    replica: str | None

    def has_room(self, replica_id: str) -> bool: ...

    def move(self, replica_id: str) -> None: ...


@dataclass(frozen=True, slots=True)
class OnlineReserve:
    """The replicas a running batch leaves to online traffic (``batch.online_replicas``) and how many
    requests each runs well at once (``batch.replica_slots``): online requests prefer them up to that."""

    replicas: frozenset[str]
    slots: int


@dataclass(slots=True)
class RouteRequest:
    """A parsed request as the router sees it. ``body`` is the client's JSON, never mutated here."""

    endpoint: str  # "chat" | "completions" | "embeddings" | a pass-through endpoint
    model: str  # the name the client sent: a model, or a LoRA adapter (its blocks hash apart)
    body: Mapping[str, Any]
    tenant_salt: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    pinned_replica: str | None = None  # holds the request's live explicit cache entry (billing)
    placement: Placement | None = None  # an offline batch line's planned replica and share
    adapter: str | None = None  # the LoRA adapter the request names: only replicas serving it may take it
    load_adapter: bool = False  # when none serves it, any replica may (the gateway loads it there first)
    online_reserve: OnlineReserve | None = None  # kept for online traffic by a running batch: preferred


@dataclass(slots=True, eq=False)
class Decision:
    """The replica picked for one request, why, and what the router must release later.

    ``matched_tokens`` is the prefix the router believes the replica holds (from its index);
    ``uncached_tokens = prompt_tokens - matched_tokens`` is what it counted as queued prefill. All three
    are 0 for policies that do not look at the prompt (round_robin, least_load).
    """

    replica: ReplicaState
    reason: str
    policy: str
    prompt_tokens: int = 0
    matched_tokens: int = 0
    uncached_tokens: int = 0
    block_hashes: tuple[int, ...] = ()
    route_key: int = 0
    block_size: int = 16
    engine_block_hashes: tuple[int, ...] = ()  # precise mode: the engine's own hashes of the prompt
    approx_matched_blocks: int | None = None  # precise mode: the approximate index's match (else matched)
    available_tokens: int = 0  # the longest match any replica had (what the fleet held for the prompt)
    routed_at: float = 0.0  # the router's clock at the decision
    queued_at_route: int = 0  # the replica's queued prefill after this decision (its own and what is ahead)
    explanation: Explanation | None = None  # the score terms (``PoolRouter.explain``), else None
    ghost_depths: tuple[int, ...] = ()  # past the match: how far each block was in the index's ghost list
    matched_sent_at: float | None = None  # when the index had last sent the match's deepest block there
    # the capacity learner's depth estimator: (matched blocks, depth of the match's first and deepest
    # block in the index's order, entries the index listed for the replica), at the decision
    listed_depths: tuple[int, ...] = ()
    _prefill_released: bool = False
    _released: bool = False


class NoReplicaAvailable(Exception):
    """No healthy replica may take the request."""


class ReplicasBusy(NoReplicaAvailable):
    """Healthy replicas exist, but every one is at its concurrency cap: wait for a slot."""
