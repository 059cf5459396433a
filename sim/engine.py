"""An engine model of one vLLM V1 replica: continuous batching in steps, paged KV with a prefix cache.

Pure and synchronous: ``Engine.step()`` schedules one step, returns what it ran and how long the GPU
would take for it (model seconds); ``sim.engine_loop`` runs steps in real time. Read from vLLM's
own sources (``vllm/v1/core/sched/scheduler.py``, ``kv_cache_manager.py``, ``block_pool.py``):

- **Scheduling** (``Scheduler.schedule``). A step has a token budget (``max_num_batched_tokens``,
  8192). RUNNING requests first, in order: each asks for ``num_tokens - num_computed_tokens`` tokens
  (1 when decoding, the rest of its prompt when its prefill was chunked), cut to the budget. If its KV
  blocks cannot grow, the last running request is preempted (recompute: its blocks are freed, its
  computed tokens reset, it goes back to the head of the waiting queue), until the request fits or is
  itself preempted. WAITING requests next, only if nothing was preempted in this step, while the
  budget lasts and fewer than ``max_num_seqs`` run: the prefix cache gives the request its longest run
  of whole leading blocks (at most ``num_tokens - 1`` tokens: the last token is always computed), the
  rest of its tokens are its prefill, chunked to what is left of the budget; a request whose blocks do
  not fit stops admission (FCFS). A prefill that completes samples the first token in the same step.
- **KV blocks** (``BlockPool``). ``num_gpu_blocks`` blocks of ``block_size`` tokens. A running
  request holds its blocks (reference counts); a full prompt block is cached under its chained hash as
  soon as it is scheduled, so later requests hit it even while the first one still runs. Freed blocks
  of a finished or preempted request go to the tail of the free queue in reverse order (its last block
  is evicted first); a new block is taken from the head: never-used blocks first, then the least
  recently freed cached block, whose hash is then evicted. A hit takes a cached block out of the free
  queue. ``kv_cache_usage`` = 1 - free / total, free counting cached idle blocks, as vLLM reports it.
- **Scheduling policy** (``--scheduling-policy``, ``EngineConfig.scheduling_policy``), read from vLLM's
  ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``, at 00024d3), ``request_queue.py``
  (``PriorityRequestQueue``) and ``vllm/v1/request.py`` (``Request.__lt__``). ``fcfs`` (the default):
  as above. ``priority``: the waiting queue is a heap ordered by (``priority``, arrival time, then
  request id; here: the order added), lower values first; admission takes its head while it fits and
  stops at the first that does not (no skipping, as FCFS); a preempted request goes back into the heap
  at its own (priority, arrival) place, not to the front; the preemption victim is
  ``max(running, key=(priority, arrival))``, the lowest-priority, latest-arrived running request,
  wherever it is in the running list: one already scheduled in this step gives its tokens back to the
  budget and the loop's index steps back over it (vLLM does the same). A waiting request never
  preempts a running one to be admitted (vLLM V1 preempts only when a running request cannot grow;
  SGLang does, past ``--priority-scheduling-preemption-threshold``: not modelled). The request's
  ``priority`` is the body's integer field (default 0). An ``fcfs`` engine takes a request with
  ``priority != 0`` and ignores it: vLLM V1's input processor and ``AsyncLLM.add_request``
  (``vllm/v1/engine/input_processor.py`` at 009daae, ``async_llm.py`` at 00080ee) do not check it.
  Older engines answered 400: V0's ``LLMEngine.add_request`` raised "Got priority N but Priority
  scheduling is not enabled.", and V1 before its priority scheduling (vllm-project/vllm#19057) raised
  "V1 does not support priority yet." whatever the policy; vllm-project/vllm#23043, which would have
  brought the first check to V1, was closed unmerged.
- **Departures**, on purpose: output tokens are not hashed (the simulator's answer text never appears
  in a later prompt, so caching it could only crowd the cache), a block computed twice by concurrent
  requests is kept once, no null block, and the prefix-cache counters count a request once when it is
  admitted (vLLM's own counter records every look-up of a request stuck at the head of the queue).

**Step time** = ``step_overhead_s`` + ``prefill_s_per_token`` x prefill tokens + ``decode_s_per_seq``
x decoding requests + ``decode_attn_s_per_ctx_token`` x the context the decoding requests hold +
``prefill_attn_s_per_pair`` x (query, key) pairs of the prefill chunks. Defaults: Llama-3-8B (bf16,
TP 1) on one A100-80GB SXM, from Vidur's published profile of that model on that GPU
(microsoft/vidur ``data/profiling/compute/a100/meta-llama/Meta-Llama-3-8B/mlp.csv``; Agrawal et al.,
"Vidur: A Large-Scale Simulation Framework for LLM Inference", MLSys 2024): the 32 layers' linear
operators (projections, MLP, norms, RoPE) plus the embedding take 9.7 ms for one token (the weights are
read once per step whatever the batch: the fixed overhead), 11.2 ms for 64 and 19.5 ms for 256 tokens
(about 30 us per decoding sequence), and 66 us per token from 512 to 32768 tokens (prefill). Attention
is derived from the same model's shape: decode reads 128 KiB of KV per context token (32 layers x 8 KV
heads x 128 x 2 bytes x K and V) at about 1.4 TB/s of the A100's 2.0 TB/s, 90 ns per token; a prefill
chunk costs 4 x 32 layers x 4096 = 524,288 FLOPs per (query, key) pair at about 180 TFLOP/s, 2.9 ns a
pair. ``EngineCosts.scaled(k)`` gives the costs of the same engine when one simulated token stands for
``k`` real ones (trace replay at reduced token counts): per-token and per-step costs x k, attention x k².
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
from collections import OrderedDict, deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

WAITING, RUNNING, FINISHED = 0, 1, 2
POLICIES = ("fcfs", "priority")


@dataclass(frozen=True, slots=True)
class EngineCosts:
    """Model seconds of one engine step, by what it computes (see the module header for the source)."""

    step_overhead_s: float = 0.0097
    prefill_s_per_token: float = 66e-6
    decode_s_per_seq: float = 30e-6
    decode_attn_s_per_ctx_token: float = 90e-9
    prefill_attn_s_per_pair: float = 2.9e-9

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")

    def scaled(self, k: float) -> EngineCosts:
        """The same engine when one simulated token stands for ``k`` real tokens (and one step for ``k``
        real steps): linear costs x k, attention (quadratic in tokens) x k²."""
        if k <= 0:
            raise ValueError("the token scale must be > 0")
        return replace(
            self,
            step_overhead_s=self.step_overhead_s * k,
            prefill_s_per_token=self.prefill_s_per_token * k,
            decode_s_per_seq=self.decode_s_per_seq * k,
            decode_attn_s_per_ctx_token=self.decode_attn_s_per_ctx_token * k * k,
            prefill_attn_s_per_pair=self.prefill_attn_s_per_pair * k * k,
        )


@dataclass(slots=True, eq=False)
class EngineRequest:
    """One request inside the engine. ``prompt_hashes``: chained hashes of its full prompt blocks."""

    prompt_hashes: Sequence[int]
    num_prompt_tokens: int
    max_tokens: int
    arrival: float = 0.0  # model time it was added
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    status: int = WAITING
    cached_tokens: int = -1  # prefix-cache hit at its first admission (-1: not admitted yet)
    preemptions: int = 0
    first_scheduled: float | None = None
    first_token: float | None = None
    finished_at: float | None = None
    blocks: list[int | None] = field(default_factory=list)  # a cached hash, or None (an uncached block)
    num_cached_blocks: int = 0  # leading prompt blocks already looked at for caching
    aborted: bool = False
    priority: int = 0  # the body's ``priority``: lower first under the ``priority`` policy (vLLM's sign)
    seq: int = 0  # the order it was added (ties of equal priority and arrival)

    @property
    def num_tokens(self) -> int:
        return self.num_prompt_tokens + self.num_output_tokens

    @property
    def finished(self) -> bool:
        return self.status == FINISHED


class FcfsQueue:
    """vLLM's ``FCFSRequestQueue``: a deque; a preempted request goes back to its front."""

    __slots__ = ("_q",)

    def __init__(self) -> None:
        self._q: deque[EngineRequest] = deque()

    def add(self, req: EngineRequest) -> None:
        self._q.append(req)

    def peek(self) -> EngineRequest:
        return self._q[0]

    def pop(self) -> EngineRequest:
        return self._q.popleft()

    def prepend(self, req: EngineRequest) -> None:
        self._q.appendleft(req)

    def remove(self, req: EngineRequest) -> None:
        self._q.remove(req)  # ValueError when absent, as a deque's

    def __len__(self) -> int:
        return len(self._q)

    def __iter__(self) -> Iterator[EngineRequest]:
        return iter(self._q)


