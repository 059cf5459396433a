"""Read and validate an OpenAI request body: size, encoding, JSON, the fields the gateway relies on.

Deep validation of sampling parameters is the replica's job (its 400 is relayed in OpenAI's shape);
here we check what the gateway itself needs to route, cache and bill, and every limit it names. The
limits that bound the work one body can cause come first, right after the JSON is decoded: the
number of messages (``limits.max_messages``: a 3.9 MB body of 100,000 short messages otherwise costs
a rendering, a cache key and a routing hash of all of them) and of sequences (``limits.max_n``:
``n`` and ``best_of``, forwarded as they came before).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from config.policy import LimitsConfig
from gateway.errors import GatewayError


@dataclass(slots=True)
class ParsedRequest:
    endpoint: str  # a key of ENDPOINTS: what the stages see (a front end maps its API onto "chat")
    body: dict[str, Any]
    model: str
    stream: bool
    prompt_chars: int


def _bad(message: str, param: str | None = None, code: str | None = "invalid_request") -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


def check_content_type(request: web.Request) -> None:
    ctype = request.headers.get("Content-Type")
    if ctype is None or ctype == "application/json":  # none: lenient (the body must still be JSON)
        return  # the exact common value: no split, strip and lower (3 calls a request)
    mime = ctype.split(";", 1)[0].strip().lower()
    if mime != "application/json" and not mime.endswith("+json"):
        raise GatewayError(
            415,
            f"Content-Type must be application/json, got {mime or 'nothing'}",
            code="unsupported_media_type",
        )


async def read_body(request: web.Request, limits: LimitsConfig) -> bytes:
    """Read the body within ``limits.max_body_bytes`` (413 beyond it, before reading when declared)."""
    limit = limits.max_body_bytes
    declared = request.content_length
    if declared is not None and declared > limit:
        raise GatewayError(
            413, f"request body of {declared} bytes exceeds the limit of {limit} bytes", code="body_too_large"
        )
    try:
        return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise GatewayError(
            413, f"request body exceeds the limit of {limit} bytes", code="body_too_large"
        ) from None


def decode_json_object(raw: bytes) -> dict[str, Any]:
    if not raw:
        raise _bad("request body is empty; expected a JSON object", code="invalid_json")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _bad("request body is not valid UTF-8", code="invalid_encoding") from None
        raise _bad(f"request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise _bad(f"request body must be a JSON object, got {type(body).__name__}", code="invalid_json")
    return body


def _text_chars(content: Any, param: str) -> int:
    """Characters of text in a message content (str, list of parts, or null)."""
    if content is None:
        return 0
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                raise _bad(f"{param}[{j}] must be an object (a content part)", f"{param}[{j}]")
            text = part.get("text")
            if isinstance(text, str):
                total += len(text)
        return total
    raise _bad(f"{param} must be a string, an array of content parts, or null", param)


def check_messages(body: dict[str, Any]) -> int:
    messages = body.get("messages")
    if messages is None:
        raise _bad("'messages' is a required property", "messages", "missing_required_parameter")
    if not isinstance(messages, list) or not messages:
        raise _bad("'messages' must be a non-empty array", "messages")
    chars = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise _bad(f"messages[{i}] must be an object", f"messages[{i}]")
        role = msg.get("role")
        if not isinstance(role, str) or not role:
            raise _bad(f"messages[{i}].role must be a non-empty string", f"messages[{i}].role")
        content = msg.get("content")
        if isinstance(content, str):  # the usual content: counted here, no call to ``_text_chars``
            chars += len(content)
        else:
            chars += _text_chars(content, f"messages[{i}].content")
    return chars


def _check_prompt(body: dict[str, Any]) -> int:
    if "prompt" not in body:
        raise _bad("'prompt' is a required property", "prompt", "missing_required_parameter")
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return sum(len(p) for p in prompt)
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return len(prompt) * 4
        if all(isinstance(p, list) and all(isinstance(t, int) for t in p) for p in prompt):
            return sum(len(p) for p in prompt) * 4
    raise _bad("'prompt' must be a string, an array of strings, or an array of token ids", "prompt")


def _check_input(body: dict[str, Any]) -> int:
    if "input" not in body:
        raise _bad("'input' is a required property", "input", "missing_required_parameter")
    inp = body["input"]
    if isinstance(inp, str):
        return len(inp)
    if isinstance(inp, list) and inp:
        return sum(len(x) if isinstance(x, str) else 4 for x in inp)
    raise _bad("'input' must be a string or a non-empty array", "input")


def _check_input_items(body: dict[str, Any]) -> int:
    """A Responses request: ``input`` (a string or input items), ``instructions``, the store fields."""
    if "input" not in body:
        raise _bad("'input' is a required property", "input", "missing_required_parameter")
    inp = body["input"]
    if isinstance(inp, str):
        chars = len(inp)
    elif isinstance(inp, list) and inp:
        chars = 0
        for i, item in enumerate(inp):
            where = f"input[{i}]"
            if not isinstance(item, dict):
                raise _bad(f"{where} must be an object (an input item)", where)
            kind = item.get("type", "message")
            if kind == "message":
                role = item.get("role")
                if not isinstance(role, str) or not role:
                    raise _bad(f"{where}.role must be a non-empty string", f"{where}.role")
                chars += _text_chars(item.get("content"), f"{where}.content")
            elif isinstance(kind, str):
                chars += sum(
                    len(v) for k, v in item.items() if k in ("arguments", "output") and isinstance(v, str)
                )
            else:
                raise _bad(f"{where}.type must be a string", f"{where}.type")
    else:
        raise _bad("'input' must be a string or a non-empty array of input items", "input")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("'instructions' must be a string", "instructions")
    previous = body.get("previous_response_id")
    if previous is not None and (
        not isinstance(previous, str) or not 0 < len(previous) <= 128 or not previous.isprintable()
    ):
        raise _bad("'previous_response_id' must be a response id", "previous_response_id")
    if body.get("store") is not None and not isinstance(body["store"], bool):
        raise _bad("'store' must be a boolean", "store")
    return chars + len(instructions or "")


def _check_anthropic_messages(body: dict[str, Any]) -> int:
    """An Anthropic Messages request: ``max_tokens``, ``messages`` of content blocks, ``system``."""
    if body.get("max_tokens") is None:
        raise _bad("max_tokens: Field required", "max_tokens", "missing_required_parameter")
    return _check_anthropic_count(body)


def _check_anthropic_count(body: dict[str, Any]) -> int:
    """An Anthropic ``count_tokens`` request: a Messages request without ``max_tokens``."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages: must be a non-empty array", "messages")
    chars = 0
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict) or msg.get("role") not in ("user", "assistant"):
            raise _bad(f"{where}: an object with role 'user' or 'assistant'", f"{where}.role")
        chars += _text_chars(msg.get("content"), f"{where}.content")
    system = body.get("system")
    if system is not None:
        chars += _text_chars(system, "system")
    return chars


