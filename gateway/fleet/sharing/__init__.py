"""The shared approximate index between gateway processes: the core (``core``) and its transports,
one file each, registered here by the name ``shared_index.transport`` gives."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from config.policy import Policy
from gateway.fleet.sharing.core import SharedIndex, Transport, TransportError
from gateway.fleet.sharing.redis_stream import RedisStream
from gateway.fleet.sharing.unix import UnixPeers, local_dir

if TYPE_CHECKING:
    from gateway.observability.metrics import GatewayMetrics
    from router.pool import PoolRouter

__all__ = ["TRANSPORTS", "SharedIndex", "Transport", "TransportError", "open_shared_index"]

log = logging.getLogger("prefix_gateway")

TRANSPORTS: dict[str, Callable[[Policy], Transport]] = {"redis": RedisStream, "local": UnixPeers}


def transport_name(policy: Policy) -> str | None:
    """The transport the policy asks for, or None when there is nothing to share with."""
    cfg = policy.shared_index
    if cfg.enabled is False:
        return None
    name = cfg.transport
    if cfg.enabled is None:  # the default: the workers of one host share; pods only when asked to
        name = "local"
    elif name == "auto":
        name = "redis" if policy.redis.url is not None else "local"
    if name == "local" and local_dir(policy) is None:
        return None  # one process, no Redis: no one to tell
    return name


async def open_shared_index(
    policy: Policy, metrics: GatewayMetrics, routers: Callable[[str], PoolRouter | None]
) -> SharedIndex | None:
    name = transport_name(policy)
    if name is None:
        if policy.shared_index.enabled:
            log.info(
                "shared index: a single process without Redis, nothing to share",
                extra={"event": "shared_index_alone"},
            )
        return None
    shared = SharedIndex(policy.shared_index, TRANSPORTS[name](policy), routers, metrics)
    try:
        await shared.start()
    except OSError as exc:  # e.g. the workers' directory is not writable: route on the own view
        log.warning(
            "shared index: cannot open the transport, routing on this process's own view",
            extra={"event": "shared_index_failed", "transport": name, "error": str(exc)},
        )
        await shared.transport.close()
        return None
    return shared
