"""Routing policies, one per module, all behind ``router.policies.base.RoutingPolicy``; ``POLICIES``
registers them: a policy's name in the routing section to the factory that builds it from that section.
The names the policy file accepts (``config.routing.PolicyName``, whose validation error lists them) are
the table's (``tests/unit/test_policy_table.py``); config sits below router, so it names them itself."""

from __future__ import annotations

from collections.abc import Callable

from config.routing import RoutingConfig
from router.policies.base import PickContext, RoutingPolicy
from router.policies.chwbl import CHWBL
from router.policies.consistent_hash import ConsistentHash
from router.policies.least_load import LeastLoad
from router.policies.prefix_affinity import PrefixAffinity
from router.policies.round_robin import RoundRobin
from router.policies.session import Session

__all__ = ["POLICIES", "PickContext", "RoutingPolicy", "make_policy"]


def _prefix_affinity(cfg: RoutingConfig) -> RoutingPolicy:
    return PrefixAffinity(
        virtual_nodes=cfg.virtual_nodes,
        reuse_weight=cfg.reuse_weight,
        shared_reuse_weight=cfg.shared_reuse_weight,
        decode_cost_tokens=cfg.decode_cost_tokens,
        shared_window=cfg.shared_window,
        min_match_fraction=cfg.min_match_fraction,
        evict_weight=cfg.evict_weight,
        hot_share_factor=cfg.hot_share_factor,
        hot_penalty_tokens=cfg.hot_penalty_tokens,
    )


def _session(cfg: RoutingConfig) -> RoutingPolicy:
    return Session(
        cfg.session_header, virtual_nodes=cfg.virtual_nodes, load_factor=cfg.load_factor, seed=cfg.seed
    )


POLICIES: dict[str, Callable[[RoutingConfig], RoutingPolicy]] = {
    "round_robin": lambda cfg: RoundRobin(),
    "least_load": lambda cfg: LeastLoad(cfg.seed),
    "consistent_hash": lambda cfg: ConsistentHash(cfg.virtual_nodes),
    "chwbl": lambda cfg: CHWBL(cfg.virtual_nodes, cfg.load_factor, cfg.seed),
    "prefix_affinity": _prefix_affinity,
    "session": _session,
}


def make_policy(cfg: RoutingConfig) -> RoutingPolicy:
    """Build the policy named in the pool's routing section."""
    factory = POLICIES.get(cfg.policy)
    if factory is None:
        raise ValueError(f"routing policy {cfg.policy!r} is not available in this build")
    return factory(cfg)
