"""The engine model of a vLLM V1 replica (``sim.engine``), stepped by hand in model time."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from sim.engine import (
    FINISHED,
    RUNNING,
    WAITING,
    BlockPool,
    Engine,
    EngineConfig,
    EngineCosts,
    EngineRequest,
    StepOutput,
)

BS = 16


def hashes(tag: int, blocks: int) -> list[int]:
    """Distinct chained-looking block hashes of one prompt (equal tag and index: equal block)."""
    return [tag * 100_000 + i for i in range(blocks)]


def req(tag: int, prompt_tokens: int, max_tokens: int = 4, shared: list[int] | None = None) -> EngineRequest:
    hs = (shared or []) + hashes(tag, prompt_tokens // BS - len(shared or []))
    return EngineRequest(hs, prompt_tokens, max_tokens)


def run(engine: Engine, until: float = 1e9, max_steps: int = 100_000) -> float:
    """Step until idle (or ``until``); returns the model time reached."""
    now = 0.0
    for _ in range(max_steps):
        if engine.idle or now >= until:
            return now
        now += engine.step(now).duration_s
    raise AssertionError("engine did not drain")


def test_token_budget_is_respected_every_step() -> None:
    engine = Engine(EngineConfig(num_gpu_blocks=4096, max_num_batched_tokens=512, max_num_seqs=64))
    for i in range(20):
        engine.add(req(i, 16 * (10 + 7 * i), max_tokens=8))
    now = 0.0
    while not engine.idle:
        out = engine.step(now)
        assert 0 < out.num_tokens <= 512
        assert len(engine.running) <= 64
        now += out.duration_s
    assert engine.stats.max_step_tokens == 512  # the budget was the binding limit


def test_long_prompt_is_prefilled_in_chunks() -> None:
    engine = Engine(EngineConfig(num_gpu_blocks=4096, max_num_batched_tokens=1000))
    r = req(1, 2400, max_tokens=2)
    engine.add(r)
    chunks = []
    now = 0.0
    while r.first_token is None:
        out = engine.step(now)
        chunks.append(out.scheduled[r])
        now += out.duration_s
    assert chunks == [1000, 1000, 400]  # three chunks; the last one samples the first token
    assert r.num_output_tokens == 1 and r.first_token == pytest.approx(now)


def test_cold_long_prompt_raises_the_others_inter_token_latency() -> None:
    """Decode steps that share the budget with a 6k-token prefill chunk take longer (vLLM's chunked
    prefill mixes them): the decoding requests' tokens come slower while the long prompt prefills."""

    def itl_of_decoders(with_long: bool) -> float:
        engine = Engine(EngineConfig(num_gpu_blocks=8192, max_num_batched_tokens=2048))
        decoders = [req(i, 160, max_tokens=60) for i in range(4)]
        for d in decoders:
            engine.add(d)
        now = 0.0
        while any(d.first_token is None for d in decoders):
            now += engine.step(now).duration_s
        if with_long:
            engine.add(req(99, 6400, max_tokens=2), now)
        times: list[float] = []
        while not all(d.finished for d in decoders):
            out = engine.step(now)
            now += out.duration_s
            if decoders[0] in out.tokens:
                times.append(now)
        gaps = [b - a for a, b in itertools.pairwise(times)][:5]
        return sum(gaps) / len(gaps)

    quiet, disturbed = itl_of_decoders(False), itl_of_decoders(True)
    assert disturbed > 5 * quiet  # 2048-token chunks at 66 us a token next to 10 ms decode steps


def test_ttft_grows_with_queued_prefill() -> None:
    """A short request behind a cold long one waits for that one's chunks: its TTFT includes them."""
    engine = Engine(EngineConfig(num_gpu_blocks=8192, max_num_batched_tokens=1024))
    long, short = req(1, 8000, max_tokens=2), req(2, 64, max_tokens=2)
    engine.add(long)
    engine.add(short)
    run(engine)
    alone = Engine(EngineConfig(num_gpu_blocks=8192, max_num_batched_tokens=1024))
    s2 = req(2, 64, max_tokens=2)
    alone.add(s2)
    run(alone)
    assert short.first_token is not None and s2.first_token is not None
    assert short.first_token > 5 * s2.first_token


