"""Response-cache section of the policy (owned by the response-cache work).

The Redis URL and key prefix live in the root policy (``policy.redis``); the cache library takes them
as constructor parameters so this section stays about caching behaviour only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from config.semantic import SemanticConfig

CacheRule = Literal["deterministic", "always", "never"]
PiiMode = Literal["bypass", "mask", "off"]
FailMode = Literal["open", "closed"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CoalescingConfig(_Strict):
    """Single-flight: concurrent identical misses wait for one leader's answer."""

    enabled: bool = Field(True, description="coalesce identical concurrent misses (across pods with Redis)")
    lease_ms: int = Field(30_000, ge=100, description="Redis leader lease; renewed while the leader runs")
    follower_timeout_s: float = Field(
        120.0, gt=0, description="a follower that waits longer goes upstream itself"
    )


class KeyBucketConfig(_Strict):
    """How often one cache key may go to the fleet (a token bucket per key)."""

    enabled: bool = Field(True, description="limit fleet calls per cache key (429 beyond)")
    capacity: float = Field(10.0, gt=0, description="burst of fleet calls one key may make")
    refill_per_s: float = Field(1.0, gt=0, description="sustained fleet calls per second for one key")


class FillBreakerConfig(_Strict):
    """One key requested beyond ``threshold_per_min`` gets the fallback instead of the fleet."""

    enabled: bool = Field(False, description="answer a fallback when one key is hammered")
    threshold_per_min: int = Field(600, ge=1, description="requests per minute for one key before it trips")
    fallback_text: str | None = Field(None, description="answer this text; None answers fallback_status")
    fallback_status: int = Field(503, ge=400, le=599, description="status answered when no fallback_text")
    retry_after_s: int = Field(5, ge=1, description="Retry-After of the fallback status")


class TenantLimitsConfig(_Strict):
    """Per-tenant token buckets; None disables a limit."""

    requests_per_s: float | None = Field(None, gt=0, description="per-tenant request rate (429 beyond)")
    request_burst: float | None = Field(None, gt=0, description="bucket size; default 2 x requests_per_s")
    tokens_per_min: float | None = Field(
        None, gt=0, description="prompt + max_tokens reserved, unused refunded"
    )
    fail_mode: FailMode = Field("open", description="what the limiter does when Redis is unreachable")


class CacheOverride(_Strict):
    """Per model-name overrides of the cache behaviour."""

    model: str = Field(min_length=1, description="model name the override applies to")
    enabled: bool | None = Field(None, description="unset: as the section")
    rule: CacheRule | None = Field(None, description="unset: as the section")
    ttl_s: int | None = Field(None, ge=1, description="unset: as the section")
    pii: PiiMode | None = Field(None, description="unset: as the section")
    semantic: SemanticConfig | None = Field(None, description="unset: as the section (replaced whole)")


class CacheConfig(_Strict):
    """The request-level response cache."""

    enabled: bool = Field(True, description="answer repeated requests from the cache")
    rule: CacheRule = Field(
        "deterministic", description="deterministic: temperature 0 or a seed; always; never"
    )
    ttl_s: int = Field(3600, ge=1, description="life of an entry (a client's cache.ttl may shorten it)")
    max_entry_bytes: int = Field(1024 * 1024, ge=256, description="larger answers are not stored")
    memory_max_bytes: int = Field(256 * 1024 * 1024, ge=1024, description="in-memory store byte bound")
    store: Literal["auto", "memory", "redis"] = Field(
        "auto", description="auto: Redis when policy.redis.url is set, else memory"
    )
    pii: PiiMode = Field("bypass", description="bypass: PII is never stored; mask: placeholders; off")
    coalescing: CoalescingConfig = Field(default_factory=CoalescingConfig)
    key_bucket: KeyBucketConfig = Field(default_factory=KeyBucketConfig)
    fill_breaker: FillBreakerConfig = Field(default_factory=FillBreakerConfig)
    tenant_limits: TenantLimitsConfig = Field(default_factory=TenantLimitsConfig)
    semantic: SemanticConfig = Field(default_factory=SemanticConfig)
    overrides: list[CacheOverride] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_overrides(self) -> CacheConfig:
        names = [o.model for o in self.overrides]
        if len(names) != len(set(names)):
            raise ValueError("cache overrides must name each model at most once")
        return self

    def for_model(self, model: str) -> CacheConfig:
        """This config with the override for ``model`` applied (self when there is none)."""
        for o in self.overrides:
            if o.model == model:
                patch = {k: v for k, v in o.model_dump(exclude={"model"}).items() if v is not None}
                return self.model_copy(update=patch)
        return self
