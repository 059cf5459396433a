"""Routing section of a model pool: which policy picks the replica, and its parameters."""

from __future__ import annotations

import re
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PolicyName = Literal["round_robin", "least_load", "consistent_hash", "chwbl", "prefix_affinity", "session"]

# RFC 9110 token characters: what an HTTP header name may be made of.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_ZMQ_ENDPOINT = re.compile(r"^(tcp://(\*|\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}|ipc://.+)$")


class TokenizerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["approx", "hf"] = "approx"
    bytes_per_token: int = Field(4, ge=1, le=16, description="approx: UTF-8 bytes per token")
    path: str | None = Field(
        None, description="hf: path to a tokenizer.json (relative to the policy file), loaded at start"
    )

    @model_validator(mode="after")
    def _hf_needs_path(self) -> TokenizerConfig:
        if self.kind == "hf" and not self.path:
            raise ValueError("tokenizer kind 'hf' needs 'path' (a tokenizer.json file)")
        return self


class KvEventsConfig(BaseModel):
    """Where the gateway hears vLLM's KV-cache events (precise index).

    ``mode: connect`` (any number of gateway processes and pods): every replica BINDS its publisher
    (``--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint":
    "tcp://*:5557", "replay_endpoint": "tcp://*:5558"}'``) and each gateway process connects a SUB
    socket of its own to every replica (host from the replica's URL, ``port`` and ``replay_port``), so
    every process gets every event. ``mode: bind`` (one gateway process): the gateway BINDS one SUB
    socket that every replica connects to (``"endpoint": "tcp://<gateway>:5557"``), each replica
    publishing under its own topic; with several processes only the first can bind.
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["bind", "connect"] = Field(
        "bind",
        description="bind: the gateway binds, replicas connect; connect: replicas bind, every process connects",
    )
    port: int = Field(5557, ge=1, le=65535, description="connect: each replica's publisher port")
    replay_port: int | None = Field(
        None,
        ge=1,
        le=65535,
        description="connect: each replica's replay port (None: only those `replay` names)",
    )
    endpoints: dict[str, str] = Field(
        default_factory=dict,
        description="connect: replica id -> its publisher endpoint, instead of host:port",
    )

    bind: str = Field("tcp://127.0.0.1:5557", description="ZMQ endpoint the gateway's SUB socket binds")
    topics: dict[str, str] = Field(
        default_factory=dict, description="replica id -> the topic it publishes (default: the replica id)"
    )
    replay: dict[str, str] = Field(
        default_factory=dict,
        description="replica id -> its replay endpoint (ROUTER socket), asked for batches missed in a gap",
    )
    speculative_ttl_s: float = Field(
        5.0, gt=0, le=600, description="a routed prefix counts as held this long before its event confirms it"
    )
    replay_timeout_s: float = Field(1.0, gt=0, le=60, description="give up a replay (and purge) after this")

    @field_validator("bind")
    @classmethod
    def _endpoint(cls, value: str) -> str:
        if not _ZMQ_ENDPOINT.match(value):
            raise ValueError(f"kv_events.bind must be tcp://host:port or ipc://path, got {value!r}")
        return value

    @field_validator("replay", "endpoints")
    @classmethod
    def _replay_endpoints(cls, value: dict[str, str]) -> dict[str, str]:
        for rid, ep in value.items():
            if not _ZMQ_ENDPOINT.match(ep) or "*" in ep:
                raise ValueError(
                    f"kv_events endpoint of {rid!r} must be tcp://host:port or ipc://path, got {ep!r}"
                )
        return value

    @model_validator(mode="after")
    def _unique_topics(self) -> KvEventsConfig:
        topics = list(self.topics.values())
        dup = {t for t in topics if topics.count(t) > 1}
        if dup:
            raise ValueError(f"kv_events.topics must be unique per replica, repeated: {sorted(dup)}")
        return self

    def topic_of(self, replica_id: str) -> str:
        return self.topics.get(replica_id, replica_id)

    def endpoint_of(self, replica_id: str, url: str) -> str:
        """connect: the replica's publisher."""
        return self.endpoints.get(replica_id) or f"tcp://{_host(url)}:{self.port}"

    def replay_of(self, replica_id: str, url: str) -> str | None:
        """The replica's replay endpoint, if it has one."""
        named = self.replay.get(replica_id)
        if named is None and self.mode == "connect" and self.replay_port is not None:
            return f"tcp://{_host(url)}:{self.replay_port}"
        return named


