"""Issue 23, the billing invariant as a property: hypothesis draws schedules of requests and faults,
runs them through a real gateway process in front of a real simulator process, and checks every row
against the simulator's own record of the generations it started (``/sim/generations``).

A schedule is a few steps, each one request (or a pair) of one tenant, through the Chat Completions,
Responses or Messages front end, streamed or not: answered whole; left by the client after a few
events; retried after a replica answered 503 or dropped the connection before its first byte; cut by
the replica mid-stream; refused by every replica; refused before dispatch (too many ``cache_control``
markers); an explicit ``cache_control`` prefix (created, then hit); the same request twice (a
response-cache hit where the cache stores it); two identical requests at once (a coalesced follower or a hit). Per request id,
with the SQLite ledger and the Redis one:

- a row exactly when a generation was started upstream that no retry replaced, or when an answer was
  served whole from the cache or a leader; none for a request that never reached a replica;
- an upstream row carries the replica's prompt and generated tokens, or, flagged ``usage_estimated``,
  at most what the replica did (the prompt a few tokens under: the gateway does not count the
  replica's chat template, docs/billing.md) and at least nothing;
- a served row bills the served answer's tokens at the policy's served prices;
- per tenant, the rows' token sums are the sums of the above.

One gateway and one simulator per ledger for the whole module (started once, not per example); each
example uses request ids of its own and prompts with a nonce of its own, so examples share nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import itertools
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.procs import Proc, start_gateway, start_sim
from cache.billing.pricing import LineItem, price_micros
from tests.support.redis_server import RedisServer

MODEL = "sim-llama"
TENANTS = ("t0", "t1", "t2")
KEYS = {t: f"key-{t}-secret" for t in TENANTS}
IN_MICROS, OUT_MICROS = 3_000_000, 15_000_000  # 3 and 15 per 1M tokens
RC_IN, RC_OUT, CO_IN, CO_OUT = 10, 20, 30, 40  # served prices, % of the list price
EXPLICIT_MIN = 32
# The estimated prompt of a row is the gateway's count: under the replica's by its chat template's
# role markup, a few tokens a message (docs/billing.md).
PROMPT_TOLERANCE = 24
MAX_EXAMPLES = int(os.environ.get("BILLING_PROPERTY_EXAMPLES", "25"))
NONCE = itertools.count()


def policy_yaml(urls: list[str], tmp: str, ledger: str, redis_url: str | None) -> str:
    billing: dict[str, Any] = {
        "models": {MODEL: {"input_per_1m": 3.0, "output_per_1m": 15.0}},
        "rules": {
            "explicit_min_tokens": EXPLICIT_MIN,
            "response_cache_input_pct": RC_IN,
            "response_cache_output_pct": RC_OUT,
            "coalesced_input_pct": CO_IN,
            "coalesced_output_pct": CO_OUT,
        },
        "reconcile": {"enabled": False},
    }
    policy: dict[str, Any] = {
        "server": {
            "host": "127.0.0.1",
            "port": 0,
            "access_log": False,
            "log_level": "error",
            "drain_timeout_s": 0.5,
        },
        "health": {"interval_s": 5.0},
        "breaker": {"enabled": False},  # a drawn run of faults must not take a replica out of routing
        "retries": {"backoff_base_s": 0.0, "max_attempts": 2},
        "cache": {"enabled": True, "pii": "off"},
        "tenancy": {
            "allow_anonymous": False,
            "tenants": [
                {"id": t, "api_key_sha256": [hashlib.sha256(k.encode()).hexdigest()]} for t, k in KEYS.items()
            ],
        },
        "models": [
            {
                "name": MODEL,
                "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(urls)],
                "routing": {"policy": "round_robin"},
            }
        ],
    }
    if ledger == "redis":
        policy["redis"] = {"url": redis_url, "key_prefix": f"prop{os.getpid()}"}
        billing["ledger"] = {"kind": "redis"}
    else:
        billing["ledger"] = {"path": str(Path(tmp) / "ledger.db")}
    policy["billing"] = billing
    return yaml.safe_dump(policy)


@dataclass
class Stack:
    ledger: str
    gw: Proc
    urls: list[str]
    db: str
    redis: redis.Redis | None
    stream_key: str


@pytest.fixture(scope="module")
def stacks(redis_server: RedisServer) -> Iterator[dict[str, Stack]]:
    """One simulator (two replicas) and one gateway per ledger, started once for the module."""
    with tempfile.TemporaryDirectory(prefix="pgw-prop-") as tmp:
        extra = ["--mode", "simple", "--speed", "1", "--overhead-s", "0", "--decode-s-per-token", "0.004",
                 "--prefill-s-per-token", "0", "--max-recorded-requests", "100000"]  # fmt: skip
        sim, urls = start_sim(2, extra=extra)
        gws: list[Proc] = []
        client = redis.Redis.from_url(redis_server.url)
        try:

            def start(ledger: str) -> Proc:
                path = Path(tmp) / f"{ledger}.yaml"
                path.write_text(policy_yaml(urls, tmp, ledger, redis_server.url))
                gw = start_gateway(["--config", str(path)], env={"PREFIX_GATEWAY_SECRET": "prop-secret"})
                gws.append(gw)
                return gw

            # One after the other: two cold starts side by side on a loaded machine passed start_gateway's
            # 20 s deadline.
            sqlite_gw, redis_gw = start("sqlite"), start("redis")
            stream_key = f"{{prop{os.getpid()}:bill}}:items"
            yield {
                "sqlite": Stack("sqlite", sqlite_gw, urls, str(Path(tmp) / "ledger.db"), None, stream_key),
                "redis": Stack("redis", redis_gw, urls, "", client, stream_key),
            }
        finally:
            for gw in gws:
                gw.stop()
            client.close()
            sim.stop()


@pytest.fixture(params=["sqlite", "redis"])
def stack(request: pytest.FixtureRequest, stacks: dict[str, Stack]) -> Stack:
    return stacks[request.param]


# -- schedules -----------------------------------------------------------------------------------------
FRONTS = ("chat", "responses", "messages")
KINDS = ("ok", "disconnect", "retry_status", "retry_drop", "cut", "all_fail", "bad_markers", "marked",
         "repeat", "coalesce")  # fmt: skip


@dataclass(frozen=True)
class Step:
    kind: str
    tenant: str
    front: str
    stream: bool
    tokens: int
    at: int  # disconnect, cut: events first; retry: the faulty replica


steps = st.builds(
    Step,
    kind=st.sampled_from(KINDS),
    tenant=st.sampled_from(TENANTS),
    front=st.sampled_from(FRONTS),
    stream=st.booleans(),
    tokens=st.integers(2, 24),
    at=st.integers(0, 7),
)


def body(
    front: str, content: str, tokens: int, stream: bool, system: str | None = None
) -> tuple[str, dict[str, Any]]:
    if front == "responses":
        b: dict[str, Any] = {
            "model": MODEL,
            "input": content,
            "max_output_tokens": tokens,
            "stream": stream,
            "temperature": 0,
        }
        if system:
            b["instructions"] = system
        return "/v1/responses", b
    if front == "messages":
        b = {
            "model": MODEL,
            "max_tokens": tokens,
            "stream": stream,
            "temperature": 0,
            "messages": [{"role": "user", "content": content}],
        }
        if system:
            b["system"] = system
        return "/v1/messages", b
    msgs: list[dict[str, Any]] = [{"role": "user", "content": content}]
    if system:
        msgs.insert(0, {"role": "system", "content": system})
    return "/v1/chat/completions", {"model": MODEL, "messages": msgs, "max_tokens": tokens, "stream": stream,
                                    "temperature": 0}  # fmt: skip


@dataclass
class Sent:
    step: Step
    rid: str
    status: int
    expect: str  # upstream | estimated | served | none
    source_of: str | None = None  # served: the request id whose answer was served


async def faults(s: aiohttp.ClientSession, url: str, f: dict[str, Any]) -> None:
    async with s.post(url + "/sim/faults", json=f) as r:
        assert r.status == 200


async def send(
    s: aiohttp.ClientSession,
    gw: str,
    tenant: str,
    path: str,
    b: dict[str, Any],
    read_events: int | None = None,
) -> tuple[str, int]:
    """One request; ``read_events``: a stream left after that many events."""
    headers = {"Authorization": f"Bearer {KEYS[tenant]}"}
    rid = ""
    try:
        async with s.post(gw + path, json=b, headers=headers) as r:
            rid = r.headers.get("x-gateway-request-id", "")
            if read_events is None or r.status != 200:
                await r.read()
                return rid, r.status
            seen = 0
            async for line in r.content:
                if line.startswith(b"data:"):
                    seen += 1
                    if seen >= read_events:
                        break
            r.close()
            return rid, 499
    except aiohttp.ClientPayloadError:  # a stream the replica cut, relayed as the cut it was
        return rid, 200


async def run_schedule(stack: Stack, schedule: list[Step]) -> list[Sent]:
    gw, urls = stack.gw.url, stack.urls
    nonce = f"{os.getpid()}-{next(NONCE)}-{time.monotonic_ns()}"
    sent: list[Sent] = []
    marked_seen: set[str] = set()
    async with aiohttp.ClientSession() as s:
        for i, step in enumerate(schedule):
            content = f"Question {i} of schedule {nonce}: " + "why " * step.tokens
            path, b = body(step.front, content, step.tokens, step.stream)
            k = step.kind
            if k == "ok":
                rid, status = await send(s, gw, step.tenant, path, b)
                sent.append(Sent(step, rid, status, "upstream"))
            elif k == "disconnect":
                path, b = body(step.front, content, 300, True)
                rid, status = await send(s, gw, step.tenant, path, b, read_events=1 + step.at % 4)
                sent.append(Sent(step, rid, status, "estimated"))
            elif k in ("retry_status", "retry_drop"):
                bad = urls[step.at % 2]
                await faults(
                    s, bad, {"fail_status": 503} if k == "retry_status" else {"drop_mid_stream_after": 0}
                )
                try:
                    rid, status = await send(s, gw, step.tenant, path, b)
                finally:
                    await faults(s, bad, {})
                sent.append(Sent(step, rid, status, "upstream"))
            elif k == "cut":
                path, b = body(step.front, content, 300, True)
                for u in urls:
                    await faults(s, u, {"drop_mid_stream_after": 2 + step.at % 3})
                try:
                    rid, status = await send(s, gw, step.tenant, path, b)
                finally:
                    for u in urls:
                        await faults(s, u, {})
                sent.append(Sent(step, rid, status, "estimated"))
            elif k == "all_fail":
                for u in urls:
                    await faults(s, u, {"fail_status": 503})
                try:
                    rid, status = await send(s, gw, step.tenant, path, b)
                finally:
                    for u in urls:
                        await faults(s, u, {})
                sent.append(Sent(step, rid, status, "none"))
            elif k == "bad_markers":
                parts = [
                    {"type": "text", "text": f"p{j}", "cache_control": {"type": "ephemeral"}}
                    for j in range(5)
                ]
                b = {"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": parts}]}
                rid, status = await send(s, gw, step.tenant, "/v1/chat/completions", b)
                sent.append(Sent(step, rid, status, "none"))
            elif k == "marked":
                prefix = f"Standing instructions of schedule {nonce}, tenant {step.tenant}. " + "rule " * 60
                msgs = [
                    {"role": "system", "content": [{"type": "text", "text": prefix, "cache_control": {"type": "ephemeral"}}]},
                    {"role": "user", "content": content},
                ]  # fmt: skip
                b = {
                    "model": MODEL,
                    "messages": msgs,
                    "max_tokens": step.tokens,
                    "stream": step.stream,
                    "temperature": 1.0,
                }
                rid, status = await send(s, gw, step.tenant, "/v1/chat/completions", b)
                kind = "hit" if step.tenant in marked_seen else "created"
                marked_seen.add(step.tenant)
                sent.append(Sent(step, rid, status, "upstream", source_of=kind))
            elif k == "repeat":  # an answer, then the same request again: a hit where the cache stores it
                rid, status = await send(s, gw, step.tenant, path, b)
                sent.append(Sent(dataclasses.replace(step, kind="ok"), rid, status, "upstream"))
                again, status2 = await send(s, gw, step.tenant, path, b)
                sent.append(Sent(step, again, status2, "served_or_upstream", source_of=rid))
            elif k == "coalesce":
                path, b = body("chat", content, 40, False)
                (r1, s1), (r2, s2) = await asyncio.gather(
                    send(s, gw, step.tenant, path, b), send(s, gw, step.tenant, path, b)
                )
                sent.append(Sent(step, r1, s1, "pair", source_of=r2))
                sent.append(Sent(step, r2, s2, "pair", source_of=r1))
    return sent


# -- reading both sides --------------------------------------------------------------------------------
async def generations(urls: list[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    async with aiohttp.ClientSession() as s:
        for u in urls:
            async with s.get(u + "/sim/generations") as r:
                for g in await r.json():
                    out.setdefault(g["request_id"], []).append(g)
    return out


def ledger_rows(stack: Stack, ids: set[str]) -> dict[str, list[LineItem]]:
    items: list[LineItem] = []
    if stack.ledger == "sqlite":
        conn = sqlite3.connect(f"file:{stack.db}?mode=ro", uri=True)
        try:
            conn.row_factory = sqlite3.Row
            marks = ",".join("?" * len(ids))
            for r in conn.execute(f"SELECT * FROM line_items WHERE request_id IN ({marks})", list(ids)):
                d = dict(r)
                d["tokens"] = {k[2:]: v for k, v in d.items() if k.startswith("t_")}
                d["micros"] = {k[2:]: v for k, v in d.items() if k.startswith("m_")}
                d["usage_estimated"] = bool(d["usage_estimated"])
                items.append(LineItem.from_dict(d))
        finally:
            conn.close()
    else:
        assert stack.redis is not None
        for _, fields in stack.redis.xrange(stack.stream_key, "-", "+"):
            it = LineItem.from_dict(orjson.loads(fields[b"item"]))
            if it.request_id in ids:
                items.append(it)
    out: dict[str, list[LineItem]] = {}
    for it in items:
        out.setdefault(it.request_id, []).append(it)
    return out


def prompt_of(it: LineItem) -> int:
    t = it.tokens
    return t.uncached + t.implicit_hit + t.explicit_create + t.explicit_hit


def served_price(it: LineItem, pin: int, pout: int) -> int:
    return price_micros(it.tokens.served_input, IN_MICROS, pin) + price_micros(
        it.tokens.served_output, OUT_MICROS, pout
    )


def billed_generation(gens: list[dict[str, Any]], step: Step) -> dict[str, Any] | None:
    """The generation a row bills: the last one no retry replaced. An attempt the replica dropped
    before its first byte reached the client (``retry_drop``) is replaced by the next, or is no row when
    it was the last; a stream cut after its first byte (``cut``) is the row's generation."""
    kept = [g for g in gens if not (step.kind == "retry_drop" and g["outcome"] == "dropped")]
    return kept[-1] if kept else None


