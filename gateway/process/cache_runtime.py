"""The response cache's moving parts for one gateway process: store, coalescer, buckets, and the
semantic layer (``cache.semantic``) for the models whose ``cache.semantic.mode`` is not ``off``.

Memory when the policy names no Redis (the embedded default), Redis when it does (the process's
client, which this runtime uses and never closes): then every gateway pod shares entries, coalescing
leases and buckets. Redis failures are counted and logged (at most once
per interval) and fail open, except the tenant limiter, which follows ``tenant_limits.fail_mode``.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp
import redis.asyncio as aioredis

from cache.buckets import Buckets, KeyGate, MemoryBuckets, RedisBuckets, TenantLimiter
from cache.coalesce import Coalescer
from cache.semantic.embedder import Embedder
from cache.semantic.layer import SemanticLayer
from cache.semantic.route import SemanticRoute
from cache.semantic.store import EntityCheckedStore, MemorySemanticStore, SemanticStore
from cache.semantic.store_redis import RedisSemanticStore
from cache.store import MemoryStore, ResponseStore
from cache.store_redis import RedisStore
from config.cache import CacheConfig
from config.policy import Policy
from gateway.fleet.pools import Pool
from gateway.observability.metrics import GatewayMetrics

log = logging.getLogger("prefix_gateway")


@dataclass(slots=True)
class CacheRuntime:
    configs: dict[str, CacheConfig]  # per model, overrides applied
    store: ResponseStore
    coalescer: Coalescer
    gate: KeyGate
    limiter: TenantLimiter
    semantic: SemanticLayer | None = None
    embed_session: aiohttp.ClientSession | None = None  # the semantic layer's embedders' own

    async def close(self) -> None:
        await self.coalescer.close()
        await self.store.close()
        if self.embed_session is not None:
            await self.embed_session.close()


class RedisErrorLog:
    """Counts every Redis failure; logs at most one line per ``interval_s`` per component."""

    def __init__(self, metrics: GatewayMetrics, interval_s: float = 10.0):
        self.metrics = metrics
        self.interval_s = interval_s
        self._last: dict[str, float] = {}

    def hook(self, component: str):
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


def tag_secret(secret: bytes) -> bytes:
    """The semantic layer's tag secret: one for every tenant (a business event must reach all their
    entries), derived from the server secret and never equal to a tenant's salt."""
    return hmac.new(secret, b"pgw-semantic-tags", hashlib.sha256).digest()


def _embedder_base(pool: str, pools: Callable[[], Mapping[str, Pool]]) -> Callable[[], str]:
    """A healthy replica of a pool of this gateway, chosen at each call (the pools of the current state)."""

    def base() -> str:
        p = pools().get(pool)
        healthy = p.router.healthy() if p is not None else []
        if not healthy:
            raise LookupError(f"no healthy replica in embedding pool {pool!r}")
        return random.choice(healthy).url

    return base


def build_semantic(
    policy: Policy,
    configs: Mapping[str, CacheConfig],
    secret: bytes,
    redis: aioredis.Redis | None,
    errors: RedisErrorLog,
    pools: Callable[[], Mapping[str, Pool]],
    exact: ResponseStore | None = None,
) -> tuple[SemanticLayer | None, aiohttp.ClientSession | None]:
    """The semantic layer of the models that have one (``None`` when none has), and the client
    session its embedders share. ``exact`` is the exact cache's store: the memory semantic store
    keeps the exact entries it ties to entities there (in Redis both share one keyspace)."""
    sem = {m: c.semantic for m, c in configs.items() if c.enabled and c.semantic.mode != "off"}
    if not sem:
        return None, None
    secret_for_tags = tag_secret(secret)
    routes = {m: SemanticRoute(cfg, secret_for_tags) for m, cfg in sem.items()}
    per_tag = max(cfg.max_entries_per_tag for cfg in sem.values())
    cache = policy.cache
    store: SemanticStore
    if redis is not None and cache.store != "memory":
        # An epoch counter must outlive every entry stamped with it, the exact ones included.
        max_ttl = max(*(cfg.ttl_s or cache.ttl_s for cfg in sem.values()), *(configs[m].ttl_s for m in sem))
        store = RedisSemanticStore(
            redis,
            key_prefix=policy.redis.key_prefix,
            max_entry_bytes=cache.max_entry_bytes,
            max_entries_per_tag=per_tag,
            epoch_ttl_s=2 * max_ttl + policy.timeouts.total_s,
            on_error=errors.hook("semantic"),
        )
    else:
        store = MemorySemanticStore(
            max_bytes=cache.memory_max_bytes,
            max_entry_bytes=cache.max_entry_bytes,
            max_entries_per_tag=per_tag,
            exact=exact if isinstance(exact, MemoryStore) else None,
        )
    session: aiohttp.ClientSession | None = None
    embedders: dict[str, Embedder] = {}
    for model, cfg in sem.items():
        emb = cfg.embedding
        if cfg.mode != "embedding" or emb is None:
            continue
        session = session or aiohttp.ClientSession()
        base = emb.url if emb.url is not None else _embedder_base(emb.pool, pools)  # type: ignore[arg-type]
        embedders[model] = Embedder(
            session,
            base,
            emb.model,
            timeout_s=emb.timeout_s,
            max_dimensions=emb.max_dimensions,
            api_key=os.environ.get(emb.api_key_env) if emb.api_key_env else None,
        )
    return SemanticLayer(routes, store, embedders, default_ttl_s=cache.ttl_s), session


def build_cache_runtime(
    policy: Policy,
    metrics: GatewayMetrics,
    redis: aioredis.Redis | None,
    secret: bytes,
    pools: Callable[[], Mapping[str, Pool]],
) -> CacheRuntime:
    """The cache of ``policy``; ``redis`` is the process's client (None when the policy names none);
    ``pools`` the current pools (a semantic route may embed with one of them)."""
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
    configs = {m.name: cfg.for_model(m.name) for m in policy.models}
    if redis_client is not None:
        store = RedisStore(
            client=redis_client,
            key_prefix=prefix,
            max_entry_bytes=cfg.max_entry_bytes,
            on_error=errors.hook("store"),
        )
    else:
        store = MemoryStore(max_bytes=cfg.memory_max_bytes, max_entry_bytes=cfg.max_entry_bytes)
    semantic, session = build_semantic(policy, configs, secret, redis_client, errors, pools, store)
    if semantic is not None:  # exact entries tied to entities are refused at read once an event came
        store = EntityCheckedStore(store, semantic.store)
    if redis_client is not None:
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
    return CacheRuntime(configs, store, coalescer, gate, limiter, semantic, session)
