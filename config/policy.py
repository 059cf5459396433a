"""Root model of the YAML policy.

Each section lives beside its owner's concerns: routing in ``config/routing.py``, the response cache in
``config/cache.py``, billing in ``config/billing.py``, the layout advisor in ``config/advisor.py``,
offline batches in ``config/batch.py``. Unknown keys are rejected everywhere so a typo in a policy is an
error at load time, not a silently ignored setting.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AnyHttpUrl, BaseModel, ConfigDict, Field, field_validator, model_validator

from config.advisor import AdvisorConfig
from config.batch import BatchConfig
from config.billing import BillingConfig
from config.budgets import BudgetConfig, BudgetsConfig
from config.cache import CacheConfig
from config.fairness import FairnessConfig
from config.protocols import LoraConfig, ProtocolsConfig, TracingConfig
from config.routing import RoutingConfig, SharedIndexConfig

BackendKind = Literal["vllm", "sglang", "openai"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerConfig(_Strict):
    host: str = Field("127.0.0.1", description="address to listen on (0.0.0.0 in a container)")
    port: int = Field(8080, ge=0, le=65535, description="port to listen on (0: any free port)")
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="JSON logs on stderr")
    access_log: bool = Field(True, description="one JSON line per request (ids, timings; never prompt text)")
    drain_timeout_s: float = Field(
        30.0, ge=0, description="on SIGTERM, how long in-flight requests may finish"
    )
    keepalive_timeout_s: float = Field(
        75.0, gt=0, description="an idle keep-alive client connection is closed after this"
    )
    metrics_port: int | None = Field(
        29000,
        ge=0,
        le=65535,
        description="port of the separate /metrics listener (worker i of --workers listens on this + i; "
        "0: any free port; null: none). The serving port answers /metrics only with the admin token",
    )
    metrics_host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="address of the /metrics listener: loopback, whatever server.host is (the Helm chart "
        "sets the pod address for the scraper)",
    )
    metrics_token_env: str | None = Field(
        None,
        min_length=1,
        description="environment variable holding a bearer token the /metrics listener requires "
        "(Prometheus `authorization`); null: none (check-config warns when the listener is off loopback)",
    )


class ObservabilityConfig(_Strict):
    """What the metrics say about tenants."""

    tenant_labels: Literal["name", "hashed", "none"] = Field(
        "name",
        description="the tenant label of metrics: the listed tenant's id (others: other); hashed: a keyed "
        "hash of it (t-<12 hex>, stable for one server secret); none: every tenant is all",
    )


class LimitsConfig(_Strict):
    max_body_bytes: int = Field(16 * 1024 * 1024, ge=1024, description="larger request bodies get 413")
    max_header_bytes: int = Field(16 * 1024, ge=1024, description="longest request line / header field")
    max_headers: int = Field(128, ge=16, le=4096, description="header fields in one request, else 431")
    max_prompt_chars: int = Field(
        4 * 1024 * 1024, ge=1, description="longest rendered prompt (characters) accepted, else 400"
    )
    max_messages: int = Field(
        2048,
        ge=1,
        le=1_000_000,
        description="messages (or input items) of one request, OpenAI's own limit, else 400",
    )
    max_n: int = Field(
        128, ge=1, le=100_000, description="n and best_of: sequences one request asks for, else 400"
    )
    header_timeout_s: float = Field(
        10.0, gt=0, description="from a request's first byte to the end of its headers, else cut off"
    )
    body_timeout_s: float = Field(30.0, gt=0, description="reading a whole request body, else 408")
    max_concurrent_requests: int = Field(
        1024, ge=0, description="inference requests served at once by one process (0: no limit)"
    )
    max_queued_requests: int = Field(
        1024, ge=0, description="requests waiting for a slot (process or replica) before 503"
    )
    queue_timeout_s: float = Field(5.0, ge=0, description="longest wait for a slot before 503")
    max_concurrent_per_replica: int = Field(
        0, ge=0, description="requests one process sends at once to one replica (0: no limit)"
    )
    explain_decisions: int = Field(
        1024,
        ge=0,
        le=1_000_000,
        description="recent routing decisions kept for GET /admin/routing/explain (0: none kept)",
    )


class TimeoutsConfig(_Strict):
    connect_s: float = Field(5.0, gt=0, description="TCP connect to a replica")
    first_byte_s: float = Field(300.0, gt=0, description="from sending the request to the first byte back")
    idle_s: float = Field(120.0, gt=0, description="longest silence between two chunks of a stream")
    total_s: float = Field(900.0, gt=0, description="whole upstream exchange")

    @model_validator(mode="after")
    def _ordered(self) -> TimeoutsConfig:
        if self.first_byte_s > self.total_s:
            raise ValueError("first_byte_s must not exceed total_s")
        return self


class RetriesConfig(_Strict):
    """Retry a failed attempt on another replica, only while nothing has reached the client."""

    max_attempts: int = Field(3, ge=1, le=10, description="attempts per request, the first included")
    backoff_base_s: float = Field(0.02, ge=0, description="first backoff; doubles per attempt, jittered")
    backoff_max_s: float = Field(0.5, ge=0, description="cap of the backoff")
    deadline_s: float = Field(30.0, gt=0, description="no new attempt starts after this")
    on_status: list[int] = Field(
        default_factory=lambda: [429, 502, 503, 504],
        description="replica statuses retried on another replica",
    )


class HealthConfig(_Strict):
    """Active checks of each replica's /health."""

    enabled: bool = Field(True, description="probe every replica's /health")
    interval_s: float = Field(2.0, gt=0, description="time between two probes of a replica")
    timeout_s: float = Field(1.0, gt=0, description="a probe slower than this failed")
    fails_to_eject: int = Field(2, ge=1, description="failed checks in a row before a replica leaves routing")