class PriorityQueue:
    """vLLM's ``PriorityRequestQueue``: a heap by (priority, arrival, order added); "prepend" is an add."""

    __slots__ = ("_heap",)

    def __init__(self) -> None:
        self._heap: list[tuple[int, float, int, EngineRequest]] = []

    def add(self, req: EngineRequest) -> None:
        heapq.heappush(self._heap, (req.priority, req.arrival, req.seq, req))

    def peek(self) -> EngineRequest:
        return self._heap[0][3]

    def pop(self) -> EngineRequest:
        return heapq.heappop(self._heap)[3]

    prepend = add

    def remove(self, req: EngineRequest) -> None:
        for k, entry in enumerate(self._heap):
            if entry[3] is req:
                self._heap[k] = self._heap[-1]
                self._heap.pop()
                heapq.heapify(self._heap)
                return
        raise ValueError("not waiting")

    def __len__(self) -> int:
        return len(self._heap)

    def __iter__(self) -> Iterator[EngineRequest]:
        """In scheduling order (as vLLM's: a sorted copy)."""
        return (entry[3] for entry in sorted(self._heap, key=lambda e: e[:3]))


class BlockPool:
    """``capacity`` KV blocks: uncached free blocks, cached blocks (held or idle) and their free queue."""

    __slots__ = ("capacity", "evictable", "evictions", "fresh", "held", "ref")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("the KV capacity must be at least one block")
        self.capacity = capacity
        self.fresh = capacity  # free blocks without a hash (taken first, as vLLM prepends them)
        self.held = 0  # uncached blocks held by requests
        self.ref: dict[int, int] = {}  # cached hash -> requests holding it (0: idle, in ``evictable``)
        self.evictable: OrderedDict[int, None] = OrderedDict()  # idle cached blocks, head evicted first
        self.evictions = 0

    @property
    def free(self) -> int:
        return self.fresh + len(self.evictable)

    def usage(self) -> float:
        return 1.0 - self.free / self.capacity

    def cached(self) -> int:
        return len(self.ref)

    def longest_hit(self, hashes: Sequence[int], max_blocks: int) -> int:
        """Leading blocks of ``hashes`` cached (held or idle), at most ``max_blocks``."""
        ref = self.ref
        n = 0
        for h in hashes:
            if n >= max_blocks or h not in ref:
                break
            n += 1
        return n

    def take(self, n: int) -> None:
        """``n`` new uncached blocks for a request (the caller checked ``n <= free``)."""
        f = min(n, self.fresh)
        self.fresh -= f
        rest = n - f
        if rest:
            ev, ref = self.evictable, self.ref
            for _ in range(rest):
                h, _ = ev.popitem(last=False)
                del ref[h]
            self.evictions += rest
        self.held += n

    def touch(self, hashes: Sequence[int]) -> None:
        """A request now holds these cached blocks (a prefix hit)."""
        ref, ev = self.ref, self.evictable
        for h in hashes:
            r = ref[h]
            if r == 0:
                del ev[h]
            ref[h] = r + 1

    def cache(self, h: int) -> bool:
        """An uncached held block became full with hash ``h``: cache it (False if ``h`` is cached already)."""
        if h in self.ref:
            return False
        self.ref[h] = 1
        self.held -= 1
        return True

    def release(self, blocks: Sequence[int | None]) -> None:
        """Free a request's blocks, last first (its tail is evicted before its head)."""
        ref, ev = self.ref, self.evictable
        for h in reversed(blocks):
            if h is None:
                self.held -= 1
                self.fresh += 1
                continue
            r = ref[h] - 1
            ref[h] = r
            if r == 0:
                ev[h] = None

    def clear(self) -> bool:
        """Forget every idle cached block (vLLM's reset_prefix_cache); False while a request holds blocks."""
        if self.held or any(self.ref.values()):
            return False
        self.fresh = self.capacity
        self.ref.clear()
        self.evictable.clear()
        return True


