"""Response-cache keys, cacheability rules and request cache controls (pure: no I/O).

A key is ``v1:<tenant tag>:<HMAC-SHA256 hex>``:

* ``v1`` is the key-format version: any change to the canonical form bumps it, so a new gateway never
  serves entries written under an older notion of "the same request".
* the tenant tag (16 hex characters derived from the salt, never the tenant id) lets a store namespace
  and purge one tenant's entries.
* the HMAC is keyed with the tenant salt and covers a canonical JSON of every field that can change the
  answer. Nothing of the prompt text is recoverable from the key.

Canonicalisation is deliberately conservative: the only rewrites are ones that provably do not change
what the model sees or samples (key order, ``max_completion_tokens``/``max_tokens`` merged, a lone
``stop`` string equal to a one-element list, a content list holding one text part equal to the plain
string, integral floats of sampling parameters written as integers). Unknown fields are kept: a field
we do not know may change the answer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

KEY_VERSION = "v1"

#: Fields that never change the generated answer (transport, accounting, cache control).
EXCLUDED_FIELDS: frozenset[str] = frozenset(
    {"stream", "stream_options", "user", "metadata", "request_id", "cache_salt", "cache"}
)

#: Top-level scalar sampling parameters whose numeric form is normalised (0.0 == 0).
_NUMERIC_FIELDS: frozenset[str] = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "max_tokens",
        "min_tokens",
        "seed",
        "n",
        "best_of",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "length_penalty",
        "top_logprobs",
        "logprobs",
    }
)

Rule = Literal["deterministic", "always", "never"]


class CanonicalError(ValueError):
    """The body cannot be canonicalised (not a JSON object)."""


def _salt_bytes(salt: bytes | str) -> bytes:
    return salt.encode("utf-8") if isinstance(salt, str) else salt


def tenant_tag(salt: bytes | str) -> str:
    """A short, stable, non-reversible tag of a tenant salt (namespaces store keys per tenant)."""
    return hmac.new(_salt_bytes(salt), b"pgw-tenant-tag", hashlib.sha256).hexdigest()[:16]


def _norm_number(value: Any) -> Any:
    if isinstance(value, float) and not isinstance(value, bool) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _norm_content(content: Any) -> Any:
    """A content list holding exactly one text part is the plain string (OpenAI treats them alike)."""
    if isinstance(content, list) and len(content) == 1:
        part = content[0]
        if (
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            and set(part) <= {"type", "text"}
        ):
            return part["text"]
    return content


def _norm_messages(messages: Any) -> Any:
    """Messages with a normalised content; a message whose content needs no change is not copied."""
    if not isinstance(messages, list):
        return messages
    out = []
    for m in messages:
        if isinstance(m, dict) and "content" in m:
            content = _norm_content(m["content"])
            if content is not m["content"]:
                m = {**m, "content": content}
        out.append(m)
    return out


def canonical_request(endpoint: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """The output-affecting part of a request, in a normal form (only used to build keys)."""
    if not isinstance(body, Mapping):
        raise CanonicalError("request body must be a JSON object")
    canon: dict[str, Any] = {}
    for field, value in body.items():
        if field in EXCLUDED_FIELDS:
            continue
        if field in _NUMERIC_FIELDS:
            value = _norm_number(value)
        canon[field] = value
    # max_completion_tokens is the newer name of max_tokens; when both are given and disagree keep both.
    if "max_completion_tokens" in canon:
        mct = _norm_number(canon.pop("max_completion_tokens"))
        if "max_tokens" not in canon or canon["max_tokens"] == mct:
            canon["max_tokens"] = mct
        else:
            canon["max_completion_tokens"] = mct
    if isinstance(canon.get("stop"), str):
        canon["stop"] = [canon["stop"]]
    if "messages" in canon:
        canon["messages"] = _norm_messages(canon["messages"])
    return canon


def canonical_json(endpoint: str, body: Mapping[str, Any]) -> bytes:
    """orjson with sorted keys at every level and fixed separators (orjson's compact form)."""
    envelope = {"endpoint": endpoint.strip().rstrip("/"), "request": canonical_request(endpoint, body)}
    try:
        return orjson.dumps(envelope, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        # Integers beyond 64 bits (a body parsed by the stdlib json module): the stdlib serialises them.
        # Such bodies never produce orjson output, so the two forms cannot disagree for one request.
        try:
            return json.dumps(envelope, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            raise CanonicalError("request body is not JSON-serialisable") from exc


def _feed_canonical(update: Callable[[bytes], None], endpoint: str, body: Mapping[str, Any]) -> None:
    """``canonical_json``'s bytes, fed to ``update`` field by field and message by message (the same
    bytes: orjson's compact form with sorted keys), so a large request is never serialised whole."""
    canon = canonical_request(endpoint, body)
    update(b'{"endpoint":' + orjson.dumps(endpoint.strip().rstrip("/")) + b',"request":{')
    for i, name in enumerate(sorted(canon)):
        value = canon[name]
        update((b"," if i else b"") + orjson.dumps(name) + b":")
        if isinstance(value, list):
            update(b"[")
            for j, item in enumerate(value):
                update((b"," if j else b"") + orjson.dumps(item, option=orjson.OPT_SORT_KEYS))
            update(b"]")
        else:
            update(orjson.dumps(value, option=orjson.OPT_SORT_KEYS))
    update(b"}}")


def cache_key(endpoint: str, body: Mapping[str, Any], salt: bytes | str) -> str:
    """``v1:<tenant tag>:<hmac hex>`` for this request and tenant salt: the HMAC of
    ``canonical_json``, computed incrementally."""
    mac = hmac.new(_salt_bytes(salt), digestmod=hashlib.sha256)
    try:
        _feed_canonical(mac.update, endpoint, body)
    except TypeError:  # beyond orjson (integers over 64 bits): the stdlib form, whole
        mac = hmac.new(_salt_bytes(salt), canonical_json(endpoint, body), hashlib.sha256)
    return f"{KEY_VERSION}:{tenant_tag(salt)}:{mac.hexdigest()}"


def is_cacheable(body: Mapping[str, Any], rule: Rule = "deterministic") -> tuple[bool, str]:
    """Whether the policy rule allows caching this request, and a short reason (a metric label)."""
    if rule == "never":
        return False, "rule_never"
    if rule == "always":
        return True, "rule_always"
    if "seed" in body and body["seed"] is not None:  # ``in`` first: mostly absent, and no call
        return True, "seed"
    temperature = body.get("temperature")
    if temperature is None:
        return False, "default_temperature"  # the API default is 1: sampled, not deterministic
    if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature == 0:
        return True, "temperature_0"
    return False, "sampled"


@dataclass(frozen=True, slots=True)
class CacheControl:
    """What the client asked of the cache for this request.

    ``no_cache``: do not serve from the cache, but refresh the entry with the new answer.
    ``no_store``: neither read nor write the cache.
    ``max_age_s``: serve an entry only if it is at most this old.
    ``ttl_s``: store the answer for this long (LiteLLM's ``cache.ttl``), capped by the policy.
    """

    no_cache: bool = False
    no_store: bool = False
    max_age_s: int | None = None
    ttl_s: int | None = None

    def accepts_age(self, age_s: float) -> bool:
        return self.max_age_s is None or age_s <= self.max_age_s


NO_CONTROL = CacheControl()
"""Neither the header nor the body's ``cache`` object asks anything (frozen: shared)."""


def _non_negative_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)) and value >= 0:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def parse_cache_control(header: str | None, body: Mapping[str, Any] | None = None) -> CacheControl:
    """Merge the ``Cache-Control`` request header and LiteLLM's body ``cache`` object.

    Unknown directives are ignored; the most restrictive value wins when both sources speak.
    """
    if not header and (not isinstance(body, dict) or "cache" not in body):
        return NO_CONTROL  # neither source speaks (most requests): the default, made once
    no_cache = no_store = False
    max_age: int | None = None
    ttl: int | None = None
    if header:
        for raw in header.split(","):
            name, _, arg = raw.strip().partition("=")
            name = name.strip().lower()
            if name == "no-cache":
                no_cache = True
            elif name == "no-store":
                no_store = True
            elif name in ("max-age", "s-maxage"):
                n = _non_negative_int(arg.strip().strip('"'))
                if n is not None:
                    max_age = n if max_age is None else min(max_age, n)
    obj = body.get("cache") if isinstance(body, dict) else None  # parsed JSON: dict, not the ABC
    if isinstance(obj, dict):
        no_cache = no_cache or obj.get("no-cache") is True or obj.get("no_cache") is True
        no_store = no_store or obj.get("no-store") is True or obj.get("no_store") is True
        n = _non_negative_int(obj.get("ttl"))
        if n is not None:
            ttl = n
        n = _non_negative_int(obj.get("s-maxage", obj.get("max-age")))
        if n is not None:
            max_age = n if max_age is None else min(max_age, n)
    return CacheControl(no_cache=no_cache, no_store=no_store, max_age_s=max_age, ttl_s=ttl)
