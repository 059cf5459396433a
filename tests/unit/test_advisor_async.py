"""Advice priced off the event loop: first advice waits for its pricing, later ones are answered from the
cached findings while a new pricing runs, one pricing at a time, on a snapshot nothing writes."""

from __future__ import annotations

import asyncio
import random
import threading
import time

import numpy as np
import pytest

import cache.advisor.advisor as advisor_mod
from cache.advisor.advisor import Advisor
from tests.unit.test_advisor import feed, policy, timestamp_first

T0 = 1e9


def advisor() -> Advisor:
    return Advisor.from_policy(policy(window_s=7 * 86_400), clock=lambda: T0 + 5000)


def gated_price(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, list[int], list[int]]:
    """``price`` held at a gate, recording how many run at once and the requests each priced."""
    gate, running, peak, priced = threading.Event(), [0], [0], []
    lock = threading.Lock()
    real = advisor_mod.price

    def slow(snap, p):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        try:
            assert gate.wait(10), "the test never opened the gate"
            priced.append(snap.requests)
            return real(snap, p)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(advisor_mod, "price", slow)
    return gate, peak, priced


def findings_of(doc: dict) -> list[dict]:
    return [f for t in doc["tenants"] for m in t["models"] for f in m["findings"]]


async def test_first_advice_waits_then_cached_answers_while_a_new_pricing_runs(monkeypatch) -> None:
    gate, _, priced = gated_price(monkeypatch)
    adv = advisor()
    bodies = timestamp_first(random.Random(1), 200)
    feed(adv, "t", bodies[:100], t0=T0)
    first = asyncio.ensure_future(adv.advice_async("t"))
    await asyncio.sleep(0.05)
    assert not first.done()  # never priced in this window: it waits for its pricing
    loop_ticks = 0
    while not first.done():  # ... off the loop: this coroutine keeps running meanwhile
        loop_ticks += 1
        if loop_ticks == 3:
            gate.set()
        await asyncio.sleep(0.01)
    doc = first.result()
    (model,) = doc["tenants"][0]["models"]
    assert model["priced"] == {"requests": 100, "at": model["priced"]["at"], "computing": False}
    assert [f["kind"] for f in findings_of(doc)][:1] == ["variable_prefix"]

    # Fresh: answered from the cache, no pricing.
    again = await adv.advice_async("t")
    assert findings_of(again) == findings_of(doc) and priced == [100]

    # 50 % more requests: stale. The answer comes at once from the cached findings, a pricing runs.
    gate.clear()
    feed(adv, "t", bodies[100:150], t0=T0 + 100)
    started = time.perf_counter()
    stale = await adv.advice_async("t")
    # at once, not after the pricing, which the closed gate holds for 10 s: the bound is halfway (1 s is
    # a few hundred milliseconds of CPU to a test worker that a loaded machine gives 5 % of a core)
    assert time.perf_counter() - started < 5.0
    (model,) = stale["tenants"][0]["models"]
    assert model["priced"]["requests"] == 100 and model["priced"]["computing"] is True
    assert model["observed"]["requests"] == 150
    assert findings_of(stale) == findings_of(doc)
    # A second request meanwhile joins the pricing under way instead of starting one.
    await adv.advice_async("t")
    gate.set()
    while adv._computing:
        await asyncio.sleep(0.01)
    fresh = await adv.advice_async("t")
    (model,) = fresh["tenants"][0]["models"]
    assert model["priced"]["requests"] == 150 and model["priced"]["computing"] is False
    assert priced == [100, 150]


async def test_one_pricing_at_a_time_and_metrics_never_wait(monkeypatch) -> None:
    gate, peak, priced = gated_price(monkeypatch)
    adv = advisor()
    for tenant in ("a", "b", "c"):
        feed(adv, tenant, timestamp_first(random.Random(tenant), 60), t0=T0)
    # /metrics' call: nothing priced yet, it answers without findings and without waiting.
    doc = await adv.advice_async(wait=False)
    assert findings_of(doc) == []
    assert [m["priced"] for t in doc["tenants"] for m in t["models"]] == [
        {"requests": None, "at": None, "computing": True}
    ] * 3
    waiting = asyncio.ensure_future(adv.advice_async())
    await asyncio.sleep(0.05)
    gate.set()
    doc = await waiting
    assert peak == [1]  # three (tenant, model)s, one replay at a time
    assert sorted(priced) == [60, 60, 60]
    assert {t["tenant"] for t in doc["tenants"] if t["models"][0]["findings"]} == {"a", "b", "c"}


async def test_the_snapshot_a_pricing_reads_is_not_written_by_observation(monkeypatch) -> None:
    gate, _, _ = gated_price(monkeypatch)
    adv = advisor()
    bodies = timestamp_first(random.Random(4), 300)
    feed(adv, "t", bodies[:100], t0=T0)
    (snap,) = adv.snapshots("t")
    before = [(o.ts, o.hashes.copy()) for o in snap.recent]
    pricing = asyncio.ensure_future(adv.advice_async("t"))
    await asyncio.sleep(0.02)
    feed(adv, "t", bodies[100:300], t0=T0 + 100)  # the ring (256) drops its oldest while the worker reads
    gate.set()
    await pricing
    assert len(snap.recent) == 100 and snap.requests == 100
    assert all(
        o.ts == ts and np.array_equal(o.hashes, h) for o, (ts, h) in zip(snap.recent, before, strict=True)
    )
    assert all(not o.hashes.flags.writeable and not o.starts.flags.writeable for o in snap.recent)
