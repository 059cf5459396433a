"""Response-cache keys: invariance, sensitivity, exclusions, tenant isolation, rules, cache controls."""

from __future__ import annotations

import hashlib
import hmac
import json
import random
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.keys import (
    EXCLUDED_FIELDS,
    CacheControl,
    cache_key,
    canonical_json,
    is_cacheable,
    parse_cache_control,
    tenant_tag,
)

CHAT = "/v1/chat/completions"
SALT = b"tenant-salt-a"

BASE: dict[str, Any] = {
    "model": "llama",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
    ],
    "temperature": 0,
    "max_tokens": 32,
}

# Every output-affecting field with two different values.
INCLUDED: dict[str, tuple[Any, Any]] = {
    "model": ("llama", "qwen"),
    "messages": ([{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}]),
    "tools": (
        [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        [{"type": "function", "function": {"name": "g", "parameters": {}}}],
    ),
    "tool_choice": ("auto", "none"),
    "response_format": ({"type": "json_object"}, {"type": "text"}),
    "temperature": (0, 0.5),
    "top_p": (1, 0.9),
    "top_k": (-1, 40),
    "max_tokens": (16, 17),
    "stop": (["\n"], ["END"]),
    "seed": (1, 2),
    "n": (1, 2),
    "presence_penalty": (0, 0.5),
    "frequency_penalty": (0, 0.5),
    "repetition_penalty": (1, 1.1),
    "logit_bias": ({"50256": -100}, {"50256": 100}),
    "logprobs": (True, False),
    "top_logprobs": (1, 5),
    "reasoning_effort": ("low", "high"),
    "reasoning": ({"effort": "low"}, {"effort": "high"}),
    "guided_json": ({"type": "object"}, {"type": "array"}),
    "guided_regex": ("a+", "b+"),
    "guided_choice": (["y", "n"], ["n", "y"]),
    "structured_outputs": ({"regex": "a"}, {"regex": "b"}),
    "parallel_tool_calls": (True, False),
    "some_future_field": (1, 2),  # unknown fields count: they may change the answer
}


def shuffled(obj: Any, rng: random.Random) -> Any:
    """The same JSON value with object keys in a random order at every level."""
    if isinstance(obj, dict):
        items = list(obj.items())
        rng.shuffle(items)
        return {k: shuffled(v, rng) for k, v in items}
    if isinstance(obj, list):
        return [shuffled(v, rng) for v in obj]
    return obj


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(extra=st.dictionaries(st.sampled_from(sorted(INCLUDED)), json_values, max_size=5), seed=st.integers())
def test_key_invariant_under_field_order_and_whitespace(extra: dict[str, Any], seed: int) -> None:
    body = {**BASE, **extra}
    rng = random.Random(seed)
    reordered = shuffled(body, rng)
    respaced = json.loads(json.dumps(reordered, indent=rng.choice([None, 1, 4]), separators=(", ", " : ")))
    assert cache_key(CHAT, body, SALT) == cache_key(CHAT, reordered, SALT) == cache_key(CHAT, respaced, SALT)


@pytest.mark.parametrize("field", sorted(INCLUDED))
def test_key_sensitive_to_every_included_field(field: str) -> None:
    a, b = INCLUDED[field]
    ka = cache_key(CHAT, {**BASE, field: a}, SALT)
    kb = cache_key(CHAT, {**BASE, field: b}, SALT)
    assert ka != kb
    if field not in BASE:
        assert cache_key(CHAT, BASE, SALT) not in (ka, kb)


@settings(max_examples=60, deadline=None)
@given(field=st.sampled_from(sorted(INCLUDED)), a=json_values, b=json_values)
def test_key_sensitive_to_arbitrary_values(field: str, a: Any, b: Any) -> None:
    body_a, body_b = {**BASE, field: a}, {**BASE, field: b}
    same_canon = canonical_json(CHAT, body_a) == canonical_json(CHAT, body_b)
    assert (cache_key(CHAT, body_a, SALT) == cache_key(CHAT, body_b, SALT)) == same_canon
    # Values outside the documented normalisations (numbers, stop strings, message parts) never collide.
    if (
        field not in ("messages", "stop")
        and not isinstance(a, (int, float))
        and json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True)
    ):
        assert not same_canon


@pytest.mark.parametrize("field", sorted(EXCLUDED_FIELDS))
def test_excluded_fields_do_not_change_the_key(field: str) -> None:
    value = (
        {"no-cache": True}
        if field == "cache"
        else {"include_usage": True}
        if field == "stream_options"
        else "x1"
    )
    assert cache_key(CHAT, {**BASE, field: value}, SALT) == cache_key(CHAT, BASE, SALT)


def test_stream_flag_does_not_change_the_key() -> None:
    assert cache_key(CHAT, {**BASE, "stream": True}, SALT) == cache_key(CHAT, {**BASE, "stream": False}, SALT)


def test_tenant_isolation() -> None:
    ka, kb = cache_key(CHAT, BASE, b"salt-a"), cache_key(CHAT, BASE, b"salt-b")
    assert ka != kb
    assert ka.split(":")[1] == tenant_tag(b"salt-a") != tenant_tag(b"salt-b") == kb.split(":")[1]


