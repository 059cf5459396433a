"""The gateway's KV-event listener over real loopback ZMQ sockets, fed with recorded vLLM batches.

A PUB socket stands in for a replica's publisher (vLLM connects to the gateway's bound SUB socket),
a ROUTER socket for its replay endpoint, speaking vLLM's replay protocol.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
import shutil
import time
from pathlib import Path

import msgpack
import pytest
import zmq
import zmq.asyncio

from router.kv_events import Removed, Stored, decode_batch
from tests.support.ports import free_port
from tests.support.stack import gateway, policy_for

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kv_events"
END_SEQ = (-1).to_bytes(8, "big", signed=True)


@pytest.fixture(scope="module")
def frames() -> list[tuple[int, bytes]]:
    rec = json.loads((FIXTURES / "tiny_llama_bs32.json").read_text())
    return [(f["seq"], base64.b64decode(f["payload"])) for f in rec["frames"]]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model")
    with gzip.open(FIXTURES / "tokenizer.json.gz") as src, (d / "tokenizer.json").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(FIXTURES / "tokenizer_config.json", d / "tokenizer_config.json")
    return d


def with_ts(payload: bytes, ts: float) -> bytes:
    """A recorded batch re-stamped (as if published at ``ts``)."""
    raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    raw[0] = ts
    return msgpack.packb(raw)


def expected_held(payloads: list[bytes]) -> set[int]:
    held: set[int] = set()
    for p in payloads:
        for e in decode_batch(p).events:
            if isinstance(e, Stored):
                held |= set(e.block_hashes)
            elif isinstance(e, Removed):
                held -= set(e.block_hashes)
    return held


def precise_policy(model_dir: Path, bind: str, replay: dict[str, str] | None = None):
    return policy_for(
        ["http://127.0.0.1:9", "http://127.0.0.1:10"],
        routing={
            "policy": "prefix_affinity",
            "index": "precise",
            "block_size": 32,
            "engine_block_size": 32,
            "tokenizer": {"kind": "hf", "path": str(model_dir / "tokenizer.json")},
            "kv_events": {
                "bind": bind,
                "topics": {"r1": "topic-r1"},
                "replay": replay or {},
                "replay_timeout_s": 2.0,
            },
        },
        health={"enabled": False},
        scrape={"enabled": False},
    )


async def wait_for(pred, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if pred():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def publish(pub: zmq.asyncio.Socket, topic: bytes, seq: int, payload: bytes) -> None:
    await pub.send_multipart([topic, seq.to_bytes(8, "big"), payload])


def publisher(ctx: zmq.asyncio.Context) -> zmq.asyncio.Socket:
    """A publisher that sees its subscribers' subscriptions (XPUB, every one of them: verbose)."""
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.XPUB_VERBOSE, 1)
    return pub


async def subscribed(pub: zmq.asyncio.Socket, n: int = 1, timeout: float = 20.0) -> None:
    """Until ``n`` subscriptions reached the publisher (ZeroMQ's slow joiner: what is published before
    a subscriber's subscription arrives is dropped for it), bounded."""
    got = 0
    while got < n:
        msg = await asyncio.wait_for(pub.recv(), timeout)
        got += msg[:1] == b"\x01"


async def connected_pub(ctx: zmq.asyncio.Context, bind: str) -> zmq.asyncio.Socket:
    pub = publisher(ctx)
    pub.connect(bind)
    await subscribed(pub)
    return pub


async def test_batches_in_order_build_the_exact_index(model_dir, frames):
    bind = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.asyncio.Context()
    async with gateway(precise_policy(model_dir, bind)) as gw:
        pub = await connected_pub(ctx, bind)
        try:
            for seq, payload in frames:
                await publish(pub, b"topic-r1", seq, payload)
            exact = gw.state.pools["sim-llama"].router.exact
            want = expected_held([p for _, p in frames])
            # The final state (the count alone passes through len(want) while stores and removals apply).
            await wait_for(
                lambda: exact.stats().held.get("r1") == len(want) and all(exact.holds("r1", h) for h in want)
            )
            assert exact.is_live("r1") and not exact.is_live("r0")  # r0 publishes nothing: approximate
            await publish(pub, b"nobody", 0, frames[0][1])  # unknown topic: counted, ignored
            await publish(pub, b"topic-r1", len(frames), b"\xc1")  # undecodable: counted, ignored
            registry = gw.process.metrics.registry

            def errors(kind: str) -> float | None:
                return registry.get_sample_value("prefix_gateway_kv_event_errors_total", {"kind": kind})

            await wait_for(lambda: errors("unknown_topic") == 1 and errors("decode") == 1)
            batches = registry.get_sample_value("prefix_gateway_kv_event_batches_total", {"replica": "r1"})
            assert batches == len(frames)
            assert exact.stats().held["r1"] == len(want)  # the bad frames changed nothing
        finally:
            pub.close(0)
            ctx.term()


