"""The advisor's model of a tenant's prompts (issue 26): shares across message boundaries, one finding per
problem, reorders, the right kind, estimates that are replays of ``bill``, no prompt text."""

from __future__ import annotations

import itertools
import random
from typing import Any

import orjson

from cache.advisor.advisor import Advisor
from cache.advisor.render import render_table
from cache.advisor.replay import Prompt, replay
from cache.advisor.savings import advice_by_tenant, savings_report
from cache.billing.ledger import aggregate
from cache.billing.pricing import ExplicitOutcome, ModelPrices, RequestUsage, Rules, bill
from tests.unit.test_advisor import MODEL, chat, feed, policy, text


def _adv() -> Advisor:
    return Advisor.from_policy(policy(window_s=7 * 86_400), clock=lambda: 1e9 + 5000)


def _msgs(system: str, *turns: str) -> dict[str, Any]:
    roles = ["user", "assistant"]
    return {
        "model": MODEL,
        "messages": [{"role": "system", "content": system}]
        + [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)],
    }


def _layout_ok(findings: list[Any]) -> None:
    """Ranges of layout findings never overlap, and each lies inside a prompt."""
    spans = sorted(f.where.tokens for f in findings if f.kind in ("reorder", "variable_prefix", "fixed_tail"))
    for (_, b), (c, _) in itertools.pairwise(spans):
        assert b <= c, spans
    for a, b in spans:
        assert 0 <= a < b


def test_a_stable_span_keeps_its_share_past_a_message_boundary() -> None:
    # A stamp, then 1,600 fixed tokens of system prompt; the user's turn opens with one of six fixed
    # openers (each in ~17 % of requests) and goes on with variable text: the stable span is in 100 %
    # of the requests, not at the share of its most common continuation.
    rng = random.Random(1)
    sys_text = text(rng, 1600)
    openers = [text(rng, 40) for _ in range(6)]
    bodies = [
        chat(f"Now: {i * 7919:012d}.\n" + sys_text, openers[i % 6] + " " + text(rng, rng.randint(20, 80)))
        for i in range(120)
    ]
    adv = _adv()
    feed(adv, "t", bodies)
    layout = [f for f in adv.findings("t") if f.kind in ("variable_prefix", "fixed_tail", "reorder")]
    assert [f.kind for f in layout] == ["variable_prefix"]
    (f,) = layout
    assert f.share > 0.95
    assert f.where.tokens[1] > 1600  # through the system message
    _layout_ok(adv.findings("t"))


def test_one_timestamp_in_a_repetitive_prompt_is_one_finding() -> None:
    rng = random.Random(2)
    sentence = text(rng, 40)
    body = " ".join([sentence] * 30)  # the same sentence 30 times: chunks repeat inside the prompt
    bodies = [chat(f"Time {i * 104729:014d}\n{body}", text(rng, rng.randint(20, 60))) for i in range(120)]
    adv = _adv()
    feed(adv, "t", bodies)
    found = adv.findings("t")
    layout = [f for f in found if f.kind in ("variable_prefix", "fixed_tail", "reorder")]
    assert [f.kind for f in layout] == ["variable_prefix"]
    _layout_ok(found)


def _tools(rng: random.Random, n: int = 12) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {"name": f"tool_{k}", "description": text(rng, 80), "parameters": {"type": "object"}},
        }
        for k in range(n)
    ]


def test_shuffled_tools_are_one_reorder_finding_in_the_tools_header() -> None:
    rng = random.Random(3)
    tools, system = _tools(rng), text(rng, 500)
    bodies = []
    for i in range(120):
        ts = list(tools)
        random.Random(i).shuffle(ts)
        bodies.append({**chat(system, text(rng, rng.randint(20, 80))), "tools": ts})
    adv = _adv()
    feed(adv, "t", bodies)
    found = adv.findings("t")
    layout = [f for f in found if f.kind in ("variable_prefix", "fixed_tail", "reorder")]
    assert [f.kind for f in layout] == ["reorder"]
    assert layout[0].where.message == -1 and layout[0].where.role == "tools"
    assert "fixed order" in layout[0].advice
    # Sorted, the same tools need no advice.
    fixed = _adv()
    feed(fixed, "t", [{**b, "tools": tools} for b in bodies])
    assert [f.kind for f in fixed.findings("t") if f.kind == "reorder"] == []


