"""The example policies' semantic routes and the key a question gets, shared by the recall tests."""

from __future__ import annotations

from cache.semantic.route import SemanticRoute
from config import load_policy
from config.loader import example_path

EXAMPLES = ("semantic-ecommerce", "semantic-airline", "semantic-telecom", "semantic-banking")
SHOP, AIR, TEL, BANK = (
    SemanticRoute(load_policy(example_path(n), env={}).cache.semantic, b"tag-secret") for n in EXAMPLES
)


def key(route: SemanticRoute, text: str) -> str | None:
    """The semantic key of a one-message deterministic chat request asking ``text``."""
    body = {"model": "sim-llama", "temperature": 0, "messages": [{"role": "user", "content": text}]}
    return route.analyse("chat", body).key("salt", route.cfg.version)


def shares_key(route: SemanticRoute, asked: str, plain: str, other: str) -> bool:
    """``asked`` and ``plain`` get one key, and ``other`` a different one that is not None (a near miss
    the policy can answer, not a question it cannot read)."""
    k = key(route, asked)
    return k is not None and k == key(route, plain) and key(route, other) not in (None, k)