async def test_a_gap_without_replay_purges_and_a_restart_purges(model_dir, frames):
    bind = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.asyncio.Context()
    async with gateway(precise_policy(model_dir, bind)) as gw:
        pub = await connected_pub(ctx, bind)
        try:
            exact = gw.state.pools["sim-llama"].router.exact
            await publish(pub, b"topic-r1", 0, frames[0][1])
            await wait_for(lambda: exact.stats().held.get("r1", 0) > 0)
            await publish(pub, b"topic-r1", 5, frames[4][1])  # 1..4 lost, no replay socket
            await wait_for(lambda: exact.stats().purges.get("r1") == 1)
            # After the purge only what the batch after the gap stored is held.
            assert exact.stats().held["r1"] == len(expected_held([frames[4][1]]))
            # An old batch again (seq and time stamp behind): a duplicate, ignored.
            await publish(pub, b"topic-r1", 0, frames[0][1])
            # The replica restarted: numbering from 0 again, later time stamps; its batch 0 was lost.
            await publish(pub, b"topic-r1", 1, with_ts(frames[1][1], time.time()))
            await wait_for(lambda: exact.stats().purges.get("r1") == 2)
            assert exact.stats().held["r1"] == len(expected_held([frames[1][1]]))
            registry = gw.process.metrics.registry
            assert registry.get_sample_value("prefix_gateway_kv_event_batches_total", {"replica": "r1"}) == 3
        finally:
            pub.close(0)
            ctx.term()


class FakeReplay:
    """vLLM's ``ZmqEventPublisher._service_replay`` over a buffer the test fills."""

    def __init__(self, ctx: zmq.asyncio.Context, endpoint: str) -> None:
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.buffer: list[tuple[int, bytes]] = []
        self.requests: list[int] = []
        self.task = asyncio.ensure_future(self.serve())

    async def serve(self) -> None:
        while True:
            client, _, start = await self.sock.recv_multipart()
            first = int.from_bytes(start, "big")
            self.requests.append(first)
            for seq, payload in self.buffer:
                if seq >= first:
                    await self.sock.send_multipart(
                        [client, b"", b"topic-r1", seq.to_bytes(8, "big"), payload]
                    )
            await self.sock.send_multipart([client, b"", b"", END_SEQ, b""])

    def close(self) -> None:
        self.task.cancel()
        self.sock.close(0)


async def test_a_gap_is_filled_from_the_replay_socket(model_dir, frames):
    bind = f"tcp://127.0.0.1:{free_port()}"
    replay = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.asyncio.Context()
    fake = FakeReplay(ctx, replay)
    try:
        async with gateway(precise_policy(model_dir, bind, {"r1": replay})) as gw:
            exact = gw.state.pools["sim-llama"].router.exact
            # At start the listener asks for the whole (empty) buffer: the replica is live at once.
            await wait_for(lambda: fake.requests == [0] and exact.is_live("r1"))
            pub = await connected_pub(ctx, bind)
            try:
                fake.buffer += frames[:4]  # 0..2 never reach the gateway, 3 does
                await publish(pub, b"topic-r1", 3, frames[3][1])
                want = expected_held([p for _, p in frames[:4]])
                await wait_for(lambda: fake.requests == [0, 0] and exact.stats().held.get("r1") == len(want))
                # A gap (4..7 lost) is filled from the replay socket too: nothing is purged.
                fake.buffer += frames[4:9]
                await publish(pub, b"topic-r1", 8, frames[8][1])
                want = expected_held([p for _, p in frames[:9]])
                await wait_for(
                    lambda: fake.requests == [0, 0, 4] and exact.stats().held.get("r1") == len(want)
                )
                assert all(exact.holds("r1", h) for h in want)
                assert exact.stats().purges.get("r1", 0) == 0
            finally:
                pub.close(0)
    finally:
        fake.close()
        ctx.term()


async def test_a_gateway_started_late_catches_up_from_the_replay_buffer(model_dir, frames):
    bind = f"tcp://127.0.0.1:{free_port()}"
    replay = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.asyncio.Context()
    fake = FakeReplay(ctx, replay)
    fake.buffer += frames  # the replica published all of it before the gateway bound
    try:
        async with gateway(precise_policy(model_dir, bind, {"r1": replay})) as gw:
            exact = gw.state.pools["sim-llama"].router.exact
            want = expected_held([p for _, p in frames])
            await wait_for(
                lambda: exact.stats().held.get("r1") == len(want) and all(exact.holds("r1", h) for h in want)
            )
            assert fake.requests == [0] and exact.is_live("r1")
            pub = await connected_pub(ctx, bind)
            try:  # the live stream then continues where the buffer ended, without another replay
                await publish(pub, b"topic-r1", len(frames), frames[0][1])
                registry = gw.process.metrics.registry
                await wait_for(
                    lambda: (
                        registry.get_sample_value("prefix_gateway_kv_event_batches_total", {"replica": "r1"})
                        == 1
                    )
                )
                assert fake.requests == [0]
            finally:
                pub.close(0)
    finally:
        fake.close()
        ctx.term()


