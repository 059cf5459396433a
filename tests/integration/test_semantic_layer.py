"""The semantic layer against both stores (memory and a real Redis) and a real embeddings endpoint."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from cache.entry import make_entry
from cache.keys import cache_key
from cache.semantic.embedder import Embedder, EmbedderError
from cache.semantic.layer import SemanticLayer
from cache.semantic.route import SemanticRoute
from cache.semantic.store import EntityCheckedStore, MemorySemanticStore, SemanticStore, stamp
from cache.semantic.store_redis import RedisSemanticStore
from cache.store import MemoryStore
from cache.store_redis import RedisStore, connect
from config import load_policy
from config.loader import example_path
from config.semantic import EmbeddingConfig
from sim import SimConfig, start_replicas

MODEL = "sim-llama"
CFG = load_policy(example_path("semantic-ecommerce"), env={}).cache.semantic


def body(text: str) -> dict[str, Any]:
    return {"model": MODEL, "temperature": 0, "messages": [{"role": "user", "content": text}]}


def answer(text: str) -> dict[str, Any]:
    return {
        "object": "chat.completion",
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[SemanticStore]:
    if request.param == "memory":
        yield MemorySemanticStore()
        return
    client = connect(request.getfixturevalue("redis_url"))
    yield RedisSemanticStore(client, key_prefix="t")
    await client.aclose()


async def ask(layer: SemanticLayer, text: str, salt: str = "salt-a") -> Any:
    analysis = layer.analyse(MODEL, "chat", body(text))
    assert analysis is not None
    return await layer.lookup(MODEL, analysis, salt)


async def remember(layer: SemanticLayer, text: str, salt: str = "salt-a") -> None:
    found = await ask(layer, text, salt)
    assert found.outcome == "miss", (text, found.reason)
    assert await layer.fill(found, answer(text)) == "stored"


QUESTIONS = {
    "iphone battery": "How long does the iPhone 15 battery last?",
    "iphone capacity": "What is the battery capacity of the iPhone 15?",
    "iphone screen": "What is the screen size of the iPhone 15?",
    "pixel battery": "What is the battery life of the Pixel 8?",
    "order": "Where is my order SO20240101?",
}


async def test_paraphrase_hits_and_tenants_are_isolated(store: SemanticStore) -> None:
    layer = SemanticLayer({MODEL: SemanticRoute(CFG, b"tags")}, store)
    await remember(layer, QUESTIONS["iphone battery"])
    hit = await ask(layer, "iPhone 15 battery life in hours")
    assert (
        hit.outcome == "hit"
        and hit.entry.response["choices"][0]["message"]["content"] == QUESTIONS["iphone battery"]
    )
    assert (await ask(layer, "iPhone 15 battery life", salt="salt-b")).outcome == "miss"
    assert (await ask(layer, "iPhone 15 Pro battery life")).outcome == "miss"


async def test_an_incomplete_fingerprint_never_hits(store: SemanticStore) -> None:
    layer = SemanticLayer({MODEL: SemanticRoute(CFG, b"tags")}, store)
    await remember(layer, QUESTIONS["iphone battery"])
    for text in ("How long does the iPhone 15 battery last in winter?", "How long does the battery last?"):
        found = await ask(layer, text)
        assert found.outcome == "bypass" and found.entry is None
        assert await layer.fill(found, answer("x")) == "not_a_miss"


async def test_an_event_removes_exactly_its_entries(store: SemanticStore) -> None:
    layer = SemanticLayer({MODEL: SemanticRoute(CFG, b"tags")}, store)
    for salt in ("salt-a", "salt-b"):
        for q in QUESTIONS.values():
            await remember(layer, q, salt)
    event = {"type": "ProductSpecUpdated", "product_id": "iPhone 15", "changed_fields": ["battery"]}
    result = await layer.apply_event(event)
    assert result.removed == 4  # battery life and capacity of the iPhone 15, for both tenants
    for salt in ("salt-a", "salt-b"):
        outcomes = {name: (await ask(layer, q, salt)).outcome for name, q in QUESTIONS.items()}
        assert outcomes == {
            "iphone battery": "miss", "iphone capacity": "miss",
            "iphone screen": "hit", "pixel battery": "hit", "order": "hit",
        }  # fmt: skip
    assert (await layer.apply_event(event)).removed == 0
    assert (await layer.apply_event({"type": "OrderStatusChanged", "order_id": "so20240101"})).removed == 2
    assert store.stats.stale == 0


async def test_an_answer_begun_before_an_event_is_never_served(store: SemanticStore) -> None:
    layer = SemanticLayer({MODEL: SemanticRoute(CFG, b"tags")}, store)
    found = await ask(layer, QUESTIONS["iphone screen"])  # the basis is read here
    await layer.apply_event(
        {"type": "ProductSpecUpdated", "product_id": "iphone15", "changed_fields": ["screen"]}
    )
    assert await layer.fill(found, answer("old spec")) == "stale_basis"
    assert (await ask(layer, QUESTIONS["iphone screen"])).outcome == "miss"


@pytest.fixture(params=["memory", "redis"])
async def stores(request: pytest.FixtureRequest) -> AsyncIterator[tuple[SemanticStore, EntityCheckedStore]]:
    """A semantic store and the exact cache's store seen through it, as the cache runtime pairs them."""
    if request.param == "memory":
        exact = MemoryStore()
        sem: SemanticStore = MemorySemanticStore(exact=exact)
        yield sem, EntityCheckedStore(exact, sem)
        return
    client = connect(request.getfixturevalue("redis_url"))
    sem = RedisSemanticStore(client, key_prefix="t")
    yield sem, EntityCheckedStore(RedisStore(client=client, key_prefix="t"), sem)
    await client.aclose()


