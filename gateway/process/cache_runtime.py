"""The response cache's moving parts for one gateway process: store, coalescer, buckets.

Memory when the policy names no Redis (the embedded default), Redis when it does (the process's
client, which this runtime uses and never closes): then every gateway pod shares entries, coalescing
leases and buckets. Redis failures are counted and logged (at most once
per interval) and fail open, except the tenant limiter, which follows ``tenant_limits.fail_mode``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import redis.asyncio as aioredis

from cache.buckets import Buckets, KeyGate, MemoryBuckets, RedisBuckets, TenantLimiter
from cache.coalesce import Coalescer
from cache.store import MemoryStore, ResponseStore
from cache.store_redis import RedisStore
from config.cache import CacheConfig
from config.policy import Policy
from gateway.observability.metrics import GatewayMetrics

log = logging.getLogger("prefix_gateway")


@dataclass(slots=True)
class CacheRuntime:
    configs: dict[str, CacheConfig]  # per model, overrides applied
    store: ResponseStore
    coalescer: Coalescer
    gate: KeyGate
    limiter: TenantLimiter

    async def close(self) -> None:
        await self.coalescer.close()
        await self.store.close()


class RedisErrorLog:
    """Counts every Redis failure; logs at most one line per ``interval_s`` per component."""

    def __init__(self, metrics: GatewayMetrics, interval_s: float = 10.0):
        self.metrics = metrics
        self.interval_s = interval_s
        self._last: dict[str, float] = {}

    def hook(self, component: str):  # type: ignore[no-untyped-def]
        def on_error(op: str, exc: BaseException) -> None:
            self.metrics.child(self.metrics.redis_errors, component, op).inc()
            now = time.monotonic()
            if now - self._last.get(component, -1e9) >= self.interval_s:
                self._last[component] = now
                log.warning(
                    "redis call failed (the cache fails open; the limiter as tenant_limits.fail_mode says)",
                    extra={
                        "event": "redis_error",
                        "component": component,
                        "op": op,
                        "error": type(exc).__name__,
                    },
                )

        return on_error


def build_cache_runtime(
    policy: Policy, metrics: GatewayMetrics, redis: aioredis.Redis | None
) -> CacheRuntime:
    """The cache of ``policy``; ``redis`` is the process's client (None when the policy names none)."""
    cfg = policy.cache
    errors = RedisErrorLog(metrics)
    redis_client: aioredis.Redis | None = None
    if cfg.store == "redis" or (cfg.store == "auto" and redis is not None):
        if redis is None:
            raise ValueError("cache.store is 'redis' but redis.url is not set")
        redis_client = redis
    prefix = policy.redis.key_prefix
    store: ResponseStore
    buckets: Buckets
    limiter_buckets: Buckets
    if redis_client is not None:
        store = RedisStore(
            client=redis_client,
            key_prefix=prefix,
            max_entry_bytes=cfg.max_entry_bytes,
            on_error=errors.hook("store"),
        )
        coalescer = Coalescer(
            redis=redis_client,
            store=store,
            key_prefix=prefix,
            lease_ms=cfg.coalescing.lease_ms,
            follower_timeout_s=cfg.coalescing.follower_timeout_s,
            on_error=errors.hook("coalesce"),
        )
        buckets = RedisBuckets(
            redis_client, key_prefix=prefix, fail_open=True, on_error=errors.hook("buckets")
        )
        limiter_buckets = RedisBuckets(
            redis_client,
            key_prefix=prefix,
            fail_open=cfg.tenant_limits.fail_mode == "open",
            on_error=errors.hook("limiter"),
        )
    else:
        store = MemoryStore(max_bytes=cfg.memory_max_bytes, max_entry_bytes=cfg.max_entry_bytes)
        coalescer = Coalescer(follower_timeout_s=cfg.coalescing.follower_timeout_s)
        buckets = limiter_buckets = MemoryBuckets()
    gate = KeyGate(
        buckets,
        capacity=cfg.key_bucket.capacity,
        refill_per_s=cfg.key_bucket.refill_per_s,
        breaker_threshold_per_min=cfg.fill_breaker.threshold_per_min if cfg.fill_breaker.enabled else None,
    )
    limits = cfg.tenant_limits
    limiter = TenantLimiter(
        limiter_buckets,
        requests_per_s=limits.requests_per_s,
        request_burst=limits.request_burst,
        tokens_per_min=limits.tokens_per_min,
    )
    configs = {m.name: cfg.for_model(m.name) for m in policy.models}
    return CacheRuntime(configs, store, coalescer, gate, limiter)
