"""vLLM's endpoints besides generation, on a simulated replica: ``/tokenize``, ``/detokenize``,
``/v1/rerank``, ``/v1/score``, ``/pooling``, ``/classify``, in vLLM's request and answer shapes.

Token ids are the prompt's bytes 4 at a time (little-endian), the same packing the completions endpoint
reads token-id prompts with, so ``/detokenize`` inverts ``/tokenize``. Scores, pooled vectors and class
probabilities derive from the text's hash: deterministic, never meaningful.
"""

from __future__ import annotations

import math
import os
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from sim import textgen
from sim.http import (
    REPLICA_KEY,
    BadRequest,
    check_model,
    error_response,
    json_response,
    read_body,
    record_trace,
)
from sim.kvcache import count_tokens
from sim.prompt import PromptError, render_chat
from sim.state import Replica


def token_ids(data: bytes) -> list[int]:
    padded = data + b"\0" * (-len(data) % 4)
    return list(struct.unpack(f"<{len(padded) // 4}I", padded))


def _texts(value: Any, name: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise BadRequest(400, f"'{name}' must be a string or a non-empty list of strings", name)


def _tokens(rep: Replica, texts: list[str]) -> int:
    return sum(count_tokens(len(t.encode()), rep.cfg.bytes_per_token) for t in texts)


def _similarity(a: str, b: str) -> float:
    u, v = textgen.embedding(a.encode(), 8), textgen.embedding(b.encode(), 8)
    dot = sum(x * y for x, y in zip(u, v, strict=True))
    norm = math.sqrt(sum(x * x for x in u) * sum(y * y for y in v)) or 1.0
    return 1 / (1 + math.exp(-4 * dot / norm))


def _head(kind: str, model: str) -> dict[str, Any]:
    return {
        "id": f"{kind}-{os.urandom(12).hex()}",
        "object": "list",
        "created": int(time.time()),
        "model": model,
    }


def tokenize(rep: Replica, body: dict[str, Any], model: str) -> dict[str, Any]:
    if "messages" in body:
        try:
            data = render_chat(body)
        except PromptError as exc:
            raise BadRequest(400, str(exc), "messages") from None
    else:
        data = _texts(body.get("prompt"), "prompt")[0].encode()
    ids = token_ids(data)
    return {"count": len(ids), "max_model_len": rep.cfg.max_model_len, "tokens": ids, "token_strs": None}


def detokenize(rep: Replica, body: dict[str, Any], model: str) -> dict[str, Any]:
    ids = body.get("tokens")
    if not isinstance(ids, list) or not all(isinstance(t, int) and 0 <= t < 2**32 for t in ids):
        raise BadRequest(400, "'tokens' must be a list of token ids", "tokens")
    data = struct.pack(f"<{len(ids)}I", *ids).rstrip(b"\0")
    return {"prompt": data.decode("utf-8", errors="replace")}


def rerank(rep: Replica, body: dict[str, Any], model: str) -> dict[str, Any]:
    query = body.get("query")
    if not isinstance(query, str):
        raise BadRequest(400, "'query' must be a string", "query")
    docs = [
        d if isinstance(d, str) else str(d.get("text", ""))
        for d in body.get("documents") or []
        if isinstance(d, str | dict)
    ]
    if not docs:
        raise BadRequest(400, "'documents' must be a non-empty list", "documents")
    results: list[dict[str, Any]] = [
        {"index": i, "document": {"text": d}, "relevance_score": _similarity(query, d)}
        for i, d in enumerate(docs)
    ]
    results.sort(key=lambda r: -r["relevance_score"])
    top_n = body.get("top_n")
    if isinstance(top_n, int) and top_n > 0:
        results = results[:top_n]
    head = _head("rerank", model)
    return {
        "id": head["id"],
        "model": model,
        "usage": {"total_tokens": _tokens(rep, [query, *docs])},
        "results": results,
    }


def score(rep: Replica, body: dict[str, Any], model: str) -> dict[str, Any]:
    left, right = _texts(body.get("text_1"), "text_1"), _texts(body.get("text_2"), "text_2")
    if len(left) == 1:
        left = left * len(right)
    if len(left) != len(right):
        raise BadRequest(400, "text_1 and text_2 must have the same length (or text_1 one item)", "text_1")
    data = [
        {"index": i, "object": "score", "score": _similarity(a, b)}
        for i, (a, b) in enumerate(zip(left, right, strict=True))
    ]
    tokens = _tokens(rep, left + right)
    return {**_head("score", model), "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def pooling(rep: Replica, body: dict[str, Any], model: str) -> dict[str, Any]:
    texts = [render_chat(body).decode()] if "messages" in body else _texts(body.get("input"), "input")
    dim = rep.cfg.embedding_dim
    data = [
        {"index": i, "object": "pooling", "data": textgen.embedding(t.encode(), dim)}
        for i, t in enumerate(texts)
    ]
    tokens = _tokens(rep, texts)
    return {**_head("pool", model), "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}


def classify(rep: Replica, body: dict[str, Any], model: str) -> dict[str, Any]:
    texts = _texts(body.get("input"), "input")
    data = []
    for i, t in enumerate(texts):
        p = _similarity(t, "positive")
        probs = [1 - p, p]
        data.append(
            {"index": i, "label": ("negative", "positive")[p > 0.5], "probs": probs, "num_classes": 2}
        )
    tokens = _tokens(rep, texts)
    return {
        **_head("classify", model),
        "data": data,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


Answer = Callable[[Replica, dict[str, Any], str], dict[str, Any]]


def _endpoint(answer: Answer) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        rep = request.app[REPLICA_KEY]
        rep.counters.requests += 1
        record_trace(rep, request)
        try:
            body = await read_body(request)
            rep.requests_log.append(body)
            if rep.faults.fail_status is not None:
                raise BadRequest(rep.faults.fail_status, f"simulated failure {rep.faults.fail_status}")
            result = answer(rep, body, check_model(rep, body))
        except BadRequest as exc:
            rep.counters.errors += 1
            return error_response(exc.status, str(exc), exc.param)
        rep.counters.completed += 1
        return json_response(result)

    return handler


ROUTES: dict[str, Answer] = {
    "/tokenize": tokenize,
    "/detokenize": detokenize,
    "/v1/rerank": rerank,
    "/rerank": rerank,
    "/v1/score": score,
    "/score": score,
    "/pooling": pooling,
    "/classify": classify,
}


def add_routes(app: web.Application) -> None:
    for path, answer in ROUTES.items():
        app.router.add_post(path, _endpoint(answer))