def test_prefix_hit_on_whole_leading_blocks_only_and_last_token_recomputed() -> None:
    engine = Engine(EngineConfig(num_gpu_blocks=256))
    a = req(1, 10 * BS, max_tokens=1)
    engine.add(a)
    run(engine)
    # Same first 6 blocks, then different: 6 blocks hit.
    b = EngineRequest(a.prompt_hashes[:6] + hashes(2, 4), 10 * BS + 5, 1)
    engine.add(b)
    run(engine)
    assert b.cached_tokens == 6 * BS
    # The whole prompt cached: the last block is computed again (the last token must be).
    c = EngineRequest(list(a.prompt_hashes), 10 * BS, 1)
    engine.add(c)
    run(engine)
    assert c.cached_tokens == 9 * BS
    assert engine.stats.prefix_hits == 15 * BS
    assert engine.stats.prefix_queries == 30 * BS + 5


def test_blocks_of_a_running_request_are_never_evicted() -> None:
    engine = Engine(EngineConfig(num_gpu_blocks=40, max_num_batched_tokens=4096))
    a = req(1, 20 * BS, max_tokens=50)  # holds 20+ blocks for 50 steps
    engine.add(a)
    engine.step(0.0)
    assert a.status == RUNNING
    for i in range(30):  # short requests churn through the remaining blocks
        engine.add(req(10 + i, 4 * BS, max_tokens=1))
    now = 0.0
    while a.num_output_tokens < 40:
        now += engine.step(now).duration_s
        assert all(engine.pool.ref.get(h, 0) >= 1 for h in a.prompt_hashes)
    assert engine.pool.evictions > 0  # the churn did evict: only other blocks
    run(engine)
    again = EngineRequest(list(a.prompt_hashes), 20 * BS + 8, 1)
    engine.add(again)
    run(engine)
    assert again.cached_tokens == 20 * BS


def test_idle_cached_blocks_are_evicted_least_recently_freed_first() -> None:
    pool = BlockPool(6)
    pool.take(2)
    assert pool.cache(11) and pool.cache(12)
    pool.release([11, 12])  # request A done: its last block is freed first
    pool.take(2)
    assert pool.cache(21) and pool.cache(22)
    pool.release([21, 22])
    assert list(pool.evictable) == [12, 11, 22, 21]
    pool.touch([11])  # a hit takes 11 out of the free queue
    pool.release([11])  # and freeing it again puts it last
    assert list(pool.evictable) == [12, 22, 21, 11]
    pool.take(2 + 2)  # 2 never-used blocks first, then two evictions from the head
    assert pool.evictions == 2 and list(pool.evictable) == [21, 11]
    assert pool.free == 2 and pool.usage() == pytest.approx(4 / 6)


def test_lru_through_the_engine_keeps_the_recently_used_prefix() -> None:
    engine = Engine(EngineConfig(num_gpu_blocks=30))
    a, b = req(1, 10 * BS, max_tokens=1), req(2, 10 * BS, max_tokens=1)
    for r in (a, b):
        engine.add(r)
        run(engine)
    hit_a = EngineRequest([*list(a.prompt_hashes), 7], 11 * BS, 1)  # touches a: b is now the older one
    engine.add(hit_a)
    run(engine)
    engine.add(req(3, 12 * BS, max_tokens=1))  # needs 12 blocks: evicts from b first
    run(engine)
    a2, b2 = (
        EngineRequest(list(a.prompt_hashes), 10 * BS + 1, 1),
        EngineRequest(list(b.prompt_hashes), 10 * BS + 1, 1),
    )
    for r in (a2, b2):
        engine.add(r)
        run(engine)
    assert a2.cached_tokens == 10 * BS
    assert b2.cached_tokens < 10 * BS


def test_preemption_when_a_running_request_cannot_grow() -> None:
    # 12 blocks; two requests of 4 blocks each decode long answers until their blocks run out.
    engine = Engine(EngineConfig(num_gpu_blocks=12, max_num_batched_tokens=4096))
    first, second = req(1, 4 * BS, max_tokens=60), req(2, 4 * BS, max_tokens=60)
    engine.add(first)
    engine.add(second)
    preempted = []
    now = 0.0
    while not engine.idle:
        out = engine.step(now)
        preempted += out.preempted
        now += out.duration_s
    assert preempted and preempted[0] is second  # the last admitted goes first (FCFS)
    assert engine.stats.preemptions == len(preempted)
    assert second.preemptions >= 1 and second.finished and first.finished
    assert second.num_output_tokens == 60  # recomputed, then went on where it stopped
    assert engine.stats.preempted_queries > 0  # its re-admission is counted apart