def _strings(value: Any, name: str, *, ids: bool = False) -> int:
    """Characters of a string or a non-empty list of strings (of token ids: 4 a token)."""
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list) and value:
        if all(isinstance(v, str) for v in value):
            return sum(map(len, value))
        if ids and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return 4 * len(value)
    kinds = "a string, an array of strings or token ids" if ids else "a string or an array of strings"
    raise _bad(f"'{name}' must be {kinds}", name)


def _required(body: dict[str, Any], name: str) -> Any:
    if name not in body:
        raise _bad(f"'{name}' is a required property", name, "missing_required_parameter")
    return body[name]


def _check_prompt_or_messages(body: dict[str, Any]) -> int:
    """vLLM's /tokenize and /pooling: a ``prompt`` (``input`` for pooling) or chat ``messages``."""
    if "messages" in body:
        return check_messages(body)
    for name in ("prompt", "input"):
        if name in body:
            return _strings(body[name], name, ids=True)
    raise _bad("one of 'prompt', 'input' or 'messages' is required", "prompt", "missing_required_parameter")


def _check_tokens(body: dict[str, Any]) -> int:
    tokens = _required(body, "tokens")
    if not isinstance(tokens, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) for t in tokens
    ):
        raise _bad("'tokens' must be an array of token ids", "tokens")
    return 4 * len(tokens)


def _check_rerank(body: dict[str, Any]) -> int:
    query = _required(body, "query")
    if not isinstance(query, str):
        raise _bad("'query' must be a string", "query")
    documents = _required(body, "documents")
    if not isinstance(documents, list) or not documents:
        raise _bad("'documents' must be a non-empty array", "documents")
    chars = len(query)
    for i, doc in enumerate(documents):
        if isinstance(doc, str):
            chars += len(doc)
        elif isinstance(doc, dict):
            chars += _text_chars([doc], f"documents[{i}]")
        else:
            raise _bad(f"documents[{i}] must be a string or an object", f"documents[{i}]")
    return chars


def _check_score(body: dict[str, Any]) -> int:
    return _strings(_required(body, "text_1"), "text_1") + _strings(_required(body, "text_2"), "text_2")