def test_a_stamp_at_the_start_of_the_system_prompt_is_not_a_fixed_tail() -> None:
    rng = random.Random(4)
    system = text(rng, 1500)
    bodies = [
        chat(f"User u{i % 37}, time {i:06d}.\n" + system, text(rng, rng.randint(3, 8))) for i in range(120)
    ]
    adv = _adv()
    feed(adv, "t", bodies)
    kinds = [f.kind for f in adv.findings("t")]
    assert kinds[0] == "variable_prefix" and "fixed_tail" not in kinds
    f = adv.findings("t")[0]
    assert (f.where.message, f.where.role) == (0, "system")
    assert f.where.message_tokens is not None
    # One coordinate system: the range in the message is the prompt range less the message's start.
    assert f.where.tokens[0] - f.where.message_tokens[0] == f.where.tokens[1] - f.where.message_tokens[1]
    assert 0 <= f.where.message_tokens[0] <= f.where.tokens[0]


def test_rules_after_the_users_input_are_a_fixed_tail_only_in_the_last_message() -> None:
    rng = random.Random(5)
    system, rules = text(rng, 60), text(rng, 800)
    adv = _adv()
    feed(adv, "t", [chat(system, text(rng, rng.randint(50, 200)) + "\n" + rules) for _ in range(120)])
    assert adv.findings("t")[0].kind == "fixed_tail"


def test_marking_a_long_conversation_is_not_advised() -> None:
    # One conversation re-sending its growing history: implicit caching serves the history; a marker
    # on the system prompt would bill the history in full (explicit and implicit are exclusive).
    rng = random.Random(6)
    system = text(rng, 1200)
    turns = [text(rng, rng.randint(20, 60)) for _ in range(200)]
    bodies = [_msgs(system, *turns[: 2 * i + 1]) for i in range(90)]
    adv = _adv()
    feed(adv, "t", bodies)
    assert adv.findings("t") == []


def test_a_replay_is_the_ledgers_bill() -> None:
    rules, prices = Rules(), ModelPrices(3_000_000, 15_000_000)
    a, b = [(1, 600), (2, 600), (3, 100)], [(1, 600), (2, 600), (4, 100)]
    got = replay(
        [Prompt(a, 1300, 1200, 0.0), Prompt(b, 1300, 1200, 1.0), Prompt(b, 1300, 0, 2.0)], rules, prices, 16
    )

    def cost(usage: RequestUsage, explicit: ExplicitOutcome | None) -> int:
        return bill(
            usage, prices, rules, explicit, "upstream", request_id="", tenant="", model="", ts_ms=0
        ).total_micros

    want = (
        cost(RequestUsage(1300, 0), ExplicitOutcome(1200, "created"))
        + cost(RequestUsage(1300, 0, 1200), ExplicitOutcome(1200, "hit"))  # exclusive: the rest in full
        + cost(RequestUsage(1300, 0, 1296), None)  # the whole of b seen: 81 blocks of 16
    )
    assert got.micros == want


def test_advice_within_a_period_is_never_above_100_percent() -> None:
    rng = random.Random(7)
    rules = text(rng, 1200)
    bodies = [chat(f"Time {i:09d}.\n" + rules, text(rng, 50)) for i in range(150)]
    adv = Advisor.from_policy(policy(window_s=7 * 86_400), clock=lambda: 1e9 + 5)
    feed(adv, "t", bodies, step=0.03)  # 150 requests in 5 s
    doc = adv.advice(now=1e9 + 5)
    per_request = advice_by_tenant(doc)["t"]
    prices, r = ModelPrices(2_000_000, 8_000_000), Rules()
    items = [
        bill(
            RequestUsage(1215, 8, 0),
            prices,
            r,
            None,
            "upstream",
            request_id=str(i),
            tenant="t",
            model=MODEL,
            ts_ms=0,
        )
        for i in range(150)
    ]
    rep = savings_report(
        aggregate(items, group_by=("tenant", "model", "source")),
        86_400,
        currency="USD",
        advice_micros_per_request={"t": per_request},
    )
    t = rep["tenants"][0]
    assert t["advice"]["micros_in_period"] == round(per_request * 150)
    assert 0 < t["advice"]["csr_with_advice"] <= 1


def test_a_unique_word_of_a_prompt_never_appears_in_the_advice() -> None:
    rng = random.Random(8)
    canary = "qzxwordnevershownqzx"
    tools = _tools(rng)
    tools[3]["function"]["description"] += " " + canary
    tools[5]["function"]["name"] = canary
    system = text(rng, 400) + " " + canary
    bodies = []
    for i in range(100):
        ts = list(tools)
        random.Random(i).shuffle(ts)
        bodies.append({**chat(f"{canary} {i}\n" + system, canary + " " + text(rng, 30)), "tools": ts})
    adv = _adv()
    feed(adv, "t", bodies)
    doc = adv.advice()
    assert any(m["findings"] for t in doc["tenants"] for m in t["models"])
    for out in (orjson.dumps(doc).decode(), render_table(doc), repr(adv.snapshots())):
        assert canary not in out
