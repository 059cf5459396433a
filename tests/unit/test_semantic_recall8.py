"""Issue 25, eighth pass (held-out 5 promoted to a development set): asking someone to tell, explain or
let one know as built-in politeness, aspect words (``yet``, ``already``) as auxiliaries, and the example
policies' new vocabulary; each beside the near miss the same mechanism must still refuse."""

from __future__ import annotations

import pytest

from cache.semantic.route import SemanticRoute
from tests.support.semantic_routes import AIR, BANK, SHOP, TEL, key


@pytest.mark.parametrize(
    ("route", "asked", "plain", "other"),
    [
        (SHOP, "Would you mind telling me the Pixel 8 screen size?", "Pixel 8 screen size", "Pixel 8 weight"),
        (SHOP, "Please let me know where my order SO2024120401 is", "Where is my order SO2024120401?",
         "Where is my order SO2024120402?"),
        (SHOP, "Just curious, how big is the Mate 60 screen?", "Mate 60 screen size", "Mate 60 battery capacity"),
        (TEL, "Please explain how to activate an eSIM", "How do I activate an eSIM?", "How do I top up?"),
        (TEL, "Could you let me know the monthly price of the Lite plan?", "Lite plan monthly price",
         "Plus plan monthly price"),
    ],
)  # fmt: skip
def test_asking_to_be_told_is_politeness(route: SemanticRoute, asked: str, plain: str, other: str) -> None:
    k = key(route, asked)
    assert k is not None and k == key(route, plain)
    assert key(route, other) != k


def test_explaining_a_why_is_not_politeness() -> None:
    """``explain`` is ignored; ``why`` and a negation are not: another question, another answer."""
    asked = key(TEL, "How do I activate an eSIM?")
    assert key(TEL, "Please explain why I cannot activate an eSIM") != asked


def test_yet_and_already_are_aspect_and_not_yet_keeps_its_not() -> None:
    asked = key(SHOP, "Has my order SO2024050505 shipped?")
    assert asked is not None
    assert key(SHOP, "Has order SO2024050505 shipped yet?") == asked
    assert key(SHOP, "Has my order SO2024050505 already shipped?") == asked
    assert key(SHOP, "Why has my order SO2024050505 not shipped yet?") != asked
    assert key(SHOP, "Has order SO2024050506 shipped yet?") != asked  # another order


@pytest.mark.parametrize(
    ("route", "asked", "plain", "other"),
    [
        (SHOP, "How much would a Galaxy S24 set me back?", "Galaxy S24 price", "Pixel 8 price"),
        (SHOP, "order SO2024030303 tracking", "Where is my order SO2024030303?", "Where is my order SO2024030304?"),
        (SHOP, "Any update on order SO2024111111?", "Where is my order SO2024111111?",
         "Where is my order PO2024111111?"),
        (SHOP, "What's happening with my order PO2024090909?", "Status of order PO2024090909",
         "Status of order PO2024090908"),
        (SHOP, "怎么退货", "退货政策", "怎么换货"),
        (AIR, "What's the checked bag limit in business class?", "Business class baggage allowance",
         "Economy baggage allowance"),
        (AIR, "Could you let me know when online check-in opens?", "When does online check-in open?",
         "When does online check-in close?"),
        (BANK, "How much does the Gold card charge per year?", "Gold card annual fee", "Platinum card annual fee"),
        (BANK, "how much do i pay each year for the gold card", "Gold card annual fee", "Classic card annual fee"),
        (BANK, "金卡一年要交多少钱", "金卡年费多少", "白金卡年费多少"),
        (TEL, "What's the Plus plan going for per month?", "How much is the Plus plan per month?",
         "How much is the Max plan per month?"),
        (TEL, "How's roaming priced in the USA?", "USA roaming rate", "Japan roaming rate"),
    ],
)  # fmt: skip
def test_policy_vocabulary(route: SemanticRoute, asked: str, plain: str, other: str) -> None:
    k = key(route, asked)
    assert k is not None and k == key(route, plain)
    assert key(route, other) != k


@pytest.mark.parametrize(
    ("route", "near", "plain"),
    [
        (SHOP, "How much would a Pixel 8 case set me back?", "Pixel 8 price"),  # the case, not the phone
        (SHOP, "How much would it set me back to repair the Pixel 8?", "Pixel 8 price"),
        (SHOP, "order SO2024030303 tracking number", "Where is my order SO2024030303?"),  # the number itself
        (BANK, "How much interest does the Gold card charge per year?", "Gold card annual fee"),
        (BANK, "How much does the Gold card charge per month?", "Gold card annual fee"),
        (TEL, "What's the Plus plan going for per year?", "How much is the Plus plan per month?"),
        (AIR, "What's the checked bag fee in business class?", "Business class baggage allowance"),
    ],
)  # fmt: skip
def test_the_new_vocabulary_keeps_its_near_misses_apart(route: SemanticRoute, near: str, plain: str) -> None:
    assert key(route, near) != key(route, plain)
