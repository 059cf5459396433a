"""Per-replica constants of the simulator and its runtime fault knobs."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from sim.engine import EngineConfig, EngineCosts

MODES = ("engine", "simple")


@dataclass(slots=True)
class Faults:
    """Misbehaviours a test can switch on at runtime (``POST /sim/faults``); all off by default.

    - ``fail_status``: answer every generation request with this HTTP status and an OpenAI error body.
    - ``hang``: never answer (until the client goes away, or ``SimConfig.hang_limit_s`` passes).
    - ``drop_mid_stream_after``: close the TCP connection after N SSE events of a stream (for a
      non-stream request: after the headers and half of the body).
    - ``slow_factor``: multiplies every modelled delay.
    - ``malformed``: answer 200 with invalid JSON, or an SSE stream carrying a broken event.
    - ``health_status``: the status ``GET /health`` answers (200 when unset).
    - ``abort_after``: end the answer after N generated tokens with ``finish_reason: "abort"`` (what
      vLLM sends when the engine serving the request died), the stream still closed by ``[DONE]``.
    """

    fail_status: int | None = None
    hang: bool = False
    drop_mid_stream_after: int | None = None
    slow_factor: float = 1.0
    malformed: bool = False
    health_status: int | None = None
    abort_after: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Faults:
        """Build from a JSON object; unknown keys and wrong types raise ``ValueError``."""
        if not isinstance(data, dict):
            raise ValueError("faults must be a JSON object")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown fault knobs: {unknown}")
        out = cls()
        for key, value in data.items():
            if value is None:
                continue
            if key in ("hang", "malformed"):
                if not isinstance(value, bool):
                    raise ValueError(f"{key} must be a boolean")
            elif key in ("fail_status", "drop_mid_stream_after", "health_status", "abort_after"):
                if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                    raise ValueError(f"{key} must be a non-negative integer")
                if key in ("fail_status", "health_status") and not 100 <= value <= 599:
                    raise ValueError(f"{key} must be an HTTP status (100..599)")
            elif key == "slow_factor":
                if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                    raise ValueError("slow_factor must be a non-negative number")
                value = float(value)
            setattr(out, key, value)
        return out

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(slots=True)
class SimConfig:
    """Everything that makes one simulated replica behave the way it does.

    ``mode``: ``"engine"`` steps a model of vLLM V1's scheduler and paged KV cache
    (``sim.engine``: token budget, chunked prefill, preemption, step costs ``costs``);
    ``"simple"`` is the fast model for unit tests (FIFO slots, an LRU of block hashes, TTFT = queue +
    uncached tokens x ``prefill_s_per_token`` + ``overhead_s``, then ``decode_s_per_token`` a token).
    Delays are in seconds and are all multiplied by ``speed`` (and by ``faults.slow_factor``);
    ``speed == 0`` disables every sleep so the simulator costs as little as possible per request.
    """

    models: tuple[str, ...] = ("sim-llama",)
    mode: Literal["engine", "simple"] = "engine"
    kv_capacity_blocks: int = 2048
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192  # engine: the step's token budget
    long_prefill_token_threshold: int = 0  # engine: cap of one request's prefill chunk (0: none)
    stream_interval: int = 1  # engine: tokens a stream hands over at once (vLLM --stream-interval)
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"  # engine: vLLM --scheduling-policy
    costs: EngineCosts = field(default_factory=EngineCosts)  # engine: step costs (model seconds)
    prefill_s_per_token: float = 0.0001  # simple mode
    decode_s_per_token: float = 0.01  # simple mode
    overhead_s: float = 0.005  # simple mode
    speed: float = 1.0
    block_size: int = 16
    publish_cache_config: bool = (
        True  # vllm:cache_config_info in /metrics (False: an engine that says nothing)
    )
    # usage.prompt_tokens_details.cached_tokens in answers (False: an engine that does not report it,
    # as vLLM without --enable-prompt-tokens-details; vllm:prefix_cache_hits is still published)
    report_cached_tokens: bool = True
    bytes_per_token: int = 4
    default_max_tokens: int = 16
    max_model_len: int = 32768
    max_recorded_requests: int = 1000
    embedding_dim: int = 8
    embedding_model: str | None = None  # "minilm": real all-MiniLM-L6-v2 vectors (the `embed` extra)
    hang_limit_s: float = 300.0
    faults: Faults = field(default_factory=Faults)
    lora_adapters: tuple[str, ...] = ()  # LoRA adapters served from the start (listed with parent)
    allow_runtime_lora: bool = False  # vLLM's VLLM_ALLOW_RUNTIME_LORA_UPDATING: /v1/load_lora_adapter

    def __post_init__(self) -> None:
        if isinstance(self.models, str):
            self.models = (self.models,)
        self.models = tuple(self.models)
        self.lora_adapters = tuple(self.lora_adapters)
        if not self.models:
            raise ValueError("at least one served model name is required")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name in (
            "kv_capacity_blocks", "max_num_seqs", "block_size", "bytes_per_token", "max_num_batched_tokens",
            "stream_interval",
        ):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.embedding_model not in (None, "minilm"):
            raise ValueError("embedding_model must be None or 'minilm'")
        for name in ("prefill_s_per_token", "decode_s_per_token", "overhead_s", "speed"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")
        self.engine_config()  # validates the engine's own bounds

    def engine_config(self) -> EngineConfig:
        return EngineConfig(
            num_gpu_blocks=self.kv_capacity_blocks,
            block_size=self.block_size,
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_model_len=self.max_model_len,
            long_prefill_token_threshold=self.long_prefill_token_threshold,
            costs=self.costs,
            scheduling_policy=self.scheduling_policy,
        )