def _host(url: str) -> str:
    host = urlsplit(url).hostname or "127.0.0.1"
    return f"[{host}]" if ":" in host else host


class SharedIndexConfig(BaseModel):
    """Gateway processes tell each other where they sent prompts, for the approximate index.

    Each process appends its placements (block hashes per replica, never text) to a transport in
    batches, off the request path; a background reader applies the other processes' placements to the
    local index. A decision never waits on the transport: when it is down, each process routes on its
    own view and catches up when it returns. ``redis``: one stream under ``redis.key_prefix`` in the
    policy's Redis (pods); ``local``: datagrams between the workers of ``--workers N`` on one host.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool | None = Field(
        None,
        description="share placements between gateway processes; unset: between the workers of "
        "--workers N only (local), true: also across pods (through Redis when redis.url is set)",
    )
    transport: Literal["auto", "redis", "local"] = Field(
        "auto", description="auto: redis when redis.url is set, else local (the workers of one host)"
    )
    flush_interval_s: float = Field(
        0.05, gt=0, le=10, description="placements are sent in one batch this often"
    )
    max_pending: int = Field(
        4096,
        ge=1,
        le=1_000_000,
        description="placements waiting for the next batch, and batches waiting to be applied; more are dropped",
    )
    max_batch_bytes: int = Field(
        65536, ge=1024, le=1_048_576, description="one stream entry or datagram at most (a batch is split)"
    )
    max_blocks: int = Field(
        256, ge=1, le=65_536, description="leading block hashes of a placement that are shared"
    )
    stream_max_len: int = Field(
        1000, ge=10, le=1_000_000, description="redis: stream entries kept (MAXLEN ~); bounds its memory"
    )
    stream_ttl_s: int = Field(
        3600, ge=10, le=604_800, description="redis: the stream expires when no process wrote for this long"
    )
    join_entries: int = Field(
        200, ge=0, le=100_000, description="redis: newest entries applied at start and after an outage"
    )
    read_block_ms: int = Field(
        1000, ge=10, le=60_000, description="redis: a read waits this long for new entries"
    )
    retry_s: float = Field(1.0, gt=0, le=60, description="a failed transport is tried again after this")
    local_dir: str | None = Field(
        None,
        description="local: directory of the processes' sockets (default: the one --workers N creates)",
    )


class RoutingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: PolicyName = "prefix_affinity"
    block_size: int = Field(16, ge=1, le=1024, description="tokens per hashed block")
    max_prefix_tokens: int = Field(
        4096, ge=1, le=1_048_576, description="tokens of the prompt that are hashed"
    )
    route_key_tokens: int = Field(256, ge=1, description="tokens that form the route key of a cold prompt")
    load_factor: float = Field(
        1.25, gt=1.0, le=10.0, description="bounded-load factor c: max load = c x mean"
    )
    min_match_fraction: float = Field(
        0.1, ge=0.0, le=1.0, description="a match below this fraction of the prompt counts as no match (cold)"
    )
    max_queued_prefill_tokens: int = Field(
        65536,
        ge=1,
        description="a replica with more uncached prefill tokens queued is saturated (explicit pin)",
    )
    reuse_weight: float = Field(
        20.0,
        ge=0.0,
        le=1000.0,
        description="prefix_affinity: a cached token of a private prefix (a conversation) is worth (1 + this) "
        "queued prefill tokens; 0 is greedy on this request's time to first token",
    )
    shared_reuse_weight: float = Field(
        0.0,
        ge=0.0,
        le=1000.0,
        description="prefix_affinity: the same for a shared prefix (one another recent request's match "
        "ended at too)",
    )
    decode_cost_tokens: float = Field(
        64.0,
        ge=0.0,
        le=1_000_000.0,
        description="prefix_affinity: queued prefill tokens one request in flight on a replica counts as",
    )
    shared_window: int = Field(
        64,
        ge=0,
        le=100_000,
        description="prefix_affinity: recent decisions in which a prefix must recur to count as shared "
        "(0: every prefix is private)",
    )
    prefill_tokens_per_s: float = Field(
        15000.0,
        gt=0,
        le=1e9,
        description="prefill rate assumed for a replica until its answers measure it: a non-streamed "
        "request's queued prefill is released when this predicts its prefill ended (router.prefill)",
    )
    nonstream_prefill_release: Literal["predicted", "end"] = Field(
        "predicted",
        description="when a non-streamed request's queued prefill is released: at its predicted prefill end, "
        "or at the end of the request (the replica sends nothing earlier)",
    )
    evict_weight: float = Field(
        1.0,
        ge=0.0,
        le=1000.0,
        description="prefix_affinity: queued prefill tokens one token counts as that a placement evicts from "
        "a full cache (it will be prefilled again); 0 scores only what a placement prefills. Reads the index's "
        "free room where every candidate's capacity is published or proven by a miss; where any is neither, off "
        "(a room not known, or rooms not on one footing)",
    )
    hot_penalty_tokens: float = Field(
        192.0,
        ge=0.0,
        le=1_000_000.0,
        description="prefix_affinity: queued prefill tokens each decision counts as that a replica took of the "
        "last 256 beyond hot_share_factor x the mean, scored where the prompt is mostly a hot prefix (one that "
        "ended 1/n of the last shared_window decisions' matches): bounds how much of the traffic a hot prompt's "
        "home takes; 0: off",
    )
    hot_share_factor: float = Field(
        1.15,
        ge=1.0,
        le=10.0,
        description="prefix_affinity: the share of the recent decisions (x the mean) a replica may take before "
        "hot_penalty_tokens counts",
    )
    learn_capacity: bool = Field(
        True,
        description="learn each replica's effective KV capacity from its answers' cached_tokens (without "
        "them, from its scraped vllm:prefix_cache_hits), starting from the published or default one "
        "(false: the index keeps that bound)",
    )
    index_ttl_s: float | None = Field(None, gt=0, description="forget index entries older than this")
    default_kv_capacity_blocks: int = Field(
        8192, ge=1, le=16_777_216, description="index bound of a replica whose KV capacity is unknown"
    )
    report_stale_s: float = Field(
        5.0, gt=0, description="ignore a replica's scraped load older than this many seconds"
    )
    virtual_nodes: int = Field(160, ge=1, le=4096, description="ring points per replica (consistent hashing)")
    session_header: str = Field("x-session-id", description="session policy: header carrying the session id")
    seed: int | None = Field(None, description="seed of the random tie break (None: nondeterministic)")
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    index: Literal["approximate", "precise"] = Field(
        "approximate",
        description="prefix_affinity: 'approximate' guesses from what was sent; 'precise' also reads what "
        "each vLLM replica holds from its KV-cache events (approximate for replicas without events)",
    )
    engine_block_size: int | None = Field(
        None, ge=1, le=4096, description="precise: the replicas' --block-size (vLLM CPU default 128)"
    )
    hash_algo: Literal["sha256_cbor"] = Field(
        "sha256_cbor", description="precise: the replicas' --prefix-caching-hash-algo (must match)"
    )
    hash_seed: str | None = Field(
        None, description="precise: the replicas' PYTHONHASHSEED, if set (None: vLLM's fixed default seed)"
    )
    chat_template: str | None = Field(
        None,
        description="precise: tokenizer_config.json holding the chat template (default: beside tokenizer.path)",
    )
    kv_events: KvEventsConfig | None = Field(None, description="precise: where the events arrive")

    @field_validator("session_header")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not _HEADER_NAME.match(value):
            raise ValueError(
                f"session_header must be an HTTP header name (letters, digits, '-'), got {value!r}"
            )
        return value.lower()

    @model_validator(mode="after")
    def _check_sizes(self) -> RoutingConfig:
        if self.route_key_tokens > self.max_prefix_tokens:
            raise ValueError(
                f"route_key_tokens ({self.route_key_tokens}) must not exceed max_prefix_tokens "
                f"({self.max_prefix_tokens})"
            )
        if self.index == "precise":
            problems = []
            if self.policy != "prefix_affinity":
                problems.append(f"policy must be 'prefix_affinity' (got {self.policy!r})")
            if self.tokenizer.kind != "hf":
                problems.append("tokenizer.kind must be 'hf' (the model's own tokenizer.json)")
            if self.engine_block_size is None:
                problems.append("engine_block_size must be set (the replicas' --block-size)")
            elif self.engine_block_size % self.block_size:
                problems.append(
                    f"engine_block_size ({self.engine_block_size}) must be a multiple of block_size "
                    f"({self.block_size})"
                )
            if problems:
                raise ValueError("index 'precise' needs: " + "; ".join(problems))
            if self.kv_events is None:
                self.kv_events = KvEventsConfig()
        if self.max_prefix_tokens < self.block_size:
            raise ValueError(
                f"max_prefix_tokens ({self.max_prefix_tokens}) must be at least one block "
                f"(block_size {self.block_size})"
            )
        return self