def test_endpoint_is_part_of_the_key() -> None:
    assert cache_key(CHAT, BASE, SALT) != cache_key("/v1/completions", BASE, SALT)


def test_key_format_is_versioned_hex_without_prompt_text() -> None:
    body = {**BASE, "messages": [{"role": "user", "content": "secretword"}]}
    key = cache_key(CHAT, body, SALT)
    assert re.fullmatch(r"v1:[0-9a-f]{16}:[0-9a-f]{64}", key)
    assert "secretword" not in key


def test_normalisations() -> None:
    plain = {**BASE, "messages": [{"role": "user", "content": "hi"}]}
    parts = {**BASE, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
    assert cache_key(CHAT, plain, SALT) == cache_key(CHAT, parts, SALT)
    two_parts = {
        **BASE,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}
        ],
    }
    assert cache_key(CHAT, two_parts, SALT) != cache_key(CHAT, plain, SALT)
    assert cache_key(CHAT, {**BASE, "stop": "x"}, SALT) == cache_key(CHAT, {**BASE, "stop": ["x"]}, SALT)
    no_mt = {k: v for k, v in BASE.items() if k != "max_tokens"}
    assert cache_key(CHAT, {**no_mt, "max_completion_tokens": 32}, SALT) == cache_key(CHAT, BASE, SALT)
    assert cache_key(CHAT, {**BASE, "temperature": 0.0}, SALT) == cache_key(CHAT, BASE, SALT)
    # disagreeing max_tokens and max_completion_tokens are both kept
    assert cache_key(CHAT, {**BASE, "max_completion_tokens": 64}, SALT) != cache_key(CHAT, BASE, SALT)
    # text is never rewritten
    assert cache_key(CHAT, {**BASE, "messages": [{"role": "user", "content": "hi "}]}, SALT) != cache_key(
        CHAT, plain, SALT
    )


def test_input_body_is_not_modified() -> None:
    body = json.loads(json.dumps({**BASE, "stop": "x", "max_completion_tokens": 5, "stream": True}))
    before = json.dumps(body)
    cache_key(CHAT, body, SALT)
    assert json.dumps(body) == before


@pytest.mark.parametrize(
    ("body", "rule", "expected"),
    [
        ({"temperature": 0}, "deterministic", True),
        ({"temperature": 0.0}, "deterministic", True),
        ({"temperature": 0.7, "seed": 3}, "deterministic", True),
        ({"seed": 0}, "deterministic", True),
        ({}, "deterministic", False),
        ({"temperature": 0.7}, "deterministic", False),
        ({"temperature": False}, "deterministic", False),
        ({"temperature": 0.7}, "always", True),
        ({"temperature": 0}, "never", False),
    ],
)
def test_is_cacheable(body: dict[str, Any], rule: Any, expected: bool) -> None:
    ok, reason = is_cacheable(body, rule)
    assert ok is expected
    assert reason


def test_parse_cache_control() -> None:
    assert parse_cache_control(None, {}) == CacheControl()
    assert parse_cache_control("no-cache", None) == CacheControl(no_cache=True)
    assert parse_cache_control("No-Store, max-age=60", None) == CacheControl(no_store=True, max_age_s=60)
    assert parse_cache_control("max-age=abc", None).max_age_s is None
    cc = parse_cache_control("max-age=60", {"cache": {"no-cache": True, "ttl": 30, "s-maxage": 10}})
    assert cc == CacheControl(no_cache=True, no_store=False, max_age_s=10, ttl_s=30)
    assert parse_cache_control(None, {"cache": {"no-store": True}}).no_store
    assert parse_cache_control(None, {"cache": "yes"}) == CacheControl()
    assert CacheControl(max_age_s=5).accepts_age(5) and not CacheControl(max_age_s=5).accepts_age(5.1)


def test_integers_beyond_64_bits_still_make_a_key() -> None:
    a = cache_key(CHAT, {**BASE, "seed": 2**70}, SALT)
    assert (
        a
        == cache_key(CHAT, {**BASE, "seed": 2**70}, SALT)
        != cache_key(CHAT, {**BASE, "seed": 2**70 + 1}, SALT)
    )


@settings(max_examples=300, deadline=None)
@given(
    body=st.dictionaries(
        st.sampled_from([*sorted(INCLUDED), "stream", "user", "é", "Z", "a b"]), json_values, max_size=6
    ),
    messages=st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "system", "assistant"])},
            optional={"content": json_values, "name": st.text(max_size=4), "ünï": json_values},
        ),
        max_size=5,
    ),
)
def test_the_incremental_key_is_the_hmac_of_the_canonical_json(body: dict[str, Any], messages: list) -> None:
    """The key is computed field by field and message by message (a large request is never serialised
    whole, issue 19 item 1), byte for byte the HMAC of ``canonical_json``: keys do not change."""
    full = {**body, "messages": messages}
    for b in (body, full):
        expected = hmac.new(SALT, canonical_json(CHAT, b), hashlib.sha256).hexdigest()
        assert cache_key(CHAT, b, SALT).rsplit(":", 1)[1] == expected