def test_max_num_seqs_caps_the_batch_and_fcfs_order() -> None:
    engine = Engine(EngineConfig(num_gpu_blocks=4096, max_num_seqs=3))
    reqs = [req(i, 2 * BS, max_tokens=5) for i in range(7)]
    for r in reqs:
        engine.add(r)
    engine.step(0.0)
    assert [r.status for r in reqs] == [RUNNING] * 3 + [WAITING] * 4
    run(engine)
    firsts = [r.first_token for r in reqs]
    assert firsts == sorted(firsts)  # type: ignore[type-var]


def test_abort_frees_blocks_and_leaves_the_queue() -> None:
    engine = Engine(EngineConfig(num_gpu_blocks=64))
    a, b = req(1, 8 * BS, max_tokens=50), req(2, 4 * BS, max_tokens=50)
    engine.add(a)
    engine.step(0.0)
    engine.add(b)
    engine.abort(a)
    engine.abort(b)
    assert a.status == FINISHED and b.status == FINISHED
    assert engine.idle and engine.pool.free == 64  # a's cached blocks are idle, counted free
    assert engine.pool.held == 0


def test_step_time_follows_the_cost_model() -> None:
    costs = EngineCosts()
    engine = Engine(EngineConfig(num_gpu_blocks=4096, costs=costs))
    r = req(1, 1024, max_tokens=3)
    engine.add(r)
    out = engine.step(0.0)  # one prefill of 1024 tokens at context 0
    pairs = 1024 * (1024 + 1) / 2
    expect = costs.step_overhead_s + 1024 * costs.prefill_s_per_token + pairs * costs.prefill_attn_s_per_pair
    assert out.duration_s == pytest.approx(expect)
    out = engine.step(0.0)  # one decode with 1024 tokens of context
    expect = costs.step_overhead_s + costs.decode_s_per_seq + 1024 * costs.decode_attn_s_per_ctx_token
    assert out.duration_s == pytest.approx(expect)
    assert engine.stats.steps == 2 and engine.stats.prefill_tokens == 1024 and engine.stats.decode_tokens == 1