class ScrapeConfig(_Strict):
    """Reading each replica's own load from its Prometheus /metrics (vLLM and SGLang names)."""

    enabled: bool = Field(True, description="read running/waiting/KV usage from each replica's /metrics")
    interval_s: float = Field(1.0, gt=0, description="time between two scrapes of a replica")
    timeout_s: float = Field(0.5, gt=0, description="a scrape slower than this is skipped")


class BreakerConfig(_Strict):
    """Passive outlier detection: a circuit breaker per replica, fed by real requests' outcomes.

    Transport failures (connect refused, connect/first-byte/idle timeouts, dropped connections) and
    5xx answers are counted separately, each against its own threshold. An answer below 500 resets the
    5xx count; only a complete answer (whole body, or stream to its end) resets the transport count.
    """

    enabled: bool = True
    transport_failures: int = Field(3, ge=1, description="consecutive transport failures that open it")
    status_failures: int = Field(5, ge=1, description="consecutive 5xx answers that open it")
    open_s: float = Field(1.0, gt=0, description="first wait before a half-open probe")
    max_open_s: float = Field(30.0, gt=0, description="cap of the doubling wait")
    close_after: int = Field(2, ge=1, description="successful probes that close it again")

    @model_validator(mode="after")
    def _ordered(self) -> BreakerConfig:
        if self.open_s > self.max_open_s:
            raise ValueError("open_s must not exceed max_open_s")
        return self


class DiscoveryConfig(_Strict):
    """Replicas found by resolving a DNS name (e.g. a Kubernetes headless service), re-resolved
    periodically; each address becomes a replica ``ip:port``."""

    dns: str = Field(min_length=1, max_length=253, description="host name to resolve")
    port: int = Field(8000, ge=1, le=65535)
    scheme: Literal["http", "https"] = "http"
    interval_s: float = Field(10.0, gt=0, description="how often the name is resolved again")
    kv_capacity_blocks: int | None = Field(None, ge=1)


class ReloadConfig(_Strict):
    """Hot reload of the policy file (SIGHUP and ``POST /admin/reload`` work regardless)."""

    watch_interval_s: float = Field(0.0, ge=0, description="poll the file's mtime this often (0: off)")


class ReplicaConfig(_Strict):
    url: AnyHttpUrl = Field(description="base URL of the replica's OpenAI server (without /v1)")
    id: str | None = Field(None, description="stable name; defaults to host:port of the url")
    kv_capacity_blocks: int | None = Field(
        None, ge=1, description="blocks the replica's KV cache holds (router index bound)"
    )
    weight: float = Field(1.0, gt=0, description="relative capacity (ring points, least-load tie break)")

    @property
    def replica_id(self) -> str:
        if self.id:
            return self.id
        return f"{self.url.host}:{self.url.port}"

    @property
    def base_url(self) -> str:
        return str(self.url).rstrip("/")


