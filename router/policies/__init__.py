"""Routing policies, one per module, all behind ``router.policies.base.RoutingPolicy``."""

from __future__ import annotations

from config.routing import RoutingConfig
from router.policies.base import PickContext, RoutingPolicy

__all__ = ["PickContext", "RoutingPolicy", "make_policy"]


def make_policy(cfg: RoutingConfig) -> RoutingPolicy:
    """Build the policy named in the pool's routing section."""
    if cfg.policy == "round_robin":
        from router.policies.round_robin import RoundRobin

        return RoundRobin()
    if cfg.policy == "least_load":
        from router.policies.least_load import LeastLoad

        return LeastLoad(cfg.seed)
    if cfg.policy == "consistent_hash":
        from router.policies.consistent_hash import ConsistentHash

        return ConsistentHash(cfg.virtual_nodes)
    if cfg.policy == "chwbl":
        from router.policies.chwbl import CHWBL

        return CHWBL(cfg.virtual_nodes, cfg.load_factor, cfg.seed)
    if cfg.policy == "prefix_affinity":
        from router.policies.prefix_affinity import PrefixAffinity

        return PrefixAffinity(
            virtual_nodes=cfg.virtual_nodes,
            reuse_weight=cfg.reuse_weight,
            shared_reuse_weight=cfg.shared_reuse_weight,
            decode_cost_tokens=cfg.decode_cost_tokens,
            shared_window=cfg.shared_window,
            min_match_fraction=cfg.min_match_fraction,
            evict_weight=cfg.evict_weight,
        )
    if cfg.policy == "session":
        from router.policies.session import Session

        return Session(
            cfg.session_header, virtual_nodes=cfg.virtual_nodes, load_factor=cfg.load_factor, seed=cfg.seed
        )
    raise ValueError(f"routing policy {cfg.policy!r} is not available in this build")