async def test_exact_entries_tied_to_an_entity_go_with_its_event(
    stores: tuple[SemanticStore, EntityCheckedStore],
) -> None:
    sem, exact = stores
    layer = SemanticLayer({MODEL: SemanticRoute(CFG, b"tags")}, sem)

    async def tie_of(text: str) -> Any:
        analysis = layer.analyse(MODEL, "chat", body(text))
        assert analysis is not None
        return await layer.tie(MODEL, analysis)

    heavy, screen = "How heavy is the iPhone 15?", QUESTIONS["iphone screen"]
    keys = {q: cache_key("chat", body(q), "salt-a") for q in (heavy, screen, "Tell me a joke.")}
    assert await tie_of("Tell me a joke.") is None  # no rule finds anything: an untied entry
    assert await exact.set(keys["Tell me a joke."], make_entry(answer("joke")), 60)
    tied = {q: await tie_of(q) for q in (heavy, screen)}
    for q, t in tied.items():
        assert t is not None and t.refs and t.basis is not None
        assert await sem.put(keys[q], make_entry(answer(q)), 60, t.refs, t.basis) == "stored"
        assert (await exact.get(keys[q])) is not None
    in_flight = await tie_of("What is the weight of the iPhone 15?")  # a generation under way

    event = {"type": "ProductSpecUpdated", "product_id": "iphone15", "changed_fields": ["weight"]}
    result = await layer.apply_event(event, [in_flight, tied[screen]])
    assert result.by_layer == {"semantic": 0, "exact": 1, "in_flight": 1} and result.removed == 1
    assert await exact.get(keys[heavy]) is None
    assert await exact.get(keys[screen]) is not None and await exact.get(keys["Tell me a joke."]) is not None
    # The generation under way may not store its answer, and an entry written with its outdated
    # stamp anyway (the moment between a Redis fill's write and its own check) is refused at read.
    assert await sem.put(keys[heavy], make_entry(answer("old")), 60, in_flight.refs, in_flight.basis) == (
        "stale_basis"
    )
    assert await exact.inner.set(
        keys[heavy], stamp(make_entry(answer("old")), in_flight.refs, in_flight.basis), 60
    )
    assert await exact.get(keys[heavy]) is None
    assert sem.stats.stale == 1
    assert await exact.inner.get(keys[heavy]) is None  # and dropped


