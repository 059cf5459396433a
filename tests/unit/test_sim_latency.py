"""The latency model and the FIFO admission of the simulated engine (no sockets)."""

from __future__ import annotations

import asyncio

import pytest

from sim.config import SimConfig
from sim.latency import delays, kv_blocks_needed
from sim.scheduler import FifoLimiter


def test_prefill_grows_with_uncached_tokens_and_decode_is_per_token() -> None:
    cfg = SimConfig(prefill_s_per_token=0.001, decode_s_per_token=0.02, overhead_s=0.5, speed=1.0)
    d0, d100 = delays(cfg, 0), delays(cfg, 100)
    assert d0.prefill_s == pytest.approx(0.5)
    assert d100.prefill_s == pytest.approx(0.6)
    assert d100.per_token_s == pytest.approx(0.02)
    assert d100.total(10) == pytest.approx(0.8)


def test_speed_and_slow_factor_scale_every_delay() -> None:
    cfg = SimConfig(prefill_s_per_token=0.001, decode_s_per_token=0.02, overhead_s=0.5, speed=2.0)
    d = delays(cfg, 100, slow_factor=3.0)
    assert d.prefill_s == pytest.approx(0.6 * 6)
    assert d.per_token_s == pytest.approx(0.02 * 6)


def test_speed_zero_means_no_delay() -> None:
    d = delays(SimConfig(speed=0.0), 10_000)
    assert d.none and d.prefill_s == 0.0 and d.per_token_s == 0.0
    assert delays(SimConfig(), 10, slow_factor=0.0).none
    assert not delays(SimConfig(), 10).none


def test_kv_blocks_needed_rounds_up() -> None:
    assert kv_blocks_needed(16, 0, 16) == 1
    assert kv_blocks_needed(16, 1, 16) == 2
    assert kv_blocks_needed(0, 0, 16) == 0


async def test_limiter_admits_up_to_limit_then_queues_fifo() -> None:
    lim = FifoLimiter(2)
    assert lim.try_acquire() and lim.try_acquire()
    assert not lim.try_acquire()
    order: list[int] = []

    async def waiter(i: int) -> None:
        await lim.acquire()
        order.append(i)

    tasks = [asyncio.create_task(waiter(i)) for i in range(3)]
    await asyncio.sleep(0)
    assert (lim.running, lim.waiting, lim.max_waiting_seen) == (2, 3, 3)
    for _ in range(3):
        lim.release()
        await asyncio.sleep(0)
    await asyncio.wait_for(asyncio.gather(*tasks), 1)
    assert order == [0, 1, 2]
    assert (lim.running, lim.waiting) == (2, 0)
    lim.release()
    lim.release()
    assert lim.running == 0
    assert lim.max_running_seen == 2


async def test_a_cancelled_waiter_leaves_the_queue_without_leaking_a_slot() -> None:
    lim = FifoLimiter(1)
    assert lim.try_acquire()
    t1 = asyncio.create_task(lim.acquire())
    t2 = asyncio.create_task(lim.acquire())
    await asyncio.sleep(0)
    t1.cancel()
    await asyncio.gather(t1, return_exceptions=True)
    assert lim.waiting == 1
    lim.release()  # goes to t2, not to the cancelled t1
    await asyncio.wait_for(t2, 1)
    assert lim.running == 1
    lim.release()
    assert lim.running == 0


async def test_cancel_after_handover_gives_the_slot_back() -> None:
    lim = FifoLimiter(1)
    assert lim.try_acquire()
    t = asyncio.create_task(lim.acquire())
    await asyncio.sleep(0)
    lim.release()  # hands the slot to t (its future is done) ...
    t.cancel()  # ... but t is cancelled before it runs
    await asyncio.gather(t, return_exceptions=True)
    assert lim.running == 0
    assert lim.try_acquire()
