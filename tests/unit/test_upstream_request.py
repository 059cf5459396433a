"""The one builder of what a replica receives (``pipeline.upstream_request``): markers stripped, PII
masked, the usage chunk asked for a stream, the served model name and the tenant's salt, the fair
band as the engine's priority, and what the answer must undo; the client's body itself is never
changed."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from cache.pii import unmask_response
from config.policy import ModelPoolConfig, Policy
from gateway.fleet.pools import Pool
from gateway.pipeline.parse import ParsedRequest
from gateway.pipeline.tenant import Tenant
from gateway.pipeline.upstream_request import build
from router.fairness.classes import engine_priority

TENANT = Tenant("t1", "g", "salt-1", True, "t1")


def _pool(**cfg: Any) -> Pool:
    raw = {"name": "m", "replicas": [{"url": "http://127.0.0.1:1"}], **cfg}
    return Pool(cfg=ModelPoolConfig.model_validate(raw), router=None)  # type: ignore[arg-type]


def _chat(**body: Any) -> ParsedRequest:
    messages = [
        {
            "role": "system",
            "content": [{"type": "text", "text": "rules", "cache_control": {"type": "ephemeral"}}],
        },
        {"role": "user", "content": "mail me at jane.doe@example.com"},
    ]
    full = {"model": "m", "messages": messages, **body}
    return ParsedRequest("chat", full, "m", bool(full.get("stream")), 40)


def test_a_stream_is_sent_with_the_usage_chunk_asked_the_served_name_and_the_salt() -> None:
    parsed = _chat(stream=True, cache={"no-cache": False}, temperature=0)
    before = copy.deepcopy(parsed.body)
    req = build(parsed, _pool(served_model_name="served"), TENANT, None, marked=True)
    sent = orjson.loads(req.body)
    assert sent["stream_options"] == {"include_usage": True} and req.strip_usage
    assert sent["model"] == "served" and sent["cache_salt"] == "salt-1" and "cache" not in sent
    assert "cache_control" not in orjson.dumps(sent["messages"]).decode()  # markers stripped
    assert list(sent) == [
        "model",
        "messages",
        "stream",
        "temperature",
        "stream_options",
        "cache_salt",
    ]  # the client's order
    assert req.mapping is None and parsed.body == before  # the client's body is untouched


def test_masking_is_undone_by_the_mapping_it_returns() -> None:
    parsed = _chat(stream=False)
    req = build(parsed, _pool(), TENANT, None, marked=False, mask=True)
    sent = orjson.loads(req.body)
    assert "jane.doe@example.com" not in req.body.decode() and req.payload["messages"] == sent["messages"]
    assert req.mapping is not None
    masked = sent["messages"][1]["content"]
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": masked}}]}
    assert (
        unmask_response(answer, req.mapping)["choices"][0]["message"]["content"]
        == "mail me at jane.doe@example.com"
    )
    assert "stream_options" not in sent  # a whole answer carries its usage


def test_what_the_replicas_take_is_kept_and_what_they_reject_is_not_sent() -> None:
    parsed = _chat(stream=True, stream_options={"include_usage": True}, cache_salt="client's")
    kept = build(parsed, _pool(accepts_cache_control=True, backend="openai"), TENANT, "lora-a", marked=True)
    sent = orjson.loads(kept.body)
    assert "cache_control" in orjson.dumps(sent["messages"]).decode()  # the backend takes markers
    assert "cache_salt" not in sent  # an OpenAI backend rejects it
    assert sent["model"] == "m" and not kept.strip_usage  # the client asked for the usage chunk itself


@pytest.mark.parametrize(
    ("style", "backend", "by_rank"),
    [
        ("vllm", "vllm", [0, 1, 2, 3]),  # lower first: interactive 0 ... the batch band 3
        ("vllm", "sglang", [0, 1, 2, 3]),  # SGLang with --schedule-low-priority-values-first
        ("sglang", "sglang", [3, 2, 1, 0]),  # SGLang's default: higher first
    ],
)
def test_the_fair_band_becomes_the_engines_priority_in_its_sign(
    style: str, backend: str, by_rank: list[int]
) -> None:
    """Three classes and the batch band: the engine's ``priority`` puts the highest class first and
    batch lines last, in the engine's own order; a client's own field is replaced (its tenant's class
    is the one the engine sees), and the payload (the cache key's view) never carries it."""
    pool = _pool(engine_priority=style, backend=backend)
    for rank, want in enumerate(by_rank):
        req = build(_chat(priority=-50), pool, TENANT, None, marked=False, rank=rank, bands=4)
        assert orjson.loads(req.body)["priority"] == want
        assert req.payload["priority"] == -50
    assert engine_priority(style, 0, 4) == by_rank[0]


def test_engine_priority_none_or_fairness_off_sends_nothing() -> None:
    """``none`` (the default) adds no field and leaves a client's own as it is; fairness off (no band)
    adds none even where the pool asks."""
    plain = build(_chat(), _pool(), TENANT, None, marked=False, rank=0, bands=4)
    assert "priority" not in orjson.loads(plain.body)
    own = build(_chat(priority=7), _pool(), TENANT, None, marked=False, rank=2, bands=4)
    assert orjson.loads(own.body)["priority"] == 7
    off = build(_chat(), _pool(engine_priority="vllm"), TENANT, None, marked=False)
    assert "priority" not in orjson.loads(off.body)
    with pytest.raises(ValueError, match="engine_priority"):
        engine_priority("lifo", 0, 4)


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"engine_priority": "vllm", "backend": "openai"}, "vllm or sglang backend"),
        ({"engine_priority": "sglang", "backend": "vllm"}, "batch lines first"),
        ({"engine_priority": "fifo"}, "engine_priority"),
    ],
)
def test_engine_priority_settings_that_cannot_work_are_refused(cfg: dict[str, Any], match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        _pool(**cfg)


def test_engine_priority_needs_fairness_enabled() -> None:
    raw = {"models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:1"}], "engine_priority": "vllm"}]}
    with pytest.raises(ValidationError, match=r"needs fairness\.enabled"):
        Policy.model_validate(raw)
    on = {**raw, "fairness": {"enabled": True, "slots_per_replica": 4}}
    assert Policy.model_validate(on).models[0].engine_priority == "vllm"