async def test_an_entry_the_index_lost_is_refused_once_its_event_comes(store: SemanticStore) -> None:
    """The tag index is best effort (a write may fail); the epochs are what keep stale answers out."""
    route = SemanticRoute(CFG, b"tags")
    layer = SemanticLayer({MODEL: route}, store)
    await remember(layer, QUESTIONS["pixel battery"])
    found = await ask(layer, QUESTIONS["pixel battery"])
    assert found.outcome == "hit"
    refs = route.refs(layer.analyse(MODEL, "chat", body(QUESTIONS["pixel battery"])).fingerprint)  # type: ignore[union-attr]
    if isinstance(store, MemorySemanticStore):
        for r in refs:
            store._index[r.tag].clear()  # what a lost index write leaves behind
    else:
        assert isinstance(store, RedisSemanticStore)
        for r in refs:
            await store.redis.delete(store._index_key(r.tag))
    event = {"type": "ProductSpecUpdated", "product_id": "pixel8", "changed_fields": ["battery"]}
    assert (await layer.apply_event(event)).removed == 0
    assert (await ask(layer, QUESTIONS["pixel battery"])).outcome == "miss"
    assert store.stats.stale == 1


async def test_an_event_no_route_maps_is_refused(store: SemanticStore) -> None:
    layer = SemanticLayer({MODEL: SemanticRoute(CFG, b"tags")}, store)
    with pytest.raises(ValueError, match="no route maps"):
        await layer.apply_event({"type": "Unknown"})


async def test_redis_keys_and_values_carry_no_slot_value_or_prompt(redis_url: str) -> None:
    client = connect(redis_url)
    layer = SemanticLayer({MODEL: SemanticRoute(CFG, b"tags")}, RedisSemanticStore(client, key_prefix="t"))
    found = await ask(layer, QUESTIONS["order"])
    assert await layer.fill(found, answer("your parcel is on its way")) == "stored"
    keys = [k.decode() for k in await client.keys("*")]
    assert len(keys) == 3 and all(k.startswith("t:") for k in keys)  # entry, order tag, intent tag
    values = [await client.get(k) if ":rc:" in k else str(await client.hgetall(k)).encode() for k in keys]
    everything = (" ".join(keys).encode() + b" ".join(v or b"" for v in values)).lower()
    assert b"20240101" not in everything and b"where" not in everything
    await client.aclose()


# --- the embedder client and the guarded embedding mode, against real HTTP endpoints ---


async def test_embedder_client_against_the_simulator() -> None:
    fleet = await start_replicas([SimConfig(speed=0, models=("sim-llama", "emb"))], base_port=0)
    try:
        async with aiohttp.ClientSession() as session:
            emb = Embedder(session, fleet.urls[0], "emb")
            a, b = await emb.embed("hello"), await emb.embed("hello")
            assert a == b and len(a) == 8
            with pytest.raises(EmbedderError) as info:
                await Embedder(session, fleet.urls[0], "unknown-model").embed("x")
            assert info.value.reason == "status"
            with pytest.raises(EmbedderError) as info:
                await Embedder(session, "http://127.0.0.1:1", "emb", timeout_s=0.5).embed("x")
            assert info.value.reason == "unreachable"
    finally:
        await fleet.stop()


