"""The mutable state of one simulated replica: its KV cache, scheduler, counters and request log."""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections import deque
from dataclasses import dataclass, fields
from typing import Any

from sim.config import Faults, SimConfig
from sim.engine import Engine, EngineRequest
from sim.engine_loop import EngineLoop
from sim.kvcache import KVCache
from sim.scheduler import FifoLimiter

# vLLM's own buckets for vllm:time_to_first_token_seconds.
TTFT_BUCKETS: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
# vLLM's buckets for the request phase histograms (queue, prefill, decode, e2e) and inter-token latency.
REQUEST_BUCKETS: tuple[float, ...] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITL_BUCKETS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
)  # fmt: skip


@dataclass(slots=True)
class Counters:
    """Monotonic counters since start or the last reset (``/sim/stats``, ``/metrics``)."""

    requests: int = 0  # generation/embedding requests received (including faulted and invalid ones)
    cancelled: int = 0  # the client went away before the answer ended
    completed: int = 0  # answers delivered in full
    dropped: int = 0  # connections closed by the drop_mid_stream_after fault
    errors: int = 0  # answered with an error status (validation or fault)
    prompt_tokens: int = 0  # prompt tokens admitted to the engine (= prefix-cache tokens queried)
    cached_tokens: int = 0  # of which found in the prefix cache
    generation_tokens: int = 0


