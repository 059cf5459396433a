"""Issue 25, fourth pass: Chinese question words as one built-in class, "怎么还没到"-style phrasings,
Chinese politeness and "tell me whether" as built-in fillers, and transposed letters in a policy's
short entity names; each beside the near miss the same mechanism must still refuse."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import semantic_heldout2_source as heldout2
from bench import semantic_independent
from cache.semantic.normalize import base_normalize
from cache.semantic.route import SemanticRoute
from cache.semantic.typos import TypoCorrector
from tests.support.semantic_routes import AIR, BANK, SHOP, TEL, key


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("如何激活", "怎么激活"),
        ("怎样才能退货", "怎么退货"),
        ("应该怎么改签", "怎么改签"),
        ("咋办理", "怎么办理"),
        ("这款手机如何", "这款手机怎么样"),  # at the end it asks "how is it", not "how to"
        ("按时还款会怎样", "按时还款会怎么样"),
        ("我的订单怎么还没到", "我的订单还没到"),
        ("为什么还没有发货", "还没发货"),
    ],
)
def test_chinese_question_words_are_written_one_way(raw: str, normal: str) -> None:
    assert base_normalize(raw) == normal
    assert base_normalize(normal) == normal


@pytest.mark.parametrize(
    ("route", "a", "b"),
    [
        (TEL, "怎么查剩余流量", "如何查询剩余流量"),  # 如何 inside the telecom policy's own terms
        (SHOP, "麻烦问下，小米14多少钱", "小米14多少钱"),
        (SHOP, "我想问一下华为mate60多重", "华为mate60多重"),
        (AIR, "Hello, could you tell me whether flight MU5101 is on time?", "Is MU5101 on time?"),
        (TEL, "how much is the plsu plan", "How much is the Plus plan?"),
        (TEL, "How many gigs do I get on the Max plan?", "Max plan data allowance"),
    ],
)
def test_harmless_wording_shares_the_key(route: SemanticRoute, a: str, b: str) -> None:
    assert key(route, a) is not None and key(route, a) == key(route, b)


@pytest.mark.parametrize(
    ("route", "a", "b"),
    [
        (BANK, "怎么冻结信用卡", "如何解冻信用卡"),
        (TEL, "怎么开通eSIM", "如何关闭eSIM"),
        (SHOP, "订单SO2024081818到哪了", "订单SO2024081818怎么还没退款"),
        # The project's own set labels "why has it still not arrived" a different answer from its status
        # (bench/data/semantic_eval.jsonl g17-6, a complaint), so no example maps 还没到 to the status.
        (SHOP, "订单SO2024081818到哪了", "订单SO2024081818怎么还没有到"),
        (SHOP, "订单SO2024081818到哪了", "订单SO2024081819怎么还没到"),
        (TEL, "How much is the Plus plan?", "How much is the Lite plan?"),
        (TEL, "How much is the Plus plan?", "how much is the plug plan"),  # a substitution, not a swap
        (AIR, "Is MU5101 on time?", "Hello, could you tell me whether flight MU5110 is on time?"),
    ],
)
def test_a_near_miss_next_to_those_rules_keeps_its_own_key(route: SemanticRoute, a: str, b: str) -> None:
    assert key(route, a) is not None and key(route, b) != key(route, a)


def test_a_short_word_is_corrected_only_for_a_swap_inside_an_entity_name() -> None:
    c = TypoCorrector(["plus plan", "lite"], [], names=["plus", "lite", "max"])
    assert c.correct("plsu") == "plus" and c.correct("ltie") == "lite"  # two adjacent letters swapped
    assert c.correct("plug") is None and c.correct("pluss") is None  # a substitution; an inflection
    assert c.correct("lpus") is None  # the first letter is never the typo
    assert c.correct("mxa") is None  # three letters: never
    assert TypoCorrector(["plus plan"], []).correct("plsu") is None  # plan words are not names
    assert TypoCorrector(["plus"], ["plsu"], names=["plus"]).correct("plsu") is None  # a known word


_zh = st.sampled_from(
    ["如何", "怎样", "怎么", "咋", "样", "要", "应该", "才能", "还没", "有", "为什么", "到", "呢", " ", "a"]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_zh, max_size=8).map("".join))
def test_the_chinese_question_words_rule_is_idempotent(text: str) -> None:
    assert base_normalize(base_normalize(text)) == base_normalize(text)


def test_the_second_held_out_set_is_its_generator_output_and_has_the_shape_the_brief_asks() -> None:
    rows = heldout2.rows()
    assert heldout2.OUT.read_bytes() == b"".join(orjson.dumps(r) + b"\n" for r in rows)  # never hand-edited
    assert len(rows) >= 160 and sum(r["label"] == "different" for r in rows) * 2 == len(rows)
    assert {r["domain"] for r in rows} == {"shop", "air", "tel", "bank"}
    assert {r["lang"] for r in rows} == {"en", "zh", "mixed"} and {r["split"] for r in rows} == {"heldout2"}
    assert len({(r["cached"], r["probe"]) for r in rows}) == len(rows)
    assert semantic_independent.FILES["heldout2"] == heldout2.OUT  # what `--split heldout2` reads