@dataclass(slots=True)
class EngineStats:
    """Monotonic counters of the engine (reset with ``Engine.reset_stats``)."""

    steps: int = 0
    busy_s: float = 0.0  # model seconds of all steps
    prefill_tokens: int = 0
    decode_tokens: int = 0
    preemptions: int = 0
    prefix_queries: int = 0  # prompt tokens of admitted requests (first admission)
    prefix_hits: int = 0
    preempted_queries: int = 0  # the same for re-admissions after a preemption
    preempted_hits: int = 0
    max_step_tokens: int = 0


@dataclass(slots=True)
class StepOutput:
    """What one step ran and what came out of it."""

    duration_s: float
    scheduled: dict[EngineRequest, int]  # request -> tokens computed for it in this step
    tokens: list[EngineRequest]  # requests that produced one output token in this step
    finished: list[EngineRequest]
    preempted: list[EngineRequest]
    first_tokens: list[EngineRequest]

    @property
    def num_tokens(self) -> int:
        return sum(self.scheduled.values())


def context_len(max_model_len: int, num_gpu_blocks: int, block_size: int) -> int:
    """The longest request (prompt + output) one engine can hold: ``max_model_len``, bounded by its KV
    (vLLM refuses to start where ``max_model_len`` exceeds the KV cache's tokens; the model bounds the
    length instead, so a small-KV configuration serves rather than leave a request waiting for blocks
    that can never free: before, a prompt longer than every block waited, and was stepped, forever)."""
    return min(max_model_len, num_gpu_blocks * block_size)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    num_gpu_blocks: int = 2048
    block_size: int = 16
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 32768
    long_prefill_token_threshold: int = 0  # vLLM's knob: cap one request's prefill chunk (0: no cap)
    costs: EngineCosts = field(default_factory=EngineCosts)
    scheduling_policy: Literal["fcfs", "priority"] = "fcfs"  # vLLM's --scheduling-policy

    def __post_init__(self) -> None:
        for name in (
            "num_gpu_blocks",
            "block_size",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.long_prefill_token_threshold < 0:
            raise ValueError("long_prefill_token_threshold must be >= 0")
        if self.scheduling_policy not in POLICIES:
            raise ValueError(f"scheduling_policy must be one of {POLICIES}, got {self.scheduling_policy!r}")

    @property
    def context_len(self) -> int:
        return context_len(self.max_model_len, self.num_gpu_blocks, self.block_size)


class Engine:
    """The scheduler and KV cache of one replica. Time is passed in (model seconds), never read."""

    def __init__(self, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.pool = BlockPool(cfg.num_gpu_blocks)
        self.priority = cfg.scheduling_policy == "priority"
        self.waiting: FcfsQueue | PriorityQueue = PriorityQueue() if self.priority else FcfsQueue()
        self.running: list[EngineRequest] = []
        self.stats = EngineStats()
        self._seq = itertools.count()

    # -- requests -------------------------------------------------------------------------------------
    def add(self, req: EngineRequest, now: float = 0.0) -> None:
        if req.num_prompt_tokens < 1 or req.max_tokens < 1:
            raise ValueError("a request needs at least one prompt token and one output token")
        if req.num_prompt_tokens >= self.cfg.context_len:
            raise ValueError(
                f"a prompt of {req.num_prompt_tokens} tokens does not fit the engine's context of "
                f"{self.cfg.context_len} tokens (max_model_len, bounded by its KV blocks)"
            )
        req.arrival = now
        req.seq = next(self._seq)
        req.status = WAITING
        self.waiting.add(req)

    def abort(self, req: EngineRequest) -> None:
        """The client went away: drop the request wherever it is and free its blocks."""
        if req.status == FINISHED:
            return
        req.aborted = True
        if req.status == RUNNING:
            self.running.remove(req)
            self.pool.release(req.blocks)
            req.blocks = []
        else:
            with contextlib.suppress(ValueError):  # already gone (finished between two steps)
                self.waiting.remove(req)
        req.status = FINISHED

    @property
    def idle(self) -> bool:
        return not self.running and not self.waiting

    def reset_stats(self) -> None:
        self.stats = EngineStats()

    # -- one step -------------------------------------------------------------------------------------
    def step(self, now: float = 0.0, time_factor: float = 1.0) -> StepOutput:
        """Schedule one step at time ``now``, account its tokens, and say how long it takes (model s).

        The step's tokens are produced at ``now + duration_s * time_factor`` (the clock of ``now`` may
        run ``time_factor`` times model time: the real-time loop passes its speed); first tokens and
        finishing times carry that time."""
        scheduled, preempted = self._schedule(now)
        duration = self._duration(scheduled)
        end = now + duration * time_factor
        tokens: list[EngineRequest] = []
        finished: list[EngineRequest] = []
        first: list[EngineRequest] = []
        st = self.stats
        max_len = self.cfg.context_len
        for req, n in scheduled.items():
            req.num_computed_tokens += n
            if req.num_computed_tokens < req.num_tokens:
                continue  # a prefill chunk: no token yet
            req.num_output_tokens += 1
            tokens.append(req)
            if req.first_token is None:
                req.first_token = end
                first.append(req)
            if req.num_output_tokens >= req.max_tokens or req.num_tokens >= max_len:
                finished.append(req)
        for req in finished:
            self.running.remove(req)
            self.pool.release(req.blocks)
            req.blocks = []
            req.status = FINISHED
            req.finished_at = end
        st.steps += 1
        st.busy_s += duration
        total = sum(scheduled.values())
        st.max_step_tokens = max(st.max_step_tokens, total)
        return StepOutput(duration, scheduled, tokens, finished, preempted, first)

    def _duration(self, scheduled: dict[EngineRequest, int]) -> float:
        if not scheduled:
            return 0.0
        c = self.cfg.costs
        prefill = decodes = ctx = 0
        pairs = 0.0
        for req, n in scheduled.items():
            before = req.num_computed_tokens
            if before >= req.num_prompt_tokens and n == 1:
                decodes += 1
                ctx += before
            else:
                prefill += n
                pairs += n * (before + (n + 1) / 2)
        st = self.stats
        st.prefill_tokens += prefill
        st.decode_tokens += decodes
        return (
            c.step_overhead_s
            + c.prefill_s_per_token * prefill
            + c.decode_s_per_seq * decodes
            + c.decode_attn_s_per_ctx_token * ctx
            + c.prefill_attn_s_per_pair * pairs
        )

    def _schedule(self, now: float) -> tuple[dict[EngineRequest, int], list[EngineRequest]]:
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        threshold = cfg.long_prefill_token_threshold
        scheduled: dict[EngineRequest, int] = {}
        preempted: list[EngineRequest] = []
        running = self.running
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.num_tokens - req.num_computed_tokens
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget, cfg.context_len - 1 - req.num_computed_tokens)
            if n <= 0:
                i += 1
                continue
            fits = True
            while not self._grow(req, n):
                if self.priority:  # the lowest priority, the latest arrived, wherever it runs
                    victim = max(running, key=_rank)
                    v = running.index(victim)
                    del running[v]
                    if v < i:  # already looked at in this step: its tokens go back to the budget
                        i -= 1
                        budget += scheduled.pop(victim, 0)
                else:
                    victim = running.pop()  # the lowest priority under FCFS: the last one admitted
                self._preempt(victim)
                preempted.append(victim)
                if victim is req:
                    fits = False
                    break
            if not fits:
                break
            scheduled[req] = n
            budget -= n
            i += 1
        if not preempted:
            self._admit(scheduled, budget, now)
        return scheduled, preempted

    def _admit(self, scheduled: dict[EngineRequest, int], budget: int, now: float) -> None:
        cfg, pool, st = self.cfg, self.pool, self.stats
        bs = cfg.block_size
        threshold = cfg.long_prefill_token_threshold
        waiting = self.waiting
        while waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            req = waiting.peek()
            hit = pool.longest_hit(req.prompt_hashes, (req.num_tokens - 1) // bs)
            computed = hit * bs
            n = req.num_tokens - computed
            if 0 < threshold < n:
                n = threshold
            n = min(n, budget)
            hit_hashes = req.prompt_hashes[:hit]
            # Blocks to take: the new ones, plus the hit blocks now idle (they leave the free queue).
            need = -(-(computed + n) // bs) - hit
            idle = sum(1 for h in hit_hashes if pool.ref[h] == 0)
            if need + idle > pool.free:
                break
            waiting.pop()
            pool.touch(hit_hashes)
            req.blocks = list(hit_hashes)
            req.num_cached_blocks = hit
            pool.take(need)
            req.blocks.extend([None] * need)
            req.num_computed_tokens = computed
            self._cache_full(req, computed + n)
            if req.cached_tokens < 0:
                req.cached_tokens = computed
                st.prefix_queries += req.num_tokens
                st.prefix_hits += computed
            else:
                st.preempted_queries += req.num_tokens
                st.preempted_hits += computed
            if req.first_scheduled is None:
                req.first_scheduled = now
            req.status = RUNNING
            self.running.append(req)
            scheduled[req] = n
            budget -= n

    def _grow(self, req: EngineRequest, n: int) -> bool:
        """Blocks for ``n`` more tokens of a running request; False if the pool cannot give them."""
        need = -(-(req.num_computed_tokens + n) // self.cfg.block_size) - len(req.blocks)
        if need > 0:
            if need > self.pool.free:
                return False
            self.pool.take(need)
            req.blocks.extend([None] * need)
        self._cache_full(req, req.num_computed_tokens + n)
        return True

    def _cache_full(self, req: EngineRequest, tokens: int) -> None:
        """Cache the prompt blocks that ``tokens`` scheduled tokens fill (hashes of output blocks: none)."""
        full = min(min(tokens, req.num_prompt_tokens) // self.cfg.block_size, len(req.prompt_hashes))
        start = req.num_cached_blocks
        if full <= start:
            return
        blocks, hashes, pool = req.blocks, req.prompt_hashes, self.pool
        for j in range(start, full):
            if blocks[j] is None and pool.cache(hashes[j]):
                blocks[j] = hashes[j]
        req.num_cached_blocks = full

    def _preempt(self, req: EngineRequest) -> None:
        self.pool.release(req.blocks)
        req.blocks = []
        req.num_computed_tokens = 0
        req.num_cached_blocks = 0
        req.status = WAITING
        req.preemptions += 1
        self.stats.preemptions += 1
        self.waiting.prepend(req)


def _rank(req: EngineRequest) -> tuple[int, float]:
    """vLLM's victim key: ``max`` of it is the lowest-priority, latest-arrived request."""
    return (req.priority, req.arrival)