class Histogram:
    """A tiny cumulative-bucket histogram (cheaper per observation than prometheus_client's)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # last is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def cumulative(self) -> list[tuple[str, int]]:
        out, acc = [], 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            acc += count
            out.append((bound, acc))
        return out

    def reset(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0


class Replica:
    """All state of one replica; the aiohttp handlers only read and update it."""

    def __init__(self, cfg: SimConfig, index: int = 0) -> None:
        # A private copy: replicas built from one shared SimConfig must not share runtime faults.
        self.cfg = dataclasses.replace(cfg, faults=dataclasses.replace(cfg.faults))
        self.index = index
        self.kv = KVCache(cfg.kv_capacity_blocks)  # simple mode
        self.limiter = FifoLimiter(cfg.max_num_seqs)  # simple mode
        self.engine = Engine(cfg.engine_config()) if cfg.mode == "engine" else None
        self.loop: EngineLoop | None = None  # started with the app (it needs the running event loop)
        self.counters = Counters()
        self.ttft = Histogram(TTFT_BUCKETS)
        self.e2e = Histogram(TTFT_BUCKETS)
        self.queue_time = Histogram(REQUEST_BUCKETS)
        self.prefill_time = Histogram(REQUEST_BUCKETS)
        self.decode_time = Histogram(REQUEST_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.kv_blocks_in_use = 0
        self.requests_log: deque[Any] = deque(maxlen=cfg.max_recorded_requests)
        self.traces: deque[dict[str, str]] = deque(maxlen=cfg.max_recorded_requests)  # traceparent seen
        # One record per generation started (``/sim/generations``), updated while it runs.
        self.generations: deque[dict[str, Any]] = deque(maxlen=cfg.max_recorded_requests)
        self.adapters: dict[str, str] = dict.fromkeys(cfg.lora_adapters, "")  # LoRA name -> its path
        self._nonce = itertools.count(1)

    @property
    def faults(self) -> Faults:
        return self.cfg.faults

    @property
    def model_name(self) -> str:
        return self.cfg.models[0]

    def set_faults(self, faults: Faults) -> None:
        self.cfg.faults = faults

    def next_nonce(self) -> int:
        return next(self._nonce)

    def start_generation(
        self, request_id: str | None, path: str, stream: bool, prompt_tokens: int
    ) -> dict[str, Any]:
        """The record of one generation this replica started (a valid request it accepted): the
        ``X-Request-Id`` it came with, its prompt tokens, the tokens generated (counted as sent, so a
        cut stream counts what went out) and how it ended: ``running``, ``completed``, ``aborted``
        (the client went away: what vLLM and SGLang do on a disconnect), ``dropped`` (the
        ``drop_mid_stream_after`` fault) or ``malformed`` (the ``malformed`` fault)."""
        record: dict[str, Any] = {
            "request_id": request_id,
            "path": path,
            "stream": stream,
            "prompt_tokens": prompt_tokens,
            "cached_tokens": 0,
            "completion_tokens": 0,
            "finish_reason": None,
            "outcome": "running",
        }
        self.generations.append(record)
        return record

    def start(self) -> None:
        """Start the engine's step loop (engine mode; a no-op otherwise). Needs a running event loop."""
        if self.engine is not None and self.loop is None:
            cfg = self.cfg
            self.loop = EngineLoop(
                self.engine,
                lambda: cfg.speed * cfg.faults.slow_factor,
                cfg.stream_interval,
                self.finished,
            )
            self.loop.start()

    async def stop(self) -> None:
        if self.loop is not None:
            await self.loop.stop()
            self.loop = None

    def finished(self, req: EngineRequest) -> None:
        """The engine finished a request: its phase times, in vLLM's histograms."""
        if req.first_scheduled is None or req.first_token is None or req.finished_at is None:
            return
        self.queue_time.observe(req.first_scheduled - req.arrival)
        self.prefill_time.observe(req.first_token - req.first_scheduled)
        self.decode_time.observe(req.finished_at - req.first_token)
        if req.num_output_tokens > 1:
            self.itl.observe((req.finished_at - req.first_token) / (req.num_output_tokens - 1))

    @property
    def running(self) -> int:
        return len(self.engine.running) if self.engine is not None else self.limiter.running

    @property
    def waiting(self) -> int:
        return len(self.engine.waiting) if self.engine is not None else self.limiter.waiting

    def kv_usage(self) -> float:
        """Share of KV blocks not free, as vLLM reports it (cached-but-idle blocks count as free)."""
        if self.engine is not None:
            return self.engine.pool.usage()
        return min(1.0, self.kv_blocks_in_use / self.cfg.kv_capacity_blocks)

    def reset(self) -> None:
        """Forget the prefix cache, counters and recorded requests (running requests go on; in engine
        mode the cache is kept while a request still holds blocks, as vLLM's reset_prefix_cache)."""
        self.kv.clear()
        if self.engine is not None:
            self.engine.pool.clear()
            self.engine.pool.evictions = 0
            self.engine.reset_stats()
        self.counters = Counters()
        for h in (self.ttft, self.e2e, self.queue_time, self.prefill_time, self.decode_time, self.itl):
            h.reset()
        self.requests_log.clear()
        self.traces.clear()
        self.generations.clear()
        self.limiter.reset_peaks()

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self.counters, f.name) for f in fields(Counters)}
        out.update(
            mode=self.cfg.mode,
            running=self.running,
            waiting=self.waiting,
            max_running_seen=self.limiter.max_running_seen,
            max_waiting_seen=self.limiter.max_waiting_seen,
            kv_cached_blocks=len(self.kv),
            kv_capacity_blocks=self.cfg.kv_capacity_blocks,
            kv_evictions=self.kv.evictions,
            kv_usage=self.kv_usage(),
            faults=self.faults.to_json(),
        )
        if self.engine is not None:
            pool, st = self.engine.pool, self.engine.stats
            out.update(
                kv_cached_blocks=pool.cached(),
                kv_evictions=pool.evictions,
                preemptions=st.preemptions,
                busy_s=st.busy_s,
                steps=st.steps,
                prefill_tokens=st.prefill_tokens,
                decode_tokens=st.decode_tokens,
                preempted_queries=st.preempted_queries,
                preempted_hits=st.preempted_hits,
                max_step_tokens=st.max_step_tokens,
                paced_s=self.loop.paced_s if self.loop else 0.0,
                late_s=self.loop.late_s if self.loop else 0.0,
            )
        return out