async def test_bind_conflict_leaves_the_gateway_routing_approximately(model_dir):
    bind = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.Context()
    squatter = ctx.socket(zmq.SUB)
    squatter.bind(bind)
    try:
        async with gateway(precise_policy(model_dir, bind)) as gw:
            assert gw.process.kv_listeners == []
            assert gw.state.pools["sim-llama"].router.exact is None
    finally:
        squatter.close(0)
        ctx.term()


async def test_a_reload_reattaches_the_same_exact_index_to_the_new_router(model_dir, frames):
    from gateway.process.reload import swap_policy

    bind = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.asyncio.Context()
    async with gateway(precise_policy(model_dir, bind)) as gw:
        pub = await connected_pub(ctx, bind)
        try:
            await publish(pub, b"topic-r1", 0, frames[0][1])
            old_router = gw.state.pools["sim-llama"].router
            exact = old_router.exact
            await wait_for(lambda: exact.stats().held.get("r1", 0) > 0)
            changed = precise_policy(model_dir, bind)
            changed.models[0].routing.load_factor = 2.0  # a routing change: the pool gets a new router
            swap_policy(gw.process, changed)
            new_router = gw.state.pools["sim-llama"].router
            assert new_router is not old_router
            await wait_for(lambda: new_router.exact is exact)  # the events so far are kept
            await publish(pub, b"topic-r1", 1, frames[1][1])
            want = expected_held([frames[0][1], frames[1][1]])
            await wait_for(
                lambda: exact.stats().held.get("r1") == len(want) and all(exact.holds("r1", h) for h in want)
            )
        finally:
            pub.close(0)
            ctx.term()


@pytest.mark.parametrize("engine_block_size", [32, 64])
async def test_replicas_cache_config_is_checked_and_gives_capacity(model_dir, frames, engine_block_size):
    from aiohttp import web

    recorded = (FIXTURES / "cache_config_info.prom").read_text()  # block size 32, sha256_cbor, 256 blocks

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=recorded, content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    bind = f"tcp://127.0.0.1:{free_port()}"
    policy = precise_policy(model_dir, bind)
    policy.models[0].replicas[1].url = f"http://127.0.0.1:{port}"  # r1 answers /metrics
    policy.models[0].routing.engine_block_size = engine_block_size
    ctx = zmq.asyncio.Context()
    try:
        async with gateway(policy) as gw:
            router = gw.state.pools["sim-llama"].router
            pub = await connected_pub(ctx, bind)
            try:
                await publish(pub, b"topic-r1", 0, frames[0][1])
                registry = gw.process.metrics.registry
                if engine_block_size == 32:
                    assert router.replica("r1").kv_capacity_blocks == 256  # learnt: 256 blocks of 32
                    await wait_for(lambda: router.exact.stats().held.get("r1", 0) > 0)
                else:  # 32-token blocks can never match 64-token hashes: events ignored, approximate
                    assert router.replica("r1").kv_capacity_blocks == 256  # 8,192 tokens / 32-token blocks
                    await wait_for(
                        lambda: (
                            registry.get_sample_value(
                                "prefix_gateway_kv_event_errors_total", {"kind": "mismatched_replica"}
                            )
                            == 1
                        )
                    )
                    assert not router.exact.is_live("r1")
            finally:
                pub.close(0)
    finally:
        ctx.term()
        await runner.cleanup()


async def test_an_unknown_topic_is_logged_once_loudly(model_dir, frames, caplog):
    """Issue 19, item 9: events under a topic no replica publishes (a policy whose ids or topics do
    not match the replicas') used to be dropped silently; one warning per topic says so."""
    caplog.set_level(logging.WARNING, logger="prefix_gateway")
    bind = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.asyncio.Context()
    async with gateway(precise_policy(model_dir, bind)) as gw:
        pub = await connected_pub(ctx, bind)
        try:
            for seq in range(3):
                await publish(pub, b"vllm-0", seq, frames[0][1])
            await publish(pub, b"vllm-1", 0, frames[0][1])
            registry = gw.process.metrics.registry
            await wait_for(
                lambda: (
                    registry.get_sample_value(
                        "prefix_gateway_kv_event_errors_total", {"kind": "unknown_topic"}
                    )
                    == 4
                )
            )
            warned = [r for r in caplog.records if getattr(r, "event", None) == "kv_events_unknown_topic"]
            assert [r.topic for r in warned] == ["vllm-0", "vllm-1"]
            assert all(r.levelno == logging.WARNING for r in warned)
            assert "topic-r1" in warned[0].getMessage() or "topic-r1" in str(warned[0].known)
        finally:
            pub.close(0)
            ctx.term()


