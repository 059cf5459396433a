"""Policy sections of the APIs clients bring besides chat completions: the Responses API's store, LoRA
adapters, and OpenTelemetry tracing.

The response store holds conversations (the text of their turns) so that ``previous_response_id``
works whichever replica answers: it is a data store the policy turns on, bounded in entries, bytes and
time. Its keys carry a tenant id and a random response id, never text.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ResponseStoreConfig(_Strict):
    """The Responses API's store, for ``previous_response_id`` and ``GET/DELETE /v1/responses/{id}``.

    In memory, or in the policy's Redis (``redis.url``) so that every gateway pod finds them."""

    enabled: bool = Field(
        True,
        description="keep responses (requests with store: false are never kept); off: previous_response_id "
        "gets 400 and GET 404",
    )
    ttl_s: float = Field(3600.0, gt=0, le=30 * 86400, description="a stored response expires after this")
    max_entries: int = Field(10_000, ge=1, description="responses kept in memory (oldest dropped first)")
    max_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="bytes of responses kept in memory (oldest dropped first)"
    )
    max_record_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="one stored conversation (history and answer); a larger one is not kept",
    )
    max_chain_items: int = Field(
        1024, ge=1, description="input items of a conversation, history included, else 400"
    )


class ProtocolsConfig(_Strict):
    """The APIs besides chat completions (``/v1/responses``, ``/v1/messages``)."""

    responses: ResponseStoreConfig = Field(default_factory=ResponseStoreConfig)


class LoraAdapterConfig(_Strict):
    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:/@-]+$", description="model name")
    path: str | None = Field(
        None, min_length=1, description="lora_path for /v1/load_lora_adapter (dynamic loading only)"
    )


class LoraConfig(_Strict):
    """LoRA adapters served on top of this model, routed only to the replicas that serve them.

    A replica serves an adapter when its ``/v1/models`` lists it with this model as ``parent``."""

    discover: bool = Field(True, description="read adapters from each replica's /v1/models")
    refresh_s: float = Field(10.0, gt=0, description="how often replicas' /v1/models is read")
    max_adapters: int = Field(
        256,
        ge=1,
        le=10_000,
        description="adapters a pool knows, named first, then listed in name order (metric labels stay bounded)",
    )
    adapters: list[LoraAdapterConfig] = Field(
        default_factory=list, description="adapters clients may name even before a replica lists them"
    )
    dynamic_loading: bool = Field(
        False,
        description="load an adapter with a path on the chosen replica (vLLM's /v1/load_lora_adapter, "
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING) when no replica serves it",
    )
    load_timeout_s: float = Field(60.0, gt=0, description="a load slower than this fails the attempt")

    @field_validator("adapters")
    @classmethod
    def _unique(cls, adapters: list[LoraAdapterConfig]) -> list[LoraAdapterConfig]:
        names = [a.name for a in adapters]
        if len(names) != len(set(names)):
            raise ValueError("adapter names must be unique within a pool")
        return adapters


class TracingConfig(_Strict):
    """OpenTelemetry traces over OTLP/HTTP (the ``otel`` extra).

    A span per request with child spans for admission, the cache, routing and each upstream attempt,
    GenAI semantic-convention attributes, never prompt text; W3C ``traceparent`` read from clients and
    sent to replicas (vLLM's ``--otlp-traces-endpoint`` continues the trace). Without tracing a
    client's ``traceparent`` is still passed on unchanged."""

    enabled: bool = Field(False, description="export spans over OTLP/HTTP (needs the otel extra)")
    otlp_endpoint: str = Field(
        "http://127.0.0.1:4318/v1/traces", min_length=1, description="OTLP/HTTP traces endpoint"
    )
    headers_env: str | None = Field(
        None, description="variable holding OTLP headers as k=v,k=v (e.g. an auth token)"
    )
    service_name: str = Field("prefix-gateway", min_length=1, description="resource service.name")
    sample_ratio: float = Field(
        1.0, ge=0, le=1, description="share of new traces sampled (a client's sampled flag is followed)"
    )
    max_queue_size: int = Field(2048, ge=1, description="spans waiting for export; beyond, dropped")
    export_timeout_s: float = Field(10.0, gt=0, description="one export call")