def _check_classify(body: dict[str, Any]) -> int:
    return _strings(_required(body, "input"), "input")


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An inference endpoint: its path (on the gateway and, for the OpenAI front end, on the replica),
    its body check (which returns the prompt's characters), what the pipeline does with it, and the
    API its clients speak (a front end of ``gateway.pipeline.protocols``, mapped onto chat)."""

    path: str
    check: Callable[[dict[str, Any]], int]
    prompt_param: str = "prompt"  # the parameter a too-long prompt is reported on
    streams: bool = True  # may answer as SSE
    cacheable: bool = True  # the response cache may answer it
    billed: bool = True  # one ledger row per request
    frontend: str = "openai"


_PASS_THROUGH: dict[str, Any] = {"streams": False, "cacheable": False}

# The one list of inference endpoints: routes, admission and the upstream path all derive from it.
ENDPOINTS: dict[str, Endpoint] = {
    "chat": Endpoint("/v1/chat/completions", check_messages, "messages"),
    "completions": Endpoint("/v1/completions", _check_prompt),
    "embeddings": Endpoint("/v1/embeddings", _check_input, "input", **_PASS_THROUGH),
    "responses": Endpoint("/v1/responses", _check_input_items, "input", frontend="responses"),
    "messages": Endpoint("/v1/messages", _check_anthropic_messages, "messages", frontend="messages"),
    "count_tokens": Endpoint(
        "/v1/messages/count_tokens",
        _check_anthropic_count,
        "messages",
        **_PASS_THROUGH,
        billed=False,
        frontend="count_tokens",
    ),
    # vLLM's other endpoints, passed through with routing by model and tenancy
    "tokenize": Endpoint("/tokenize", _check_prompt_or_messages, **_PASS_THROUGH, billed=False),
    "detokenize": Endpoint("/detokenize", _check_tokens, "tokens", **_PASS_THROUGH, billed=False),
    "rerank": Endpoint("/v1/rerank", _check_rerank, "documents", **_PASS_THROUGH),
    "score": Endpoint("/v1/score", _check_score, "text_1", **_PASS_THROUGH),
    "pooling": Endpoint("/pooling", _check_prompt_or_messages, "input", **_PASS_THROUGH),
    "classify": Endpoint("/classify", _check_classify, "input", **_PASS_THROUGH),
}


def _check_common(body: dict[str, Any]) -> None:
    # ``name in body`` first: most of these fields are absent, and a ``dict.get`` is a call (16 of a
    # request's ~1,000, ``bench.profile --calls``) where ``in`` is not; the order of the checks is kept.
    if "stream" in body and (stream := body["stream"]) is not None and not isinstance(stream, bool):
        raise _bad("'stream' must be a boolean", "stream")
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of", "seed"):
        if name in body and (v := body[name]) is not None and (not isinstance(v, int) or isinstance(v, bool)):
            raise _bad(f"'{name}' must be an integer", name)
    for name in ("max_tokens", "max_completion_tokens", "max_output_tokens", "n", "best_of"):
        if name in body and (v := body[name]) is not None and v < 1:
            raise _bad(f"'{name}' must be at least 1", name)
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        if (
            name in body
            and (v := body[name]) is not None
            and (not isinstance(v, int | float) or isinstance(v, bool))
        ):
            raise _bad(f"'{name}' must be a number", name)


def _check_bounds(body: dict[str, Any], limits: LimitsConfig) -> None:
    # ``in`` before the lookup, as in ``_check_common``: three of the four fields are mostly absent
    # (10 calls a request before, 3 now); the order of the checks is kept.
    for name, code in (("messages", "too_many_messages"), ("input", "too_many_inputs")):
        if name in body and isinstance(items := body[name], list) and len(items) > limits.max_messages:
            raise _bad(
                f"'{name}' has {len(items)} items, more than the limit of {limits.max_messages}", name, code
            )
    for name in ("n", "best_of"):
        if name not in body:
            continue
        v = body[name]
        if isinstance(v, int) and not isinstance(v, bool) and v > limits.max_n:
            raise _bad(f"'{name}' is {v}, more than the limit of {limits.max_n}", name, "too_many_sequences")


def validate(endpoint: str, body: dict[str, Any], limits: LimitsConfig) -> ParsedRequest:
    _check_bounds(body, limits)
    model = body.get("model")
    if model is None:
        raise _bad("'model' is a required property", "model", "missing_required_parameter")
    if not isinstance(model, str) or not model:
        raise _bad("'model' must be a non-empty string", "model")
    spec = ENDPOINTS[endpoint]
    chars = spec.check(body)
    _check_common(body)
    if chars > limits.max_prompt_chars:  # the check's own condition: no call for a prompt within it
        check_prompt_chars(chars, spec, limits)
    return ParsedRequest(
        endpoint=endpoint,
        body=body,
        model=model,
        stream=spec.streams and "stream" in body and bool(body["stream"]),
        prompt_chars=chars,
    )


def check_prompt_chars(chars: int, spec: Endpoint, limits: LimitsConfig) -> None:
    if chars > limits.max_prompt_chars:
        raise _bad(
            f"prompt of {chars} characters exceeds the limit of {limits.max_prompt_chars}",
            spec.prompt_param,
            "prompt_too_long",
        )


async def parse_request(request: web.Request, endpoint: str, limits: LimitsConfig) -> ParsedRequest:
    check_content_type(request)
    raw = await read_body(request, limits)
    return validate(endpoint, decode_json_object(raw), limits)