# -- connect mode: the replica binds its publisher, every gateway process connects ---------------------
def connect_policy(model_dir: Path, endpoints: dict[str, str], replay: dict[str, str]):
    policy = precise_policy(model_dir, "tcp://127.0.0.1:1")
    ke = policy.models[0].routing.kv_events
    assert ke is not None
    ke.mode, ke.endpoints, ke.replay, ke.topics = "connect", endpoints, replay, {}
    return policy


async def test_events_from_a_bound_publisher_reach_every_process_and_gaps_replay_or_purge_in_each(
    model_dir, frames
):
    """vLLM with ``"endpoint": "tcp://*:PORT"`` (its default topic, empty): two gateway processes
    connect to it and its replay socket; both build the same exact index, fill a gap from the replay
    socket, purge on a gap the replay cannot fill and on a restart."""
    pub_ep, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.asyncio.Context()
    pub = publisher(ctx)
    pub.bind(pub_ep)
    fake = FakeReplay(ctx, replay)
    policy = connect_policy(model_dir, {"r0": f"tcp://127.0.0.1:{free_port()}", "r1": pub_ep}, {"r1": replay})
    try:
        async with gateway(policy) as gw1, gateway(policy) as gw2:
            exacts = [g.state.pools["sim-llama"].router.exact for g in (gw1, gw2)]
            await wait_for(lambda: fake.requests == [0, 0] and all(e.is_live("r1") for e in exacts))
            await subscribed(pub, 2)  # both processes' subscriptions reached the publisher

            def held(n: int) -> bool:
                return all(e.stats().held.get("r1") == n for e in exacts)

            await publish(pub, b"", 0, frames[0][1])
            await wait_for(lambda: held(len(expected_held([frames[0][1]]))))
            # A gap (1..3 lost) the replay socket fills: each process asks for it and purges nothing.
            fake.buffer += frames[:4]
            await publish(pub, b"", 4, frames[4][1])
            want = expected_held([p for _, p in frames[:5]])
            await wait_for(lambda: fake.requests == [0, 0, 1, 1] and held(len(want)))
            assert all(all(e.holds("r1", h) for h in want) for e in exacts)
            assert all(e.stats().purges.get("r1", 0) == 0 for e in exacts)
            # A gap the replay cannot fill (5..7 are not in its buffer): each process purges.
            await publish(pub, b"", 8, frames[8][1])
            await wait_for(lambda: all(e.stats().purges.get("r1") == 1 for e in exacts))
            assert held(len(expected_held([frames[8][1]])))
            # The replica restarted: numbering from 0 again, with later time stamps.
            fake.buffer.clear()
            await publish(pub, b"", 0, with_ts(frames[1][1], time.time()))
            await wait_for(lambda: all(e.stats().purges.get("r1") == 2 for e in exacts))
            assert held(len(expected_held([frames[1][1]])))
            assert not any(e.is_live("r0") for e in exacts)  # r0 publishes nothing: approximate
    finally:
        fake.close()
        pub.close(0)
        ctx.term()


async def test_connect_mode_follows_the_fleet_discovery_gives(model_dir, frames):
    """A replica added to the pool gets a socket of its own (and is replayed from 0); one removed
    loses it."""
    pub_ep = f"tcp://127.0.0.1:{free_port()}"
    ctx = zmq.asyncio.Context()
    pub = publisher(ctx)
    pub.bind(pub_ep)
    policy = connect_policy(model_dir, {"r0": f"tcp://127.0.0.1:{free_port()}", "r1": pub_ep}, {})
    try:
        async with gateway(policy) as gw:
            router = gw.state.pools["sim-llama"].router
            (listener,) = gw.process.kv_listeners
            await wait_for(lambda: set(listener.subs) == {b"sim-llama/r0", b"sim-llama/r1"})
            router.set_replicas([r for r in router.replicas if r.id == "r1"])
            await wait_for(lambda: set(listener.subs) == {b"sim-llama/r1"})
            await subscribed(pub)  # r1's subscription (made at start) reached the publisher
            await publish(pub, b"", 0, frames[0][1])
            await wait_for(lambda: router.exact is not None and router.exact.is_live("r1"))
    finally:
        pub.close(0)
        ctx.term()