SEEN: dict[str, int] = {}  # what the schedules exercised (printed with -s: a run's coverage)


def check(sent: list[Sent], gens: dict[str, list[dict[str, Any]]], rows: dict[str, list[LineItem]]) -> None:
    for x in sent:
        got = rows.get(x.rid)
        key = f"{x.step.kind}/{x.step.front}:{got[0].source + ('~est' if got[0].usage_estimated else '') if got else 'no row'}"
        SEEN[key] = SEEN.get(key, 0) + 1
    by_rid = {x.rid: x for x in sent}
    tenant_sums: dict[str, list[int]] = {}
    for x in sent:
        assert x.rid, x
        got = rows.get(x.rid, [])
        assert len(got) <= 1, (x, got)  # never two rows for one generation
        row = got[0] if got else None
        g = billed_generation(gens.get(x.rid, []), x.step)
        ctx = (x, row, gens.get(x.rid))
        if row is not None:
            assert row.tenant == x.step.tenant, ctx
            sums = tenant_sums.setdefault(row.tenant, [0, 0])
            sums[0] += prompt_of(row) + row.tokens.served_input
            sums[1] += row.tokens.output + row.tokens.served_output
        if x.expect == "none" or x.status in (400, 502, 503, 504):
            assert row is None and g is None, ctx  # never reached a replica, or every attempt failed
            continue
        if row is not None and row.source in ("response_cache", "coalesced"):
            assert g is None, ctx  # served, no generation of its own
            assert x.expect in ("served_or_upstream", "pair"), ctx
            src = rows[x.source_of][0] if x.source_of in rows else None
            assert src is not None and src.source == "upstream", ctx
            assert (row.tokens.served_input, row.tokens.served_output) == (
                prompt_of(src),
                src.tokens.output,
            ), ctx
            pin, pout = (CO_IN, CO_OUT) if row.source == "coalesced" else (RC_IN, RC_OUT)
            assert row.total_micros == served_price(row, pin, pout), ctx
            continue
        # a generation upstream: its row, the replica's tokens or flagged estimated below them
        assert g is not None, ctx
        assert row is not None and row.source == "upstream", ctx
        assert row.replica_id is not None, ctx
        if x.step.kind in ("disconnect", "cut") and x.expect == "estimated":
            assert row.usage_estimated, ctx  # the replica's usage never came: the row says so
            assert g["outcome"] == ("aborted" if x.step.kind == "disconnect" else "dropped"), ctx
        if row.usage_estimated:
            assert x.expect == "estimated", ctx
            assert g["prompt_tokens"] - PROMPT_TOLERANCE <= prompt_of(row) <= g["prompt_tokens"], ctx
            assert 0 <= row.tokens.output <= g["completion_tokens"], ctx
        else:
            assert g["outcome"] == "completed", ctx
            assert (prompt_of(row), row.tokens.output) == (g["prompt_tokens"], g["completion_tokens"]), ctx
        if x.step.kind == "marked":
            explicit = row.tokens.explicit_create if x.source_of == "created" else row.tokens.explicit_hit
            assert explicit >= EXPLICIT_MIN and explicit + row.tokens.uncached == prompt_of(row), ctx
    pairs = [x for x in sent if x.expect == "pair" and x.status == 200]
    for x in pairs:  # of two identical requests at once, at most one generation
        other = by_rid[x.source_of or ""]
        sources = {rows[r][0].source for r in (x.rid, other.rid) if r in rows}
        assert "upstream" in sources and len(sources) == 2, (x, sources)
    # per tenant: the rows are the sums of what was checked above, each request once
    for tenant, (p, o) in tenant_sums.items():
        mine = [r[0] for rid, r in rows.items() if rid in by_rid and r[0].tenant == tenant]
        assert sum(prompt_of(r) + r.tokens.served_input for r in mine) == p
        assert sum(r.tokens.output + r.tokens.served_output for r in mine) == o