class ModelPoolConfig(_Strict):
    name: str = Field(min_length=1, description="model name clients send")
    served_model_name: str | None = Field(None, description="name the replicas know it by, if different")
    backend: BackendKind = Field("vllm", description="vllm and sglang get cache_salt; openai does not")
    accepts_cache_control: bool = Field(
        False, description="forward cache_control markers as they are (else stripped before the replica)"
    )
    engine_priority: Literal["none", "vllm", "sglang"] = Field(
        "none",
        description="write the request's fair class into the replica's body as `priority` (needs "
        "fairness.enabled), the highest class earliest and batch lines latest: vllm for vLLM's "
        "--scheduling-policy priority (lower first; also SGLang with --schedule-low-priority-values-first), "
        "sglang for SGLang's --enable-priority-scheduling (higher first); none sends nothing (a client's "
        "own field passes as it is)",
    )
    replicas: list[ReplicaConfig] = Field(default_factory=list)
    discovery: DiscoveryConfig | None = Field(None, description="replicas from DNS, besides `replicas`")
    routing: RoutingConfig = Field(default_factory=RoutingConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)

    @model_validator(mode="after")
    def _unique_replicas(self) -> ModelPoolConfig:
        if not self.replicas and self.discovery is None:
            raise ValueError("a model pool needs `replicas` or `discovery` (or both)")
        ids = [r.replica_id for r in self.replicas]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"replica ids must be unique within a pool, repeated: {sorted(dup)}")
        if self.engine_priority != "none" and self.backend == "openai":
            raise ValueError(
                "engine_priority needs a vllm or sglang backend (an openai one has no `priority`)"
            )
        if self.engine_priority == "sglang" and self.backend == "vllm":
            raise ValueError(
                "engine_priority 'sglang' (higher first) on a vllm backend would run batch lines first: "
                "vLLM schedules lower values first, use 'vllm'"
            )
        return self


class TenantConfig(_Strict):
    id: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$", description="tenant id")
    api_key_sha256: list[str] = Field(default_factory=list, description="hex SHA-256 digests of API keys")
    group: str | None = Field(None, description="tenants of one group share a cache salt")
    models: list[str] | None = Field(
        None,
        min_length=1,
        description="the models (and LoRA adapters, by the name a client sends as model) this tenant may "
        "call: names or glob patterns (llama-*); another model answers 404 model_not_found and "
        "/v1/models lists only these; None: every model",
    )
    budgets: list[BudgetConfig] = Field(
        default_factory=list,
        description="spend or token budgets over a period: a request starting after one is exhausted "
        "answers 429 budget_exceeded with Retry-After (docs/operations.md, Budgets)",
    )

    @field_validator("api_key_sha256")
    @classmethod
    def _hex_digests(cls, digests: list[str]) -> list[str]:
        out = []
        for d in digests:
            d = d.strip().lower()
            if len(d) != 64 or any(c not in "0123456789abcdef" for c in d):
                raise ValueError("api_key_sha256 entries must be 64 hex characters (sha256 of the key)")
            out.append(d)
        return out

    @model_validator(mode="after")
    def _budget_names(self) -> TenantConfig:
        names = [b.key_name for b in self.budgets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"budget names must be unique within a tenant, repeated: {dup}")
        return self


class TenancyConfig(_Strict):
    allow_anonymous: bool = Field(True, description="serve requests without a known key as default_tenant")
    default_tenant: str = Field("anonymous", description="tenant of requests without a known key")
    secret_env: str = Field(
        "PREFIX_GATEWAY_SECRET", description="environment variable holding the server secret for salts"
    )
    trusted_header: str | None = Field(None, description="e.g. x-tenant-id, honoured from trusted_proxies")
    trusted_proxies: list[str] = Field(default_factory=list, description="peer addresses or CIDRs")
    tenants: list[TenantConfig] = Field(default_factory=list)
    keys_file: str | None = Field(
        None,
        description="a YAML list of {tenant, name, sha256} (prefix-gateway keys create/revoke write it; "
        "relative to the policy file): its digests join the named tenants' api_key_sha256; reloaded "
        "with the policy (SIGHUP, reload.watch_interval_s, POST /admin/reload)",
    )
    budgets: BudgetsConfig = Field(default_factory=BudgetsConfig)

    @model_validator(mode="after")
    def _unique(self) -> TenancyConfig:
        if self.trusted_header and not self.trusted_proxies:
            raise ValueError(
                f"trusted_header {self.trusted_header!r} needs trusted_proxies (the addresses allowed to set "
                "it); without them the header is never honoured"
            )
        ids = [t.id for t in self.tenants]
        if len(ids) != len(set(ids)):
            raise ValueError("tenant ids must be unique")
        digests = [d for t in self.tenants for d in t.api_key_sha256]
        if len(digests) != len(set(digests)):
            raise ValueError("an API key digest is listed for more than one tenant")
        return self


class AdminConfig(_Strict):
    """``/admin/*`` answers 404 unless the variable named here holds a token (sent as a bearer token)."""

    token_env: str = Field("PREFIX_GATEWAY_ADMIN_TOKEN", description="variable holding the admin token")
    upload_env: list[str] = Field(
        default_factory=list,
        description="environment variables a policy uploaded to POST /admin/reload may reference as "
        "${NAME} (read from the policy file; an upload never expands any other)",
    )


