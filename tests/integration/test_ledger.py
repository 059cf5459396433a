"""Both ledgers (SQLite file, real Redis) against one suite: idempotency, queries, report maths."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis

from cache.billing.ledger import DAY_MS, aggregate, day_of
from cache.billing.ledger_redis import RedisLedger
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import ExplicitOutcome, LineItem, ModelPrices, RequestUsage, Rules, bill

PRICES = {
    "llama": ModelPrices(3_000_000, 15_000_000, "USD", "v1"),
    "qwen": ModelPrices(500_000, 1_000_000, "USD", "v1"),
}
DAY0 = int(datetime(2026, 11, 1, tzinfo=UTC).timestamp() * 1000)


def make_item(rid: str, tenant: str, model: str, ts_ms: int, rng: random.Random) -> LineItem:
    source = rng.choice(["upstream", "upstream", "upstream", "response_cache", "coalesced"])
    prompt = rng.randint(1, 5000)
    explicit = None
    if rng.random() < 0.3 and prompt > 1000:
        explicit = ExplicitOutcome(rng.randint(900, prompt + 100), rng.choice(["created", "hit"]))
    # A fifth of the fleet's rows carry the gateway's estimate (the client left before the usage came).
    estimated = source == "upstream" and rng.random() < 0.2
    usage = RequestUsage(prompt, rng.randint(0, 800), rng.randint(0, prompt), "replica", estimated)
    return bill(
        usage,
        PRICES[model],
        Rules(),
        explicit,
        source,
        request_id=rid,
        tenant=tenant,
        model=model,
        ts_ms=ts_ms,
    )


def dataset(seed: int = 7, n: int = 240) -> list[LineItem]:
    """Items over three UTC days, two models, three tenants (one with ':' in its id), in time order."""
    rng = random.Random(seed)
    stamps = sorted(DAY0 + rng.randrange(3 * DAY_MS) for _ in range(n))
    return [
        make_item(f"req-{i}", rng.choice(["acme", "globex", "ten:x"]), rng.choice(list(PRICES)), ts, rng)
        for i, ts in enumerate(stamps)
    ]


async def record_all(ledger, items: list[LineItem], concurrency: int = 32) -> list[bool]:
    """Concurrent writes, bounded so a Redis connection pool is not exhausted."""
    sem = asyncio.Semaphore(concurrency)

    async def one(it: LineItem) -> bool:
        async with sem:
            return await ledger.record(it)

    return await asyncio.gather(*[one(it) for it in items])


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    c = aioredis.from_url(redis_url)
    yield c
    await c.aclose()


def _item(
    rid: str = "r1", tenant: str = "acme", ts_ms: int = DAY0 + 1000, source: str = "upstream"
) -> LineItem:
    return bill(
        RequestUsage(2000, 100, 1500, "replica"),
        PRICES["llama"],
        Rules(),
        None,
        source,
        request_id=rid,
        tenant=tenant,
        model="llama",
        ts_ms=ts_ms,
    )


async def test_record_is_idempotent(ledger):
    item = _item()
    assert await ledger.record(item) is True
    assert await ledger.record(item) is False
    rows = await ledger.query()
    assert len(rows) == 1
    r = rows[0]
    assert (r.tenant, r.model, r.requests) == ("acme", "llama", 1)
    assert r.tokens == item.tokens and r.micros == item.micros
    assert r.cost_micros == item.total_micros
    # 500 uncached at 3 USD/M = 1500, 1500 cached at 20 % = 900, 100 out at 15 USD/M = 1500
    assert (r.cost_micros, r.cost_without_cache_micros) == (3900, 7500)
    assert r.saved_micros == 3600 and r.saving_rate == pytest.approx(0.48)


async def test_concurrent_duplicate_writes_count_once(ledger):
    item = _item("dup")
    results = await asyncio.gather(*[ledger.record(item) for _ in range(25)])
    assert results.count(True) == 1
    (row,) = await ledger.query(group_by=())
    assert row.requests == 1 and row.cost_micros == item.total_micros


async def test_request_id_is_scoped_by_tenant(ledger):
    assert await ledger.record(_item("same", tenant="acme"))
    assert await ledger.record(_item("same", tenant="globex"))
    rows = await ledger.query(group_by=("tenant",))
    assert [(r.tenant, r.requests) for r in rows] == [("acme", 1), ("globex", 1)]


async def test_empty_and_invalid_queries(ledger):
    assert await ledger.query() == []
    assert await ledger.query(group_by=()) == []
    with pytest.raises(ValueError, match="group_by"):
        await ledger.query(group_by=("tenant", "hour"))


QUERIES = [
    {},
    {"group_by": ()},
    {"group_by": ("tenant",)},
    {"group_by": ("tenant", "model", "day")},
    {"group_by": ("day", "source")},
    {"tenant": "ten:x", "group_by": ("model", "source")},
    {"model": "qwen", "group_by": ("tenant", "day")},
    {"since": DAY0 / 1000 + 86_400, "group_by": ("tenant", "day")},  # whole days
    {"since": datetime(2026, 11, 2, tzinfo=UTC), "until": datetime(2026, 11, 3, tzinfo=UTC)},
    {"since": DAY0 / 1000 + 3600 * 5.5, "group_by": ("day",)},  # partial first day
    {"until": DAY0 / 1000 + 86_400 * 2 + 3600 * 7, "group_by": ("tenant", "day")},  # partial last day
    {"since": DAY0 / 1000 + 3600 * 20, "until": DAY0 / 1000 + 3600 * 50, "group_by": ("source",)},
    {"since": DAY0 / 1000 + 3600 * 30, "until": DAY0 / 1000 + 3600 * 34, "tenant": "acme"},  # within a day
    {"since": DAY0 / 1000 + 3600 * 30, "until": DAY0 / 1000 + 3600 * 30},  # empty
]


@pytest.mark.parametrize("q", QUERIES, ids=[str(i) for i in range(len(QUERIES))])
async def test_queries_match_reference(ledger, q):
    items = dataset()
    # duplicates (retries) after the first writes; one at a time, in time order, as a gateway records
    # (the Redis ledger's partial-day queries allow an item recorded up to an hour after a newer one:
    # 32 concurrent writes of items 18 minutes apart could reorder them by hours on a loaded machine)
    writes = items + items[::7]
    results = await record_all(ledger, writes, concurrency=1)
    assert sum(results) == len(items)
    got = await ledger.query(**q)
    want = aggregate(items, **q)
    assert got == want
    assert any(it.usage_estimated for it in items)  # so the estimated counts are compared too
    if not q.get("until") or q.get("since") != q.get("until"):
        assert got, "the dataset must make every query non-empty"


async def test_report_separates_served_from_computed(ledger):
    await ledger.record(_item("a", source="upstream"))
    await ledger.record(_item("b", source="response_cache"))
    await ledger.record(_item("c", source="coalesced"))
    rows = {r.source: r for r in await ledger.query(group_by=("source",))}
    assert rows["upstream"].input_tokens_computed == 2000 and rows["upstream"].served_tokens == 0
    for src in ("response_cache", "coalesced"):
        assert rows[src].input_tokens_computed == 0
        assert rows[src].served_tokens == 2100
        assert rows[src].cost_micros == 0 and rows[src].saving_rate == 1.0
    (total,) = await ledger.query(group_by=())
    assert total.requests == 3
    assert total.cost_without_cache_micros == 3 * 7500
    assert total.saved_micros == 3600 + 7500 + 7500


async def test_sqlite_persists_and_uses_wal(tmp_path):
    path = str(tmp_path / "ledger.db")
    led = await SqliteLedger.open(path)
    items = dataset(n=50)
    assert all(await record_all(led, items))
    assert led.commits < len(items)  # concurrent records were group-committed
    mode = await led.call(lambda c: c.execute("PRAGMA journal_mode").fetchone()[0])
    sync = await led.call(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
    assert (mode, sync) == ("wal", 2)  # 2 = FULL
    await led.close()
    with pytest.raises(RuntimeError):
        await led.record(items[0])
    led2 = await SqliteLedger.open(path, synchronous="normal")
    assert await led2.record(items[0]) is False
    assert await led2.query(group_by=("day",)) == aggregate(items, group_by=("day",))
    assert await led2.call(lambda c: c.execute("PRAGMA synchronous").fetchone()[0]) == 1
    await led2.close()


async def test_sqlite_open_error_is_raised(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(Exception):  # noqa: B017 - the sqlite/OS error type depends on the platform
        await SqliteLedger.open(str(tmp_path / "file" / "ledger.db"))


async def test_redis_two_pods_racing(redis_url):
    clients = [aioredis.from_url(redis_url) for _ in range(2)]
    pods = [RedisLedger(c, key_prefix="race") for c in clients]
    items = dataset(seed=3, n=40)
    jobs = [pods[(i + k) % 2].record(it) for k in range(3) for i, it in enumerate(items)]
    results = await asyncio.gather(*jobs)  # 120 writes over 2 clients: within the pools' limits
    assert sum(results) == len(items)
    assert await pods[0].query(group_by=("tenant", "day")) == aggregate(items, group_by=("tenant", "day"))
    for c in clients:
        await c.aclose()


async def test_redis_trimmed_stream_refuses_partial_days(redis_client):
    led = RedisLedger(redis_client, key_prefix="trim", stream_maxlen=50)
    items = dataset(seed=5, n=400)
    for it in items:
        assert await led.record(it)
    assert await redis_client.xlen(led.stream_key) < 400  # trimmed
    # whole days still exact, from the counters
    assert await led.query(group_by=("day",)) == aggregate(items, group_by=("day",))
    from cache.billing.ledger import LedgerRangeUnavailable

    with pytest.raises(LedgerRangeUnavailable):
        await led.query(since=DAY0 / 1000 + 3600)
    # the recent end is still in the stream
    last_day_start = DAY0 + 2 * DAY_MS
    q = {"since": (items[-5].ts_ms) / 1000, "until": (last_day_start + DAY_MS) / 1000}
    assert await led.query(**q) == aggregate(items, **q)


async def test_redis_out_of_order_items_and_key_hygiene(redis_client):
    led = RedisLedger(redis_client, key_prefix="ooo")
    newer = _item("new", ts_ms=DAY0 + 10 * 3600 * 1000)
    older = _item("old", ts_ms=DAY0 + 9 * 3600 * 1000)  # recorded after a newer item
    assert await led.record(newer) and await led.record(older)
    q = {"since": (DAY0 + 8 * 3600 * 1000) / 1000, "until": (DAY0 + 9.5 * 3600 * 1000) / 1000}
    (row,) = await led.query(**q)
    assert row.requests == 1  # found although its stream id is the newer item's time
    ids = [e[0] for e in await redis_client.xrange(led.stream_key)]
    assert ids == [f"{newer.ts_ms}-0".encode(), f"{newer.ts_ms}-1".encode()]
    keys = {k.decode() for k in await redis_client.keys("*")}
    day = day_of(newer.ts_ms)
    assert keys == {
        "{ooo:bill}:id:4.acme:new",
        "{ooo:bill}:id:4.acme:old",
        f"{{ooo:bill}}:c:{day}:4.acme:5.llama",
        "{ooo:bill}:idx",
        "{ooo:bill}:items",
    }