def test_scaled_costs_make_a_scaled_replay_self_similar() -> None:
    """k x fewer tokens with costs scaled by k (the budget stays 8192 simulated tokens: one step stands for
    k real ones): about the same model time for the same work."""
    k = 8
    real = Engine(EngineConfig(num_gpu_blocks=100_000))
    small = Engine(EngineConfig(num_gpu_blocks=100_000, costs=EngineCosts().scaled(k)))
    real.add(req(1, 16 * 512, max_tokens=8 * k))
    small.add(req(1, 16 * 512 // k, max_tokens=8))
    t_real, t_small = run(real), run(small)
    assert t_small == pytest.approx(t_real, rel=0.15)


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError):
        EngineConfig(max_num_batched_tokens=0)
    with pytest.raises(ValueError):
        EngineCosts(step_overhead_s=-1)
    with pytest.raises(ValueError):
        EngineCosts().scaled(0)
    with pytest.raises(ValueError):
        Engine(EngineConfig()).add(EngineRequest([], 0, 1))


# ---------------------------------------------------------------- scheduling policy (vLLM --scheduling-policy)


def preq(tag: int, blocks: int, priority: int, max_tokens: int = 4) -> EngineRequest:
    return EngineRequest(hashes(tag, blocks), blocks * BS, max_tokens, priority=priority)


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_admission_order_follows_the_policy(policy: str) -> None:
    """One seat: a blocker runs, then a low (5) and two high (1) requests wait. ``priority`` admits the
    high ones first, in arrival order; ``fcfs`` in arrival order, the priority ignored."""
    engine = Engine(EngineConfig(num_gpu_blocks=4096, max_num_seqs=1, scheduling_policy=policy))  # type: ignore[arg-type]
    blocker = preq(0, 2, 0)
    engine.add(blocker, 0.0)
    engine.step(0.0)
    low, high, high2 = preq(1, 2, 5), preq(2, 2, 1), preq(3, 2, 1)
    for k, r in enumerate((low, high, high2)):
        engine.add(r, 0.001 * (k + 1))
    assert list(engine.waiting) == ([high, high2, low] if policy == "priority" else [low, high, high2])
    run(engine)
    order = sorted((blocker, low, high, high2), key=lambda r: r.first_scheduled or 0.0)
    assert order == ([blocker, high, high2, low] if policy == "priority" else [blocker, low, high, high2])


def sixty(tag: int, priority: int) -> EngineRequest:
    """60 prompt tokens: 4 blocks, the last with room for 4 more tokens; a long answer."""
    return EngineRequest(hashes(tag, 3), 60, 10, priority=priority)


def until_preempted(engine: Engine, now: float) -> tuple[list[EngineRequest], StepOutput]:
    """Step until a step preempts; the running list before that step, and the step."""
    for _ in range(20):
        before = list(engine.running)
        out = engine.step(now)
        if out.preempted:
            return before, out
        now += out.duration_s
    raise AssertionError("no preemption")


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
def test_preemption_victim_follows_the_policy(policy: str) -> None:
    """12 blocks; a (0) and b (9) run, then c (0), 4 blocks each: a's 5th block finds none. FCFS
    preempts the last admitted (c); priority the lowest priority (b), though it runs in the middle.
    The victim goes back into the waiting queue: under priority behind a later request of priority 0
    (at its own place in the heap), under FCFS to the front."""
    engine = Engine(EngineConfig(num_gpu_blocks=12, scheduling_policy=policy))  # type: ignore[arg-type]
    a, b, c, d = sixty(1, 0), sixty(2, 9), sixty(3, 0), preq(4, 1, 0)
    engine.add(a, 0.0)
    engine.add(b, 0.0)
    now = engine.step(0.0).duration_s
    engine.add(c, now)
    now += engine.step(now).duration_s
    engine.add(d, now)  # no block free: it waits
    before, out = until_preempted(engine, now)
    assert before == [a, b, c]
    victim = b if policy == "priority" else c
    assert out.preempted == [victim] and victim.status == WAITING
    assert set(out.scheduled) == {a, b, c} - {victim}
    assert list(engine.waiting) == ([d, b] if policy == "priority" else [c, d])


def test_a_victim_already_scheduled_in_the_step_gives_its_tokens_back() -> None:
    """13 blocks; a (9) runs, then b and c (0): a takes the one free block, then b cannot grow and the
    victim is a, already scheduled in this step: it leaves the step, its token goes back to the
    budget (of 2 tokens), and b and c (the one after b too, not skipped) decode."""
    engine = Engine(EngineConfig(num_gpu_blocks=13, scheduling_policy="priority"))
    a, b, c = sixty(1, 9), sixty(2, 0), sixty(3, 0)
    engine.add(a, 0.0)
    now = engine.step(0.0).duration_s
    engine.add(b, now)
    engine.add(c, now)
    while len(a.blocks) < 5:  # until a took the free block
        now += engine.step(now).duration_s
    assert engine.pool.free == 0 and engine.running == [a, b, c]
    engine.cfg = replace(engine.cfg, max_num_batched_tokens=2)  # room for two decodes: a's must go back
    out = engine.step(now)
    assert out.preempted == [a] and a.status == WAITING and a.blocks == []
    assert out.scheduled == {b: 1, c: 1}
    assert engine.running == [b, c]
    run(engine)
    assert a.finished and a.num_output_tokens == 10 and a.preemptions == 1


def test_fcfs_ignores_priorities() -> None:
    """An fcfs engine given priorities runs exactly as with none (vLLM V1 accepts and ignores them)."""

    def firsts(prio: bool) -> list[float | None]:
        engine = Engine(EngineConfig(num_gpu_blocks=10, max_num_seqs=3))
        reqs = [preq(i, 3, (7 - i) if prio else 0, 12) for i in range(8)]
        for k, r in enumerate(reqs):
            engine.add(r, 0.001 * k)
        run(engine)
        assert engine.stats.preemptions > 0  # the KV bound preempted: the victims' order counted too
        return [r.first_token for r in reqs]

    assert firsts(True) == firsts(False)


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="scheduling_policy"):
        EngineConfig(scheduling_policy="lifo")  # type: ignore[arg-type]


def test_a_context_longer_than_the_kv_is_bounded_by_the_kv() -> None:
    """An engine whose KV holds fewer tokens than max_model_len (vLLM would refuse to start) refuses a
    prompt that cannot fit and ends a generation at the KV's length; before, such a prompt waited for
    blocks that never free and ``step`` ran forever."""
    cfg = EngineConfig(num_gpu_blocks=8, block_size=BS, max_model_len=32768)
    assert cfg.context_len == 8 * BS
    engine = Engine(cfg)
    with pytest.raises(ValueError, match="does not fit the engine's context of 128 tokens"):
        engine.add(req(1, 8 * BS))
    assert engine.idle
    long = req(2, 6 * BS, max_tokens=1000)  # fits, but its output reaches the KV's length
    engine.add(long)
    run(engine)
    assert long.status == FINISHED and long.num_tokens == 8 * BS and long.num_output_tokens == 2 * BS
