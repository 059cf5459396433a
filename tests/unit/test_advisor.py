"""The advisor on known layouts: findings, their place, prices, isolation, windows, sampling, memory."""

from __future__ import annotations

import logging
import random
import re
import tracemalloc
from typing import Any

import orjson
import pytest
from pydantic import ValidationError

from cache.advisor.advisor import Advisor
from cache.advisor.findings import KINDS
from cache.advisor.render import GAUGES, gauge_values, render_table
from cache.advisor.sketch import Sketch, sketch_seed
from cache.billing.markers import find_markers
from config.advisor import AdvisorConfig
from config.loader import PolicyError, parse_policy
from config.policy import Policy
from router.blocks import block_hashes, root_hash
from router.prompt import render_prompt
from router.tokenizers import ApproxTokenizer

MODEL = "m"
TOK = ApproxTokenizer()
WORDS = re.compile(r"[a-z]{5,}")


def policy(**advisor: Any) -> Policy:
    return Policy.model_validate(
        {
            "models": [{"name": MODEL, "replicas": [{"url": "http://127.0.0.1:9"}]}],
            "billing": {"default": {"input_per_1m": "2.0", "output_per_1m": "8.0"}},
            "tenancy": {"tenants": [{"id": "listed"}]},
            "advisor": {"enabled": True, "sample_rate": 1.0, "min_requests": 20, **advisor},
        }
    )


def text(rng: random.Random, tokens: int) -> str:
    """Lowercase pseudo-words: ``tokens * 4`` bytes."""
    out = []
    while sum(len(w) + 1 for w in out) < tokens * 4:
        out.append("".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(5, 9))))
    return " ".join(out)[: tokens * 4]


def chat(system: Any, user: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    }


def feed(
    adv: Advisor,
    tenant: str,
    bodies: list[dict[str, Any]],
    t0: float = 1e9,
    step: float = 1.0,
    salt: str | None = None,
) -> None:
    for i, body in enumerate(bodies):
        rendered = str(render_prompt("chat", body))
        tokens = TOK.encode(rendered)
        hashes = block_hashes(tokens, root_hash(MODEL, salt or tenant), 16, 4096)
        marked = find_markers(body)
        mt = TOK.encode(str(render_prompt("chat", marked.body))).count if marked else 0
        adv.observe(
            tenant,
            salt or tenant,
            MODEL,
            tokens.data,
            tokens.count,
            hashes,
            marked_tokens=mt,
            now=t0 + i * step,
        )


def timestamp_first(rng: random.Random, n: int) -> list[dict[str, Any]]:
    rules = text(rng, 1200)
    return [
        chat(f"Time: {i * 7919:012d} {rng.getrandbits(40):x}.\n" + rules, text(rng, rng.randint(40, 200)))
        for i in range(n)
    ]


def good_layout(rng: random.Random, n: int, system_tokens: int = 600) -> list[dict[str, Any]]:
    system = text(rng, system_tokens)
    return [chat(system, text(rng, rng.randint(40, 200))) for _ in range(n)]


@pytest.fixture
def adv() -> Advisor:
    return Advisor.from_policy(policy(window_s=7 * 86_400), clock=lambda: 1e9 + 5000)


def test_timestamp_first_is_named_in_the_system_message(adv: Advisor) -> None:
    feed(adv, "t", timestamp_first(random.Random(1), 120))
    # One finding for the stamp; once it is moved, marking the 1,200 fixed tokens pays as well.
    f, *rest = adv.findings("t")
    assert f.kind == "variable_prefix" and [g.kind for g in rest] in ([], ["explicit_would_pay"])
    assert (f.where.message, f.where.role) == (0, "system")
    # The stamp renders as 2 + 32 bytes (~9 tokens); the span ends with the 1,200 fixed tokens.
    assert 0 < f.where.tokens[0] <= 9 + 64
    assert abs(f.where.tokens[1] - (9 + 1200)) <= 64
    assert f.share > 0.95
    assert "tokens 0–" in f.advice and "system" in f.advice
    assert f.detail["variable_tokens"][0] == 0 and f.detail["variable_tokens"][1] == f.where.tokens[0]


def test_rules_after_the_users_input_are_a_fixed_tail(adv: Advisor) -> None:
    rng = random.Random(2)
    system, rules = text(rng, 50), text(rng, 700)
    feed(adv, "t", [chat(system, text(rng, rng.randint(50, 300)) + "\n" + rules) for _ in range(120)])
    (f,) = adv.findings("t")
    assert f.kind == "fixed_tail"
    assert (f.where.message, f.where.role) == (1, "user")
    assert f.where.moves
    assert abs((f.where.tokens[1] - f.where.tokens[0]) - 700) <= 80
    assert f.detail["tail_tokens"] <= 32


