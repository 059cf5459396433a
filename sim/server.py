"""The aiohttp application of one simulated vLLM replica.

Handlers parse the request, consult the pure models (prompt rendering, prefix cache, latency) kept
in a :class:`~sim.state.Replica`, and answer in vLLM's/OpenAI's wire format. The hot path at
``speed == 0`` does no sleeping and writes a whole stream in one go.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from sim import extras, latency, lora, protocols, textgen
from sim.config import Faults, SimConfig
from sim.engine import EngineRequest, context_len
from sim.engine_loop import Progress
from sim.http import JSON as _JSON
from sim.http import REPLICA_KEY, error_response, record_trace
from sim.http import BadRequest as _BadRequest
from sim.http import check_model as _check_model
from sim.http import json_response as _json
from sim.http import read_body as _read_body
from sim.kvcache import block_hashes, count_tokens
from sim.metrics import CONTENT_TYPE, make_registry, render
from sim.prompt import PromptError, render_chat, render_completion
from sim.state import Replica

_ENCODER_KEY: web.AppKey[Any] = web.AppKey("sim_encoder", object)
_REGISTRY_KEY: web.AppKey[Any] = web.AppKey("sim_registry", object)

_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
_DONE = b"data: [DONE]\n\n"


class _SimulatedDrop(Exception):
    """The ``drop_mid_stream_after`` fault closed the connection (not counted as a cancellation)."""


def _sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _max_tokens(cfg: SimConfig, body: dict[str, Any], prompt_tokens: int) -> int:
    value = body.get("max_completion_tokens")
    if value is None:
        value = body.get("max_tokens")
    if value is None:
        value = cfg.default_max_tokens
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _BadRequest(400, "max_tokens must be a positive integer", "max_tokens")
    limit = context_len(cfg.max_model_len, cfg.kv_capacity_blocks, cfg.block_size)
    if prompt_tokens + value > limit:
        raise _BadRequest(
            400,
            f"This model's maximum context length is {limit} tokens. However, you requested "
            f"{prompt_tokens + value} tokens ({prompt_tokens} in the messages, {value} in the completion).",
            "max_tokens",
        )
    return value


def _priority(body: dict[str, Any]) -> int:
    """The body's ``priority`` (vLLM's extra field, default 0; an fcfs engine ignores it, as vLLM V1)."""
    value = body.get("priority")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise _BadRequest(400, "priority must be an integer", "priority")
    return value


def _sampling(body: dict[str, Any]) -> tuple[int | None, float]:
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise _BadRequest(400, "seed must be an integer", "seed")
    temperature = body.get("temperature", 1.0)
    if temperature is None:
        temperature = 1.0
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        raise _BadRequest(400, "temperature must be a non-negative number", "temperature")
    return seed, float(temperature)


async def _hang(rep: Replica) -> web.Response:
    """Answer nothing until the client goes away (the task is then cancelled) or the limit passes."""
    await asyncio.sleep(rep.cfg.hang_limit_s)
    return error_response(504, "simulated hang ended")


class _Job:
    """One generation request, parsed and validated."""

    __slots__ = (
        "body", "chat", "data", "hashes", "include_usage", "max_tokens", "model", "priority",
        "prompt_tokens", "record", "report_cached", "rid", "seed", "shape", "stream", "temperature",
    )  # fmt: skip

    def __init__(
        self, rep: Replica, body: dict[str, Any], chat: bool, shape: protocols.Shape | None = None
    ) -> None:
        cfg = rep.cfg
        self.shape = shape  # another API served on top of chat (Responses, Anthropic Messages), as vLLM
        self.report_cached = cfg.report_cached_tokens
        try:
            body = shape.to_chat(body) if shape is not None else body
        except PromptError as exc:
            raise _BadRequest(400, str(exc), "input") from None
        self.body = body
        self.chat = chat
        self.model = _check_model(rep, body)
        try:
            if chat:
                data, bpt = render_chat(body), cfg.bytes_per_token
            else:
                data, bpt = render_completion(body, cfg.bytes_per_token)
        except PromptError as exc:
            raise _BadRequest(400, str(exc), "messages" if chat else "prompt") from None
        salt = body.get("cache_salt")
        if salt is not None and (not isinstance(salt, str) or not salt):
            raise _BadRequest(400, "cache_salt must be a non-empty string", "cache_salt")
        self.data = data
        self.prompt_tokens = count_tokens(len(data), bpt)
        seed = lora.cache_seed(rep, self.model, salt)
        self.hashes = block_hashes(data, block_size=cfg.block_size, bytes_per_token=bpt, cache_salt=seed)
        self.max_tokens = _max_tokens(cfg, body, self.prompt_tokens)
        self.seed, self.temperature = _sampling(body)
        self.priority = _priority(body)
        self.stream = bool(body.get("stream"))
        opts = body.get("stream_options")
        self.include_usage = self.stream and isinstance(opts, dict) and bool(opts.get("include_usage"))
        self.rid = ("chatcmpl-" if chat else "cmpl-") + os.urandom(16).hex()
        self.record: dict[str, Any] = {}  # the replica's record of this generation (``start_generation``)

    def generated(self, rep: Replica, n: int) -> None:
        """``n`` more tokens went out: the replica's counter and this generation's record."""
        rep.counters.generation_tokens += n
        self.record["completion_tokens"] = self.record.get("completion_tokens", 0) + n

    def admitted(self, rep: Replica, cached: int) -> None:
        """The engine took the prompt, ``cached`` of its tokens from the prefix cache."""
        rep.counters.prompt_tokens += self.prompt_tokens
        rep.counters.cached_tokens += cached
        self.record["cached_tokens"] = cached

    def answer_tokens(self, rep: Replica) -> list[str]:
        nonce = 0
        if self.temperature > 0 and self.seed is None:
            nonce = rep.next_nonce()
        base = textgen.answer_seed(self.data, self.seed, self.temperature, nonce)
        return textgen.tokens(base, self.max_tokens)

    def usage(self, cached: int, completion: int) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + completion,
            "completion_tokens": completion,
        }
        if self.report_cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
        return usage

    def full_response(
        self, created: int, toks: list[str], cached: int, finish: str = "length"
    ) -> dict[str, Any]:
        if self.shape is not None:
            return self.shape.full_response(self, created, toks, cached)
        text = "".join(toks)
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            obj = "chat.completion"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
            obj = "text_completion"
        return {
            "id": self.rid,
            "object": obj,
            "created": created,
            "model": self.model,
            "choices": [choice],
            "usage": self.usage(cached, len(toks)),
        }

    def chunk(self, created: int, piece: str | None, finish: str | None, first: bool = False) -> bytes:
        if self.chat:
            delta: dict[str, Any] = {}
            if first:
                delta["role"] = "assistant"
            if piece is not None:
                delta["content"] = piece
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion.chunk"
        else:
            choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish}
            obj = "text_completion"
        if finish is not None:
            choice["stop_reason"] = None
        return _sse(
            {"id": self.rid, "object": obj, "created": created, "model": self.model, "choices": [choice]}
        )

    def usage_chunk(self, created: int, cached: int, completion: int) -> bytes:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return _sse(
            {
                "id": self.rid,
                "object": obj,
                "created": created,
                "model": self.model,
                "choices": [],
                "usage": self.usage(cached, completion),
            }
        )

    @property
    def chunk_object(self) -> str:
        return "chat.completion.chunk" if self.chat else "text_completion"

    @property
    def lead(self) -> int:
        """Events sent before the first token: chat opens with a role-only chunk, like vLLM."""
        if self.shape is not None:
            return self.shape.lead
        return 1 if self.chat else 0

    def events(self, created: int, toks: list[str], cached: int, finish: str = "length") -> list[bytes]:
        """Every SSE event of the stream in order, ``[DONE]`` included."""
        if self.shape is not None:
            return self.shape.events(self, created, toks, cached)
        out = [self.chunk(created, "", None, first=True)] if self.chat else []
        # Token chunks differ only in their text: splice it between a fixed head and tail (cheap).
        head = orjson.dumps(
            {"id": self.rid, "object": self.chunk_object, "created": created, "model": self.model}
        )[:-1]
        field = b'"delta":{"content":' if self.chat else b'"text":'
        pre = b"data: " + head + b',"choices":[{"index":0,' + field
        post = (b"}" if self.chat else b"") + b',"logprobs":null,"finish_reason":null}]}\n\n'
        dumps = orjson.dumps
        out.extend(pre + dumps(tok) + post for tok in toks)
        out.append(self.chunk(created, None if self.chat else "", finish))
        if self.include_usage:
            out.append(self.usage_chunk(created, cached, len(toks)))
        out.append(_DONE)
        return out


def _malformed_response(job: _Job) -> web.StreamResponse:
    if job.stream:
        return web.Response(
            status=200,
            body=b'data: {"id": "broken", "choices": [{"delta": {"content": "x"\n\ndata: [DONE]\n\n',
            headers=_SSE_HEADERS,
        )
    return web.Response(status=200, body=b'{"id": "broken", "choices": [', content_type=_JSON)


def _abort(request: web.Request) -> None:
    transport = request.transport
    if transport is not None:
        transport.close()


async def _send_stream(
    request: web.Request,
    rep: Replica,
    job: _Job,
    toks: list[str],
    cached: int,
    per_token_s: float,
    t0: float,
    finish: str = "length",
) -> web.StreamResponse:
    created = int(time.time())
    events = job.events(created, toks, cached, finish)
    drop_after = rep.faults.drop_mid_stream_after
    resp = web.StreamResponse(status=200, headers=_SSE_HEADERS)
    await resp.prepare(request)
    if drop_after is None and per_token_s == 0.0:
        rep.ttft.observe(time.perf_counter() - t0)
        await resp.write(b"".join(events))
        job.generated(rep, len(toks))
    else:
        for i, event in enumerate(events):
            if drop_after is not None and i >= drop_after:
                _abort(request)
                raise _SimulatedDrop
            if per_token_s and 1 <= i - job.lead < len(toks):
                await asyncio.sleep(per_token_s)
            await resp.write(event)
            if i == 0:
                rep.ttft.observe(time.perf_counter() - t0)
            if 0 <= i - job.lead < len(toks):
                job.generated(rep, 1)  # counted as sent, so a cut stream counts less
    await resp.write_eof()
    return resp


async def _whole(
    request: web.Request, rep: Replica, job: _Job, toks: list[str], cached: int, finish: str = "length"
) -> web.Response:
    """A non-streamed answer (its first half only, then a cut connection, under ``drop_mid_stream_after``)."""
    job.generated(rep, len(toks))
    payload = orjson.dumps(job.full_response(int(time.time()), toks, cached, finish))
    if rep.faults.drop_mid_stream_after is not None:
        await _send_dropped_json(request, payload)  # raises _SimulatedDrop
    return web.Response(body=payload, content_type=_JSON)


async def _send_dropped_json(request: web.Request, payload: bytes) -> web.StreamResponse:
    """Headers and half of the body, then the connection closes: a truncated non-stream answer."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": _JSON})
    resp.content_length = len(payload)
    await resp.prepare(request)
    await resp.write(payload[: len(payload) // 2])
    _abort(request)
    raise _SimulatedDrop


async def _generate(
    request: web.Request, chat: bool, shape: type[protocols.Shape] | None = None
) -> web.StreamResponse:
    rep = request.app[REPLICA_KEY]
    counters = rep.counters
    t0 = time.perf_counter()
    counters.requests += 1
    record_trace(rep, request)
    record: dict[str, Any] = {}  # the generation's, once the request is valid
    try:
        try:
            body = await _read_body(request)
            rep.requests_log.append(body)
            faults = rep.faults
            if faults.fail_status is not None:
                counters.errors += 1
                return error_response(faults.fail_status, f"simulated failure {faults.fail_status}")
            if faults.hang:
                return await _hang(rep)
            job = _Job(rep, body, chat, shape(rep, body) if shape is not None else None)
        except _BadRequest as exc:
            counters.errors += 1
            return error_response(exc.status, str(exc), exc.param)
        job.record = record = rep.start_generation(
            request.headers.get("X-Request-Id"), request.path, job.stream, job.prompt_tokens
        )
        record["received_at"] = time.time() - (
            time.perf_counter() - t0
        )  # wall clock, as other processes read it
        if faults.malformed:
            record["outcome"] = "malformed"
            job.admitted(rep, 0)  # it took the prompt: the counter and the record agree
            return _malformed_response(job)
        resp = await _run(request, rep, job, faults, t0)
        record["outcome"] = "completed"
        record["finish_reason"] = record["finish_reason"] or "length"
        return resp
    except asyncio.CancelledError:
        counters.cancelled += 1
        record["outcome"] = "aborted"
        raise
    except ConnectionResetError:
        counters.cancelled += 1
        record["outcome"] = "aborted"
        return web.Response(status=499)  # never reaches the client: its connection is gone
    except _SimulatedDrop:
        counters.dropped += 1
        record["outcome"] = "dropped"
        return web.Response(status=499)  # idem: the fault closed the connection


async def _run(
    request: web.Request, rep: Replica, job: _Job, faults: Faults, t0: float
) -> web.StreamResponse:
    if rep.loop is not None:
        return await _run_engine(request, rep, job, t0)
    cfg = rep.cfg
    limiter = rep.limiter
    if not limiter.try_acquire():
        await limiter.acquire()
    reserved = latency.kv_blocks_needed(job.prompt_tokens, job.max_tokens, cfg.block_size)
    rep.kv_blocks_in_use += reserved
    try:
        cached = rep.kv.match(job.hashes) * cfg.block_size
        counters = rep.counters
        job.admitted(rep, cached)
        d = latency.delays(cfg, job.prompt_tokens - cached, faults.slow_factor)
        if d.prefill_s:
            await asyncio.sleep(d.prefill_s)
        rep.kv.insert(job.hashes)
        toks = job.answer_tokens(rep)
        finish = "length"
        if faults.abort_after is not None:
            toks, finish = toks[: faults.abort_after], "abort"
        job.record["finish_reason"] = finish
        if job.stream:
            resp = await _send_stream(request, rep, job, toks, cached, d.per_token_s, t0, finish)
        else:
            rep.ttft.observe(time.perf_counter() - t0)
            if d.per_token_s and len(toks) > 1:
                await asyncio.sleep(d.per_token_s * (len(toks) - 1))
            resp = await _whole(request, rep, job, toks, cached, finish)
        counters.completed += 1
        rep.e2e.observe(time.perf_counter() - t0)
        return resp
    finally:
        rep.kv_blocks_in_use -= reserved
        limiter.release()


async def _run_engine(request: web.Request, rep: Replica, job: _Job, t0: float) -> web.StreamResponse:
    """Engine mode: the request joins the engine's queue; tokens come out as its steps end."""
    assert rep.loop is not None
    ereq = EngineRequest(job.hashes, job.prompt_tokens, job.max_tokens, priority=job.priority)
    progress = rep.loop.submit(ereq)
    try:
        toks = job.answer_tokens(rep)
        counters = rep.counters
        if job.stream:
            resp = await _stream_engine(request, rep, job, toks, progress, t0)
        else:
            await progress.next()
            rep.ttft.observe(time.perf_counter() - t0)
            while not progress.done:
                await progress.next()
            job.admitted(rep, ereq.cached_tokens)
            resp = await _whole(request, rep, job, toks, ereq.cached_tokens)
        counters.completed += 1
        rep.e2e.observe(time.perf_counter() - t0)
        return resp
    finally:
        if not progress.done:
            rep.loop.abort(ereq)


def _engine_times(record: dict[str, Any], ereq: EngineRequest) -> None:
    """Where a streamed generation's first token came from: the wall clock it is written at, its wait in
    the engine's queue and its engine TTFT (the step that produced it ended), in seconds
    (``finished_at``: the wall clock its stream ended)."""
    record["first_write_at"] = time.time()
    if ereq.first_scheduled is not None and ereq.first_token is not None:
        record["engine_queue_s"] = ereq.first_scheduled - ereq.arrival
        record["engine_ttft_s"] = ereq.first_token - ereq.arrival


async def _stream_engine(
    request: web.Request, rep: Replica, job: _Job, toks: list[str], progress: Progress, t0: float
) -> web.StreamResponse:
    """Write each step's tokens as they come (several per write with ``stream_interval`` > 1)."""
    resp = web.StreamResponse(status=200, headers=_SSE_HEADERS)
    await resp.prepare(request)
    n = await progress.next()
    ereq = progress.request
    rep.ttft.observe(time.perf_counter() - t0)
    _engine_times(job.record, ereq)
    job.admitted(rep, ereq.cached_tokens)
    events = job.events(int(time.time()), toks, ereq.cached_tokens)
    drop_after = rep.faults.drop_mid_stream_after
    lead, written, sent = job.lead, 0, 0
    while True:
        end = len(events) if progress.done else lead + n
        if drop_after is not None and end > drop_after:
            await resp.write(b"".join(events[written:drop_after]))
            _abort(request)
            raise _SimulatedDrop
        await resp.write(b"".join(events[written:end]))
        job.generated(rep, min(n, len(toks)) - sent)
        written, sent = end, min(n, len(toks))
        if progress.done:
            break
        n = await progress.next()
    await resp.write_eof()
    job.record["finished_at"] = time.time()
    return resp


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=False)


async def responses(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True, shape=protocols.Responses)


async def messages(request: web.Request) -> web.StreamResponse:
    return await _generate(request, chat=True, shape=protocols.Messages)


async def embeddings(request: web.Request) -> web.StreamResponse:
    rep = request.app[REPLICA_KEY]
    rep.counters.requests += 1
    record_trace(rep, request)
    try:
        body = await _read_body(request)
        rep.requests_log.append(body)
        if rep.faults.fail_status is not None:
            rep.counters.errors += 1
            return error_response(rep.faults.fail_status, f"simulated failure {rep.faults.fail_status}")
        model = _check_model(rep, body)
        inputs = body.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not inputs or not all(isinstance(s, str) for s in inputs):
            raise _BadRequest(400, "'input' must be a string or a non-empty list of strings", "input")
    except _BadRequest as exc:
        rep.counters.errors += 1
        return error_response(exc.status, str(exc), exc.param)
    data, tokens = [], 0
    encoder = request.app.get(_ENCODER_KEY)
    if encoder is not None:
        # The forward pass takes milliseconds: off the event loop, so health checks still answer.
        vectors = (await asyncio.to_thread(encoder.encode, inputs)).tolist()
        tokens = sum(encoder.token_count(t) for t in inputs)
    else:
        vectors = []
        for text in inputs:
            raw = text.encode("utf-8")
            tokens += count_tokens(len(raw), rep.cfg.bytes_per_token)
            vectors.append(textgen.embedding(raw, rep.cfg.embedding_dim))
    for i, vec in enumerate(vectors):
        data.append({"object": "embedding", "index": i, "embedding": vec})
    rep.counters.prompt_tokens += tokens
    rep.counters.completed += 1
    return _json(
        {
            "id": "embd-" + os.urandom(16).hex(),
            "object": "list",
            "created": int(time.time()),
            "model": model,
            "data": data,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


async def models(request: web.Request) -> web.Response:
    rep = request.app[REPLICA_KEY]
    adapters = lora.listed(rep)
    data = [
        {
            "id": name,
            "object": "model",
            "created": 0,
            "owned_by": "vllm",
            "root": name,
            "parent": None,
            "max_model_len": rep.cfg.max_model_len,
        }
        for name in rep.cfg.models
    ]
    return _json({"object": "list", "data": data + adapters})


async def health(request: web.Request) -> web.Response:
    status = request.app[REPLICA_KEY].faults.health_status
    return web.Response(status=status or 200)


async def version(request: web.Request) -> web.Response:
    return _json({"version": "0.0.0-sim"})


async def metrics(request: web.Request) -> web.Response:
    body = render(request.app[_REGISTRY_KEY])
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def sim_requests(request: web.Request) -> web.Response:
    return _json(list(request.app[REPLICA_KEY].requests_log))


async def sim_generations(request: web.Request) -> web.Response:
    """Every generation started (last ``max_recorded_requests``): request id, tokens, how it ended."""
    return _json(list(request.app[REPLICA_KEY].generations))


async def sim_traces(request: web.Request) -> web.Response:
    return _json(list(request.app[REPLICA_KEY].traces))


async def sim_stats(request: web.Request) -> web.Response:
    return _json(request.app[REPLICA_KEY].stats())


async def sim_reset(request: web.Request) -> web.Response:
    rep = request.app[REPLICA_KEY]
    rep.reset()
    return _json(rep.stats())


async def sim_faults(request: web.Request) -> web.Response:
    rep = request.app[REPLICA_KEY]
    if request.method == "GET":
        return _json(rep.faults.to_json())
    try:
        body = orjson.loads(await request.read() or b"{}")
        faults = Faults.from_json(body)
    except (orjson.JSONDecodeError, ValueError) as exc:
        return error_response(400, str(exc))
    rep.set_faults(faults)
    return _json(faults.to_json())


def _load_minilm() -> Any:
    """The real embedding model; imported only when asked for, since numpy is an optional extra."""
    minilm = importlib.import_module("sim.minilm")
    return minilm.MiniLM()


def create_app(cfg: SimConfig | None = None, index: int = 0) -> web.Application:
    """The application of one replica; its state is ``app[REPLICA_KEY]``.

    Serve it with ``web.AppRunner(app, handler_cancellation=True)`` so that a client going away
    cancels its handler (see :func:`sim.fleet.start_replicas`).
    """
    rep = Replica(cfg or SimConfig(), index)
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[REPLICA_KEY] = rep

    async def engine_ctx(app: web.Application) -> AsyncIterator[None]:
        rep.start()
        yield
        await rep.stop()

    app.cleanup_ctx.append(engine_ctx)
    app[_REGISTRY_KEY] = make_registry(rep)
    if rep.cfg.embedding_model == "minilm":
        app[_ENCODER_KEY] = _load_minilm()
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/responses", responses)
    app.router.add_post("/v1/messages", messages)
    extras.add_routes(app)
    lora.add_routes(app)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_get("/version", version)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/sim/requests", sim_requests)
    app.router.add_get("/sim/traces", sim_traces)
    app.router.add_get("/sim/generations", sim_generations)
    app.router.add_get("/sim/stats", sim_stats)
    app.router.add_post("/sim/reset", sim_reset)
    app.router.add_post("/sim/faults", sim_faults)
    app.router.add_get("/sim/faults", sim_faults)
    return app