def wait_rows(
    stack: Stack, sent: list[Sent], gens: dict[str, list[dict[str, Any]]]
) -> dict[str, list[LineItem]]:
    """The ledger once every request that will have a row has it (rows of requests a client left are
    written in the background); bounded."""
    ids = {x.rid for x in sent if x.rid}
    want = {x.rid for x in sent if x.status not in (400, 502, 503, 504) and x.expect != "none"}
    deadline = time.monotonic() + 10
    while True:
        rows = ledger_rows(stack, ids)
        if want <= set(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


def settled_generations(urls: list[str], sent: list[Sent]) -> dict[str, list[dict[str, Any]]]:
    """The simulator's records once none of this schedule's is still running (an abort lands a moment
    after the client left)."""
    ids = {x.rid for x in sent}
    deadline = time.monotonic() + 10
    while True:
        gens = asyncio.run(generations(urls))
        running = [g for rid in ids for g in gens.get(rid, []) if g["outcome"] == "running"]
        if not running or time.monotonic() > deadline:
            return gens
        time.sleep(0.02)


def run_and_check(stack: Stack, schedule: list[Step]) -> None:
    sent = asyncio.run(run_schedule(stack, schedule))
    gens = settled_generations(stack.urls, sent)
    rows = wait_rows(stack, sent, gens)
    check(sent, gens, rows)


@settings(
    max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(schedule=st.lists(steps, min_size=1, max_size=6))
def test_every_generation_is_one_row_with_the_replicas_tokens(stack: Stack, schedule: list[Step]) -> None:
    run_and_check(stack, schedule)


def teardown_module() -> None:
    if os.environ.get("BILLING_PROPERTY_EXAMPLES"):
        print("\nschedules exercised:", *(f"{k}: {v}" for k, v in sorted(SEEN.items())), sep="\n  ")