def test_a_good_layout_gets_no_findings(adv: Advisor) -> None:
    feed(adv, "good", good_layout(random.Random(3), 150))
    assert adv.findings("good") == []
    doc = adv.advice("good")
    assert doc["tenants"][0]["models"][0]["findings"] == []
    assert doc["saving"]["micros_per_day"] == 0


def test_long_prefix_reused_within_the_ttl_would_pay_with_cache_control(adv: Advisor) -> None:
    feed(adv, "t", good_layout(random.Random(4), 100, system_tokens=2000), step=2.0)
    (f,) = adv.findings("t")
    assert f.kind == "explicit_would_pay"
    assert abs(f.where.tokens[1] - 2000) <= 16 and f.where.tokens[0] == 0
    # 2,000 tokens read at 10 % instead of 1,984 (whole blocks) at 20 % and 16 at 100 %: about 213
    # token-equivalents per request, less the creations.
    assert 190 < f.saving_tokens_per_request < 213


def test_same_prefix_reused_after_the_ttl_would_not_pay(adv: Advisor) -> None:
    feed(adv, "t", good_layout(random.Random(4), 100, system_tokens=2000), step=400.0)
    assert adv.findings("t") == []


def test_markers_on_prefixes_used_once_lose(adv: Advisor) -> None:
    rng = random.Random(5)
    system = text(rng, 200)
    bodies = [
        chat(
            system,
            [
                {"type": "text", "text": text(rng, 1300), "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "q"},
            ],
        )
        for _ in range(60)
    ]
    feed(adv, "t", bodies)
    (f,) = [f for f in adv.findings("t") if f.kind == "explicit_loses"]
    assert f.detail["reason"] == "used_once"
    # Per request: 25 % extra on ~1,500 marked tokens plus 80 % of the ~190 repeated system tokens.
    assert 500 < f.saving_tokens_per_request < 560


def test_markers_reused_only_after_the_ttl_lose_as_reused_after_ttl(adv: Advisor) -> None:
    rng = random.Random(6)
    doc = text(rng, 1500)
    bodies = [
        chat([{"type": "text", "text": doc, "cache_control": {"type": "ephemeral"}}], text(rng, 30))
        for _ in range(40)
    ]
    feed(adv, "t", bodies, step=600.0)
    (f,) = adv.findings("t")
    assert f.kind == "explicit_loses" and f.detail["reason"] == "reused_after_ttl"


def test_markers_below_the_minimum_have_no_effect(adv: Advisor) -> None:
    rng = random.Random(7)
    system = text(rng, 500)
    bodies = [
        chat([{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}], text(rng, 80))
        for _ in range(40)
    ]
    feed(adv, "t", bodies)
    (f,) = adv.findings("t")
    assert f.kind == "explicit_below_minimum" and f.saving_micros_per_request == 0


def test_short_prompts_never_qualify(adv: Advisor) -> None:
    rng = random.Random(8)
    system = text(rng, 120)
    feed(adv, "t", [chat(system, text(rng, 30)) for _ in range(60)])
    (f,) = adv.findings("t")
    assert f.kind == "below_implicit_minimum"
    assert f.saving_micros_per_request == 0 and f.detail["forgone_tokens_per_request"] > 80


def test_estimates_use_the_tenants_prices_and_rules() -> None:
    bodies = timestamp_first(random.Random(9), 100)
    base = Advisor.from_policy(policy(window_s=86_400), clock=lambda: 1e9 + 200)
    feed(base, "t", bodies)
    dear = policy(window_s=86_400).model_copy(deep=True)
    dear = Policy.model_validate(
        {
            **dear.model_dump(mode="json", exclude={"advisor", "billing"}),
            "advisor": dear.advisor.model_dump(),
            "billing": {
                "models": {MODEL: {"input_per_1m": "6.0", "rules": {"implicit_cached_pct": 60}}},
            },
        }
    )
    other = Advisor.from_policy(dear, clock=lambda: 1e9 + 200)
    feed(other, "t", bodies)
    (a,) = [f for f in base.findings("t") if f.kind == "variable_prefix"]
    (b,) = [f for f in other.findings("t") if f.kind == "variable_prefix"]
    assert a.saving_micros_per_request == pytest.approx(a.saving_tokens_per_request * 2.0)
    # Implicit reads at 60 %: half the token saving of 20 % (40 against 80 points); three times the price
    # (the replay bills in whole micros, as the ledger does: equal within its rounding).
    assert b.saving_tokens_per_request == pytest.approx(a.saving_tokens_per_request / 2, rel=1e-3)
    assert b.saving_micros_per_request == pytest.approx(a.saving_micros_per_request * 3 / 2, rel=1e-3)


def test_tenants_are_isolated() -> None:
    rng = random.Random(10)
    bodies = timestamp_first(rng, 100)
    alone = Advisor.from_policy(policy(), clock=lambda: 1e9 + 200)
    feed(alone, "a", bodies)
    shared = Advisor.from_policy(policy(), clock=lambda: 1e9 + 200)
    feed(shared, "a", bodies)
    feed(shared, "b", good_layout(rng, 100))  # another tenant's traffic, even with the same prompts:
    feed(shared, "c", bodies)
    assert [f.to_dict() for f in shared.findings("a")] == [f.to_dict() for f in alone.findings("a")]
    assert shared.findings("b") == []
    assert {f.tenant for f in shared.findings()} == {"a", "c"}


def test_salts_make_identical_prompts_hash_apart() -> None:
    adv = Advisor.from_policy(policy())
    body = timestamp_first(random.Random(11), 5)
    feed(adv, "a", body, salt="salt-a")
    feed(adv, "b", body, salt="salt-b")
    a, b = (adv._sketches[(t, MODEL)] for t in ("a", "b"))
    assert a.seed != b.seed and sketch_seed("salt-a", MODEL) == a.seed
    ha = {h for o in a.recent for h in o.hashes.tolist()}
    hb = {h for o in b.recent for h in o.hashes.tolist()}
    assert ha and not ha & hb


def test_findings_carry_no_prompt_text(adv: Advisor, caplog: pytest.LogCaptureFixture) -> None:
    rng = random.Random(12)
    canary = "zqxcanaryzqx"
    bodies = [
        {**b, "messages": [*b["messages"], {"role": canary, "content": f"{canary} {rng.getrandbits(30)}"}]}
        for b in timestamp_first(rng, 80)
    ] + []
    caplog.set_level(logging.DEBUG)
    feed(adv, "listed", bodies)
    feed(adv, "t2", [chat(text(rng, 150), canary) for _ in range(50)])
    words = {w for b in bodies for m in b["messages"] for w in WORDS.findall(str(m["content"]))} | {canary}
    doc = adv.advice()
    assert doc["tenants"] and any(m["findings"] for t in doc["tenants"] for m in t["models"])
    outputs = {
        "json": orjson.dumps(doc).decode(),
        "table": render_table(doc),
        "gauges": repr(gauge_values(doc, {"listed"})),
        "snapshots": repr(adv.snapshots()),
        "logs": caplog.text,
    }
    for name, out in outputs.items():
        leaked = {w for w in words if w in out}
        assert not leaked, (name, sorted(leaked)[:5])


def test_gauges_are_bounded_by_listed_tenants_and_kinds(adv: Advisor) -> None:
    bodies = timestamp_first(random.Random(13), 60)
    for t in ("listed", "x1", "x2"):
        feed(adv, t, bodies)
    values = gauge_values(adv.advice(), {"listed"})
    assert set(values) == set(GAUGES)
    labels = set(values[GAUGES[0]])
    assert {t for t, _ in labels} == {"listed", "other"} and {k for _, k in labels} == set(KINDS)
    per = values["prefix_gateway_advice_findings"]
    assert per[("listed", "variable_prefix")] == 1 and per[("other", "variable_prefix")] == 2
    assert per[("listed", "fixed_tail")] == 0


def test_memory_stays_within_its_bound_under_unique_prompts() -> None:
    p = policy(recent_blocks=1024, recent_requests=16, recent_chunks=1024, max_sketches=4)
    adv = Advisor.from_policy(p, clock=lambda: 1e9)
    rng = random.Random(14)
    spec = adv.specs[MODEL]
    batches = [[chat(text(rng, 200), text(rng, 300)) for _ in range(30)] for _ in range(4 * 11)]
    tracemalloc.start()
    try:
        start = tracemalloc.get_traced_memory()[0]
        for t in range(4):
            feed(adv, f"t{t}", batches[t])
        full = tracemalloc.get_traced_memory()[0] - start
        for i, batch in enumerate(batches[4:]):  # ten times as many unique prompts again
            feed(adv, f"t{i % 4}", batch, t0=1e9 + 100 + i)
        after = tracemalloc.get_traced_memory()[0] - start
    finally:
        tracemalloc.stop()
    for sk in adv._sketches.values():
        assert len(sk.recent) <= spec.shape.recent_requests
        assert sum(len(o.hashes) for o in sk.recent) <= spec.shape.recent_chunks
    assert after <= adv.memory_bound_bytes()
    assert after - full < 0.1 * adv.memory_bound_bytes()  # full after the first 30 each: no growth
    # More pairs than max_sketches: the least recent is dropped.
    feed(adv, "t9", [chat("x", "y" * 100)])
    assert adv.stats().sketches == 4 and adv.stats().sketches_dropped == 1


def test_a_full_sketch_is_within_the_bytes_its_shape_promises() -> None:
    p = policy(recent_blocks=4096, recent_requests=256, recent_chunks=4096)
    shape = Advisor.from_policy(p).specs[MODEL].shape
    rng = random.Random(15)
    prompts = [TOK.encode(text(rng, 800)) for _ in range(100)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sk = Sketch(shape, "t", MODEL, 1, 0.0)
        for i, tk in enumerate(prompts):
            sk.observe(
                tk.data, tk.count, block_hashes(tk, 1, 16, 4096), chat=False, marked_tokens=0, now=float(i)
            )
        used = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert sum(len(o.hashes) for o in sk.recent) > 0.9 * shape.recent_chunks  # the ring is (nearly) full
    assert used <= shape.memory_bound_bytes()


def test_shares_are_exact_over_the_ring_of_recent_requests() -> None:
    adv = Advisor.from_policy(policy(recent_requests=64))
    rng = random.Random(16)
    system = text(rng, 200)
    feed(adv, "t", [chat(system, text(rng, 400)) for _ in range(200)])
    sk = adv._sketches[("t", MODEL)]
    assert len(sk.recent) == 64
    first = set(sk.recent[0].hashes[:5].tolist())  # the system prompt's leading chunks
    assert all(first <= set(o.hashes.tolist()) for o in sk.recent)


def test_sampling_rate_and_switch() -> None:
    adv = Advisor.from_policy(policy(sample_rate=0.1), rand=random.Random(17).random)
    assert 800 < sum(adv.sampled() for _ in range(10_000)) < 1200
    assert not Advisor.from_policy(policy(sample_rate=0.0)).sampled()
    off = Advisor.from_policy(policy(enabled=False))
    assert not any(off.sampled() for _ in range(100))


def test_a_window_is_kept_when_the_sketch_restarts() -> None:
    now = [1e9 + 599]
    adv = Advisor.from_policy(policy(window_s=600), clock=lambda: now[0])
    feed(adv, "t", timestamp_first(random.Random(18), 100), t0=1e9, step=5.0)  # 500 s
    assert adv.findings("t")[0].kind == "variable_prefix"
    # The next window starts with a few requests: advice still comes from the complete one.
    feed(adv, "t", good_layout(random.Random(19), 5), t0=1e9 + 700)
    now[0] = 1e9 + 710
    assert adv.findings("t")[0].kind == "variable_prefix"
    assert adv.stats().windows_kept == 1
    # Once the new window has enough requests, it speaks for the tenant's new layout.
    feed(adv, "t", good_layout(random.Random(19), 60), t0=1e9 + 720)
    now[0] = 1e9 + 790
    assert adv.findings("t") == []


def test_unknown_models_and_empty_prompts_are_ignored(adv: Advisor) -> None:
    adv.observe("t", "s", "no-such-model", b"abc", 1, [])
    adv.observe("t", "s", MODEL, b"", 0, [])
    assert adv.stats().observed == 0 and adv.advice()["tenants"] == []


def test_config_is_strict_and_bounded() -> None:
    with pytest.raises(ValidationError):
        AdvisorConfig.model_validate({"sample_rat": 0.1})
    with pytest.raises(ValidationError):
        AdvisorConfig.model_validate({"sample_rate": 1.5})
    with pytest.raises(ValidationError):
        AdvisorConfig.model_validate({"chunk_bytes": 4096, "max_prompt_bytes": 4096})
    assert AdvisorConfig(recent_blocks=1000).table_slots == 1024
    assert (
        Policy.model_validate(
            {"models": [{"name": "m", "replicas": [{"url": "http://h:1"}]}]}
        ).advisor.enabled
        is False
    )


def test_top_chunks_is_refused_with_what_replaced_it() -> None:
    """``top_chunks`` sized the chunk summary the ring replaced: a policy setting it is refused, naming
    the fields that bound the ring now, rather than accepted and ignored."""
    text = "models:\n  - name: m\n    replicas: [{url: 'http://h:1'}]\nadvisor:\n  enabled: true\n  top_chunks: 512\n"
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "p.yaml")
    ((path, message),) = err.value.problems
    assert path == "advisor"
    assert "top_chunks was removed" in message
    assert "recent_requests" in message and "recent_chunks" in message
    assert "top_chunks" not in AdvisorConfig.model_fields
    assert parse_policy(text.replace("  top_chunks: 512\n", ""), "p.yaml").advisor.enabled
