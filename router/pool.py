"""One model pool's router: its replicas, its policy, and the load it has handed out.

The gateway calls ``route`` once per attempt and then ``release_prefill`` at the first byte and
``release`` at the end (success, error or cancel). Both releases are idempotent so that every exit path
of the gateway can call them without double counting.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from config.routing import RoutingConfig
from router.policies.base import RoutingPolicy
from router.replica import ReplicaState
from router.types import Decision, NoReplicaAvailable, RouteRequest


def make_policy(cfg: RoutingConfig) -> RoutingPolicy:
    """Build the policy named in the pool's routing section."""
    if cfg.policy == "round_robin":
        from router.policies.round_robin import RoundRobin

        return RoundRobin()
    if cfg.policy == "least_load":
        from router.policies.least_load import LeastLoad

        return LeastLoad(cfg.seed)
    raise ValueError(f"routing policy {cfg.policy!r} is not available in this build")


class PoolRouter:
    def __init__(self, replicas: Sequence[ReplicaState], cfg: RoutingConfig, policy: RoutingPolicy | None = None):
        self.cfg = cfg
        self.replicas: list[ReplicaState] = list(replicas)
        self.policy: RoutingPolicy = policy or make_policy(cfg)

    def healthy(self, exclude: Container[str] = ()) -> list[ReplicaState]:
        return [r for r in self.replicas if r.healthy and r.id not in exclude]

    def route(self, request: RouteRequest, exclude: Container[str] = ()) -> Decision:
        """Pick a replica and count the request against it at once."""
        candidates = self.healthy(exclude)
        if not candidates:
            raise NoReplicaAvailable(f"no healthy replica for model {request.model!r}")
        replica, reason = self.policy.pick(request, candidates)
        decision = Decision(replica=replica, reason=reason, policy=self.policy.name)
        replica.in_flight += 1
        replica.queued_prefill_tokens += decision.uncached_tokens
        return decision

    def release_prefill(self, decision: Decision) -> None:
        """The replica answered its first byte: its prefill for this request is done."""
        if not decision._prefill_released:
            decision._prefill_released = True
            decision.replica.queued_prefill_tokens -= decision.uncached_tokens

    def release(self, decision: Decision) -> None:
        """The request finished (any way): it no longer loads the replica."""
        self.release_prefill(decision)
        if not decision._released:
            decision._released = True
            decision.replica.in_flight -= 1
