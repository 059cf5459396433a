"""Budget periods, resets and counting on an injectable clock (no sleep for a day): a UTC day and month
reset at their edge, a rolling window frees its oldest slot ``window_s`` after it began, a process
without Redis reads a period from the ledger once and then counts its own rows, soft limits are crossed
by exactly one row, and the policy refuses a budget it could not enforce."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from cache.billing.budgets import LOCAL_REFRESH_MS, Added, Budget, BudgetCounters, budgets_of, reset_ms, spans
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import ModelPrices, RequestUsage, Rules, bill
from config.loader import PolicyError, parse_policy
from gateway.pipeline.budgets import exceeded

PRICES = ModelPrices(input_micros_per_1m=1_000_000, output_micros_per_1m=2_000_000)  # 1 and 2 µ$ a token


def ms(*args: int) -> int:
    return int(datetime(*args, tzinfo=UTC).timestamp() * 1000)


def row(n: int, ts_ms: int, tenant: str = "acme", model: str = "small", prompt: int = 100, out: int = 50):
    return bill(
        RequestUsage(prompt, out), PRICES, Rules(), None, "upstream",
        request_id=f"r{n}", tenant=tenant, model=model, ts_ms=ts_ms,
    )  # fmt: skip


class Clock:
    def __init__(self, t_ms: int) -> None:
        self.t = t_ms / 1000

    def __call__(self) -> float:
        return self.t

    def at(self, t_ms: int) -> None:
        self.t = t_ms / 1000


def test_day_and_month_end_at_their_utc_edge() -> None:
    day = Budget("acme", "d", "spend", 1000, "day")
    month = Budget("acme", "m", "spend", 1000, "month")
    now = ms(2026, 1, 31, 23, 59, 30)
    (d,) = spans(day, now)
    (m,) = spans(month, now)
    assert (d.start_ms, d.end_ms) == (ms(2026, 1, 31), ms(2026, 2, 1))
    assert (m.start_ms, m.end_ms) == (ms(2026, 1, 1), ms(2026, 2, 1))
    assert spans(month, ms(2026, 12, 15))[0].end_ms == ms(2027, 1, 1)
    assert reset_ms(day, [(d, 5000)], now) == ms(2026, 2, 1)


def test_a_rolling_window_frees_the_slots_that_must_fall_out() -> None:
    b = Budget("acme", "r", "spend", 100, "rolling", window_ms=60_000)
    now = 1_000_000_000_000 + 30_500  # inside a 1 s slot
    window = spans(b, now)
    assert len(window) == 60 and b.slot_ms == 1000
    assert window[-1].start_ms <= now < window[-1].end_ms
    values = [0] * 60
    values[10], values[20], values[59] = 60, 50, 10  # 120 counted, limit 100
    counted = list(zip(window, values, strict=True))
    # Dropping slot 10 leaves 60 < 100: free when slot 10 leaves the window.
    assert reset_ms(b, counted, now) == window[10].start_ms + 60_000


async def test_local_counts_read_the_ledger_once_then_count_rows_and_reset_with_the_day() -> None:
    ledger = await SqliteLedger.open(":memory:")
    try:
        t0 = ms(2026, 3, 10, 12)
        for i in range(3):  # before the process started: 3 x (100 + 2 x 50) = 600 µ$
            await ledger.record(row(i, t0 - 3600_000))
        await ledger.record(row(9, ms(2026, 3, 9, 12)))  # yesterday: not this day's
        await ledger.record(row(8, t0 - 60_000, tenant="other"))
        clock = Clock(t0)
        c = BudgetCounters(ledger=ledger, clock=clock)
        b = Budget("acme", "daily", "spend", 1000, "day")
        (s,) = await c.spent([b])
        assert s.spent == 600 and not s.exhausted
        moved = await c.add([b], row(3, t0))
        assert moved == [Added(b, 600, 800)] and moved[0].crossed() == [80]
        moved = await c.add([b], row(4, t0))
        assert moved == [Added(b, 800, 1000)] and moved[0].crossed() == [100]
        (s,) = await c.spent([b])
        assert s.exhausted and s.resets_ms == ms(2026, 3, 11)
        err = exceeded([s], clock_ms(clock), "USD")
        assert err.status == 429 and err.code == "budget_exceeded"
        assert err.headers["Retry-After"] == str(12 * 3600)
        assert "2026-03-11T00:00:00+00:00" in err.message and "0.001000 USD of 0.001000 USD" in err.message
        clock.at(ms(2026, 3, 11, 0, 0, 1))  # the next UTC day: nothing counted yet
        (s,) = await c.spent([b])
        assert s.spent == 0 and not s.exhausted
    finally:
        await ledger.close()


def clock_ms(clock: Clock) -> int:
    return int(clock() * 1000)


def test_soft_limits_are_crossed_once() -> None:
    b = Budget("acme", "m", "spend", 1000, "month", warn_at_pct=(50, 80))
    assert Added(b, 0, 499).crossed() == []
    assert Added(b, 499, 500).crossed() == [50]
    assert Added(b, 500, 900).crossed() == [80]
    assert Added(b, 700, 1200).crossed() == [80, 100]
    assert Added(b, 1000, 1200).crossed() == []


async def test_a_rolling_token_budget_forgets_rows_older_than_its_window() -> None:
    clock = Clock(ms(2026, 5, 1, 8))
    c = BudgetCounters(clock=clock)
    b = Budget("acme", "hourly", "tokens", 400, "rolling", window_ms=3600_000, models=("small",))
    await c.add([b], row(1, clock_ms(clock)))  # 150 tokens
    clock.at(ms(2026, 5, 1, 8, 30))
    await c.add([b], row(2, clock_ms(clock), prompt=200))  # 250 tokens: 400 in the window
    assert await c.add([b], row(3, clock_ms(clock), model="big")) == []  # another model: not counted
    (s,) = await c.spent([b])
    assert s.spent == 400 and s.exhausted
    assert s.resets_ms == ms(2026, 5, 1, 9)  # the 8:00 slot falls out at 9:00
    clock.at(ms(2026, 5, 1, 9, 0, 1))
    (s,) = await c.spent([b])
    assert s.spent == 250 and not s.exhausted


def policy(budgets: list[dict], billing: dict | None = None) -> str:
    import yaml

    raw = {
        "models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:1"}]}],
        "tenancy": {"tenants": [{"id": "acme", "budgets": budgets}]},
        **({"billing": billing} if billing else {}),
    }
    return yaml.safe_dump(raw)


@pytest.mark.parametrize(
    ("budgets", "billing", "says"),
    [
        ([{"spend": 1, "tokens": 5}], None, "exactly one of spend"),
        ([{}], None, "exactly one of spend"),
        ([{"tokens": 5, "period": "rolling"}], None, "window_s"),
        ([{"tokens": 5, "window_s": 3600}], None, "window_s"),
        ([{"spend": "0.0000001"}], None, "6 decimals"),
        ([{"tokens": 5}, {"tokens": 9}], None, "unique"),
        ([{"tokens": 5, "warn_at_pct": [120]}], None, "percentages"),
        ([{"tokens": 5}], {"enabled": False}, "billing.enabled"),
    ],
)
def test_the_policy_refuses_a_budget_it_cannot_enforce(budgets, billing, says) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(policy(budgets, billing))
    assert says in str(err.value)


def test_budgets_from_the_policy() -> None:
    p = parse_policy(
        policy([{"spend": "12.5", "period": "day", "models": ["m*"]}, {"tokens": 1000, "period": "rolling",
                "window_s": 600, "name": "burst", "warn_at_pct": [90, 50]}])
    )  # fmt: skip
    (day, burst) = budgets_of(p.tenancy)["acme"]
    assert (day.name, day.unit, day.limit, day.models) == ("day-spend-m*", "spend", 12_500_000, ("m*",))
    assert (burst.name, burst.unit, burst.limit, burst.window_ms, burst.warn_at_pct) == (
        "burst", "tokens", 1000, 600_000, (50, 90),
    )  # fmt: skip


async def test_processes_on_one_ledger_file_see_each_others_rows_within_the_refresh(tmp_path) -> None:
    """``--workers N`` without Redis: each process counts its own rows at once and the others' at the next
    read of the ledger (``LOCAL_REFRESH_MS``), on the clock, not at once and not never."""
    path = str(tmp_path / "ledger.db")
    first, second = await SqliteLedger.open(path), await SqliteLedger.open(path)
    try:
        clock = Clock(ms(2026, 7, 1, 10))
        b = Budget("acme", "daily", "spend", 10_000, "day")
        one, two = BudgetCounters(ledger=first, clock=clock), BudgetCounters(ledger=second, clock=clock)
        assert (await one.spent([b]))[0].spent == (await two.spent([b]))[0].spent == 0
        item = row(1, clock_ms(clock))  # 200 µ$, written by the first process
        assert await first.record(item)
        await one.add([b], item)
        assert (await one.spent([b]))[0].spent == 200
        assert (await two.spent([b]))[0].spent == 0  # not read again yet
        clock.at(clock_ms(clock) + LOCAL_REFRESH_MS)
        await two.spent([b])  # starts the read in the background; the count so far answers
        deadline = time.monotonic() + 10
        while (await two.spent([b]))[0].spent != 200:
            assert time.monotonic() < deadline, "the other process's row was never read"
            await asyncio.sleep(0.01)
        await one.close()
        await two.close()
    finally:
        await first.close()
        await second.close()
