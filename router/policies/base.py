"""The small interface every routing policy implements, and what a policy is told about a request."""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from router.index import PrefixIndex
from router.replica import ReplicaState
from router.types import RouteRequest


@dataclass(slots=True)
class PickContext:
    """Everything a policy may look at for one decision. Prefix fields are empty when not computed.

    ``matched_blocks`` maps replica id -> leading blocks of this prompt that replica was recently sent.
    """

    request: RouteRequest
    candidates: Sequence[ReplicaState]
    route_key: int = 0
    prompt_tokens: int = 0
    block_size: int = 16
    hashed_tokens: int = 0  # tokens of the prompt a match can cover (min(prompt, max_prefix_tokens))
    matched_blocks: Mapping[str, int] = field(default_factory=dict)
    block_hashes: Sequence[int] = ()  # the prompt's chained block hashes (router blocks)
    index: PrefixIndex | None = None  # the pool's prefix index (read only), with the decision's time
    now: float = 0.0
    proven: Container[str] = ()  # replica ids whose learned capacity evidence has proven (router.capacity)
    weights: dict[str, float] = field(default_factory=dict)  # what a scoring policy applied (router.explain)
    added: dict[str, float] = field(default_factory=dict)  # replica id -> score a policy added beyond the
    # formula router.explain recomputes (prefix_affinity's hot-share term)
    evicted: dict[str, float] = field(default_factory=dict)  # replica id -> a policy's eviction term


class RoutingPolicy(Protocol):
    """Pick one replica among healthy candidates (never empty) and say why.

    ``needs_prefix`` tells the pool whether to render, tokenize and hash the prompt (and match the index)
    before calling ``pick``. A policy may keep its own state (a counter, a ring, a random generator); it
    does no I/O.
    """

    name: str
    needs_prefix: bool

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]: ...