class RedisConfig(_Strict):
    url: str | None = Field(None, description="redis://host:port/db; None keeps all state in memory")
    key_prefix: str = Field("pgw", description="prefix of every Redis key the gateway writes")
    socket_timeout_s: float = Field(
        0.5, gt=0, description="socket connect/read timeout of a connection (off the request path: reports)"
    )
    max_connections: int = Field(64, ge=1, le=10_000, description="Redis connections per gateway process")
    op_timeout_ms: int = Field(
        100, ge=1, le=60_000, description="deadline of every Redis command and script, pool wait included"
    )
    breaker_failures: int = Field(
        3,
        ge=1,
        le=1000,
        description="failed calls in a row that open the breaker: then every call fails at once",
    )
    probe_interval_ms: int = Field(
        500,
        ge=10,
        le=60_000,
        description="while open, a background PING this often; the first answer closes it",
    )


class Policy(_Strict):
    version: Literal[1] = Field(1, description="policy format version")
    server: ServerConfig = Field(default_factory=ServerConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    timeouts: TimeoutsConfig = Field(default_factory=TimeoutsConfig)
    retries: RetriesConfig = Field(default_factory=RetriesConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    breaker: BreakerConfig = Field(default_factory=BreakerConfig)
    reload: ReloadConfig = Field(default_factory=ReloadConfig)
    scrape: ScrapeConfig = Field(default_factory=ScrapeConfig)
    models: list[ModelPoolConfig] = Field(min_length=1)
    tenancy: TenancyConfig = Field(default_factory=TenancyConfig)
    admin: AdminConfig = Field(default_factory=AdminConfig)
    redis: RedisConfig = Field(default_factory=RedisConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    billing: BillingConfig = Field(default_factory=BillingConfig)
    advisor: AdvisorConfig = Field(default_factory=AdvisorConfig)
    batch: BatchConfig = Field(default_factory=BatchConfig)
    protocols: ProtocolsConfig = Field(default_factory=ProtocolsConfig)
    tracing: TracingConfig = Field(default_factory=TracingConfig)
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)
    shared_index: SharedIndexConfig = Field(default_factory=SharedIndexConfig)
    fairness: FairnessConfig = Field(default_factory=FairnessConfig)

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        """Checks across sections: unique model names; batch, semantic settings naming served models."""
        names = [m.name for m in self.models]
        everything = names + [a.name for m in self.models for a in m.lora.adapters]
        dup = {n for n in everything if everything.count(n) > 1}
        if dup:
            raise ValueError(f"model and adapter names must be unique, repeated: {sorted(dup)}")
        unknown = sorted(set(self.batch.pools) - set(names))
        if unknown:
            raise ValueError(f"batch.pools names models the policy does not serve: {unknown}")
        if self.shared_index.enabled and self.shared_index.transport == "redis" and self.redis.url is None:
            raise ValueError("shared_index.transport is 'redis' but redis.url is not set")
        if not self.billing.enabled and any(t.budgets for t in self.tenancy.tenants):
            raise ValueError(
                "tenancy.tenants[].budgets need billing.enabled (budgets count the ledger's rows)"
            )
        if self.batch.enabled and self.batch.store == "redis" and self.redis.url is None:
            raise ValueError("batch.store is 'redis' but redis.url is not set")
        fair_slots = self.fairness.slots_per_replica or self.limits.max_concurrent_per_replica
        if self.fairness.enabled and not fair_slots:
            raise ValueError(
                "fairness.enabled needs the requests a replica runs at once: fairness.slots_per_replica "
                "or limits.max_concurrent_per_replica"
            )
        prio = sorted(m.name for m in self.models if m.engine_priority != "none")
        if prio and not self.fairness.enabled:
            raise ValueError(
                f"models[].engine_priority ({', '.join(prio)}) sends the request's fair class: it needs "
                "fairness.enabled"
            )
        if self.fairness.enabled and self.fairness.reserved_slots >= fair_slots:
            raise ValueError(
                f"fairness.reserved_slots must be fewer than the slots of a replica ({fair_slots})"
            )
        semantic = [self.cache.semantic, *(o.semantic for o in self.cache.overrides if o.semantic)]
        for sem in semantic:
            if (
                sem.embedding is not None
                and sem.embedding.pool is not None
                and sem.embedding.pool not in names
            ):
                raise ValueError(
                    f"cache.semantic.embedding.pool {sem.embedding.pool!r} is not a model of this policy"
                )
        return self

    def pool(self, name: str) -> ModelPoolConfig | None:
        for m in self.models:
            if m.name == name:
                return m
        return None
