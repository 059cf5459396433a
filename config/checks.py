"""What a valid policy may still get wrong: warnings an operator should read before serving it.

Pure: the policy (and, for the secret, the environment mapping given), never the files it names (checked
by ``gateway.process.preflight``).

The server secret: tenant salts, and through them every block hash, response-cache key and the
``cache_salt`` sent to vLLM, derive from it. Processes with different secrets hash one prompt
differently, so what they share (the Redis index stream, the Redis response cache) never matches: on
the Mooncake conversation trace two ``--workers`` without one secret reached 0.179 hit against one
process's 0.263 (0.68x; 0.263 against 0.266 with it). ``--workers N`` draws one for its workers; pods
sharing Redis cannot, so ``serve`` refuses them and ``check-config`` warns.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from config.policy import Policy


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere, or "" / "0.0.0.0"-like wildcards


def policy_warnings(policy: Policy) -> list[tuple[str, str]]:
    """(path in the policy, warning) pairs; empty for a policy without surprises."""
    out: list[tuple[str, str]] = []
    tenancy, server = policy.tenancy, policy.server
    if tenancy.allow_anonymous and not is_loopback(server.host):
        out.append(
            (
                "tenancy.allow_anonymous",
                f"anyone who reaches {server.host}:{server.port} is served as tenant "
                f"{tenancy.default_tenant!r} without an API key (set allow_anonymous: false and list "
                "tenants, or listen on a loopback address)",
            )
        )
    if (
        server.metrics_port is not None
        and server.metrics_token_env is None
        and not is_loopback(server.metrics_host)
    ):
        out.append(
            (
                "server.metrics_host",
                f"the /metrics listener on {server.metrics_host} has no token: whoever reaches it reads "
                "per-tenant spend, tokens and advice savings and the replicas' names (set "
                "server.metrics_token_env, keep the port to the scraper with a NetworkPolicy, or set "
                "observability.tenant_labels: hashed or none)",
            )
        )
    fair, limits = policy.fairness, policy.limits
    if fair.enabled and limits.max_concurrent_requests:
        slots = fair.slots_per_replica or limits.max_concurrent_per_replica
        replicas = sum(len(m.replicas) for m in policy.models)
        held = fair.max_queued * len(policy.models) + (slots + fair.headroom_slots) * replicas
        if limits.max_concurrent_requests < held:
            out.append(
                (
                    "limits.max_concurrent_requests",
                    f"{limits.max_concurrent_requests} requests at once is fewer than the fair queues and "
                    f"the slots can hold ({held}): a flood fills the process limit's FIFO queue first, "
                    "where no tenant's share or priority applies (raise it, or lower fairness.max_queued)",
                )
            )
    return out


def shares_salted_state(policy: Policy) -> bool:
    """True when processes of this policy share state through Redis (any ``redis.url``: the response
    cache's keys and the shared index's hashes are salted): then they must share the server secret."""
    return policy.redis.url is not None


def secret_problem(policy: Policy, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(path, message) when the policy shares Redis between pods and ``environ`` holds no server secret;
    the message names the variable, never a value."""
    name = policy.tenancy.secret_env
    if not shares_salted_state(policy) or environ.get(name):
        return None
    index = policy.shared_index.enabled is True and policy.shared_index.transport != "local"
    shared = [
        what
        for what, on in (("the response cache", policy.cache.enabled), ("the shared prefix index", index))
        if on
    ]
    what = f": {' and '.join(shared)}" if shared else ""
    return (
        "tenancy.secret_env",
        f"{name} is not set, and the policy shares state between pods through Redis (redis.url{what}): "
        f"every pod must hash prompts with one "
        f"server secret, or nothing one pod writes matches another's; serve refuses to start without it "
        f"(export {name} with the same value in every pod)",
    )


def metrics_token_problem(policy: Policy, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(path, message) when ``server.metrics_token_env`` names a variable ``environ`` does not set:
    ``serve`` refuses rather than open the listener without the token the operator asked for."""
    name, server = policy.server.metrics_token_env, policy.server
    if name is None or server.metrics_port is None or environ.get(name):
        return None
    return (
        "server.metrics_token_env",
        f"{name} is not set: the /metrics listener wants its bearer token from it (export {name}, or "
        "set server.metrics_token_env: null)",
    )