@pytest.fixture
async def constant_embedder() -> AsyncIterator[str]:
    """An embeddings endpoint that calls every text the same (cosine 1.0 for any pair), or a bad answer."""

    async def handle(request: web.Request) -> web.Response:
        data = await request.json()
        if data["input"] == ["broken"]:
            return web.json_response({"data": [{"embedding": ["x"]}]})
        return web.json_response({"data": [{"embedding": [0.6, 0.8, 0.0]} for _ in data["input"]]})

    app = web.Application()
    app.router.add_post("/v1/embeddings", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def test_guards_veto_a_negation_at_similarity_one(constant_embedder: str) -> None:
    emb_cfg = EmbeddingConfig(url=constant_embedder, model="m", threshold=0.95)
    route = SemanticRoute(CFG.model_copy(update={"mode": "embedding", "embedding": emb_cfg}), b"tags")
    async with aiohttp.ClientSession() as session:
        embedder = Embedder(session, constant_embedder, "m")
        layer = SemanticLayer({MODEL: route}, MemorySemanticStore(), {MODEL: embedder})
        await remember(layer, "Is the Mate 60 waterproof?")
        neg = await ask(layer, "Is the Mate 60 not waterproof?")
        assert neg.outcome == "miss" and neg.vetoes == ["negation"]
        other = await ask(layer, "Is the Mate 50 waterproof?")
        assert other.outcome == "miss" and other.vetoes == ["numbers"]
        hit = await ask(layer, "Is the Mate 60 water resistant?")
        assert hit.outcome == "hit" and hit.similarity == pytest.approx(1.0)
        assert (await ask(layer, "Is the Mate 60 waterproof?", salt="salt-b")).outcome == "miss"
        assert (await ask(layer, "broken")).reason == "embedder_malformed"


async def test_a_compatible_candidate_is_served_through_the_layer_and_a_near_miss_is_not(
    constant_embedder: str,
) -> None:
    """The compatible rule on the request path (similarity 1.0 for every pair): a question the fingerprint
    cannot key ("kindly" is no filler) is served from its harmless paraphrase; a content word, an unknown
    word or Chinese is refused whatever the similarity."""
    emb_cfg = EmbeddingConfig(url=constant_embedder, model="m", threshold=0.95)
    route = SemanticRoute(CFG.model_copy(update={"mode": "embedding", "embedding": emb_cfg}), b"tags")
    async with aiohttp.ClientSession() as session:
        embedder = Embedder(session, constant_embedder, "m")
        layer = SemanticLayer({MODEL: route}, MemorySemanticStore(), {MODEL: embedder})
        await remember(layer, "Kindly tell me the Pixel 8 weight")
        hit = await ask(layer, "Pixel 8 weight")
        assert hit.outcome == "hit" and hit.similarity == pytest.approx(1.0)
        for near in ("Pixel 8 case weight", "Pixel 8 weight in winter"):
            found = await ask(layer, near)
            assert found.outcome == "miss" and found.vetoes == ["unexplained"], near
        await remember(layer, "Pixel 8 重量 kindly")
        found = await ask(layer, "Pixel 8 重量")
        assert found.outcome == "miss" and "language" in found.vetoes


# --- named limits ---


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_max_entries_per_tag_refuses_rather_than_losing_index(
    kind: str, request: pytest.FixtureRequest
) -> None:
    client = None
    if kind == "memory":
        store: SemanticStore = MemorySemanticStore(max_entries_per_tag=2)
    else:
        client = connect(request.getfixturevalue("redis_url"))
        store = RedisSemanticStore(client, key_prefix="t", max_entries_per_tag=2)
    layer = SemanticLayer({MODEL: SemanticRoute(CFG, b"tags")}, store)
    results = []
    for n in (1, 2, 3):  # three orders share the intent tag of query_order_status
        found = await ask(layer, f"Where is my order SO2024010{n}?")
        results.append(await layer.fill(found, answer("ok")))
    assert results == ["stored", "stored", "tag_full"]
    assert (await ask(layer, "Where is my order SO20240103?")).outcome == "miss"
    assert (await layer.apply_event({"type": "OrderStatusChanged", "order_id": "SO20240101"})).removed == 1
    if client is not None:
        await client.aclose()


async def test_memory_epoch_bound_drops_everything_under_a_new_generation() -> None:
    store = MemorySemanticStore(max_epochs=1)
    layer = SemanticLayer({MODEL: SemanticRoute(CFG, b"tags")}, store)
    await remember(layer, QUESTIONS["iphone screen"])
    pending = await ask(layer, QUESTIONS["pixel battery"])  # basis read before the reset
    await layer.apply_event(
        {"type": "ProductSpecUpdated", "product_id": "mate60", "changed_fields": ["screen"]}
    )
    await layer.apply_event(
        {"type": "ProductSpecUpdated", "product_id": "xiaomi14", "changed_fields": ["screen"]}
    )
    assert len(store) == 0  # the second counter did not fit: everything went
    assert await layer.fill(pending, answer("old")) == "stale_basis"


async def test_embedder_refuses_vectors_beyond_max_dimensions(constant_embedder: str) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(EmbedderError) as info:
            await Embedder(session, constant_embedder, "m", max_dimensions=2).embed("x")
    assert info.value.reason == "malformed"
