"""The guarded embedding mode's compatible rule (issue 25): what it adds, and what it still refuses.

A candidate whose fingerprint equals the question's but for words no rule explains may be served when
the embedding scores it at or above the threshold, if the words the two questions do not share are
harmless (``cache.semantic.vocab.SIMILARITY_SAFE``: articles, pronouns, auxiliaries, politeness, asking
verbs), the words they share come in the same order, and the embedding model covers their language.
Each rule has a pair that must pass and one that must not.
"""

from __future__ import annotations

from array import array

import pytest

from cache.semantic.embedding import Candidate, CandidateIndex
from cache.semantic.guards import GuardFeatures, veto
from cache.semantic.route import SemanticRoute
from config import load_policy
from config.loader import example_path
from config.semantic import EmbeddingConfig

CFG = load_policy(example_path("semantic-ecommerce"), env={}).cache.semantic


def route(**guards: object) -> SemanticRoute:
    emb = EmbeddingConfig(url="http://127.0.0.1:9", model="m", threshold=0.9)
    emb = emb.model_copy(update={"guards": emb.guards.model_copy(update=guards)})
    return SemanticRoute(CFG.model_copy(update={"mode": "embedding", "embedding": emb}), b"s")


def g(r: SemanticRoute, text: str) -> GuardFeatures:
    body = {"model": "sim-llama", "messages": [{"role": "user", "content": text}]}
    out = r.analyse("chat", body).guards
    assert out is not None
    return out


def why(a: str, b: str, **guards: object) -> str | None:
    r = route(**guards)
    assert r.cfg.embedding is not None
    return veto(g(r, a), g(r, b), r.cfg.embedding.guards)


def test_harmless_unexplained_words_are_compatible() -> None:
    # "kindly" is no filler of the policy: the fingerprint alone misses this pair.
    assert g(route(), "Kindly tell me the Pixel 8 weight").meaning is None
    assert why("Kindly tell me the Pixel 8 weight", "Pixel 8 weight") is None
    assert why("Pixel 8 weight", "Could you just check the Pixel 8 weight?") is None


@pytest.mark.parametrize(
    ("a", "b", "guard"),
    [
        # a content word only one side has
        ("Pixel 8 weight", "Pixel 8 case weight", "unexplained"),
        # an unknown word only one side has: the embedding is not trusted with it
        ("Pixel 8 weight", "Pixel 8 weight in winter", "unexplained"),
        # a question word changes what is asked ("how long does it take" is not "how do I")
        ("Pixel 8 weight kindly", "Pixel 8 weight when", "unexplained"),
        # a direction word changes the answer
        ("Pixel 8 weight kindly from", "Pixel 8 weight kindly to", "unexplained"),
    ],
)
def test_words_that_may_change_the_answer_are_refused(a: str, b: str, guard: str) -> None:
    assert why(a, b) == guard


def test_shared_unexplained_words_must_come_in_the_same_order() -> None:
    assert why("Pixel 8 weight gold edition", "Pixel 8 weight gold edition please") is None
    assert why("Pixel 8 weight gold edition", "Pixel 8 weight edition gold") == "order"


def test_a_language_the_model_does_not_cover_is_never_served_on_similarity() -> None:
    # All-MiniLM-L6-v2 is English-only: Chinese questions score near 1.0 whatever they ask.
    assert why("Pixel 8 重量 kindly", "Pixel 8 重量") == "language"
    assert why("Pixel 8 重量 kindly", "Pixel 8 重量", languages=["en", "zh"]) is None


def test_compatible_needs_the_same_intent_slots_and_constraints() -> None:
    assert why("Kindly tell me the Pixel 8 weight", "Kindly tell me the Pixel 8 price") == "intent"
    # another product: the first guard that differs is its number
    assert why("Kindly tell me the Pixel 8 weight", "Kindly tell me the Mate 60 weight") == "numbers"
    # a missing required slot is no compatible fingerprint
    assert why("Kindly tell me the weight", "Kindly tell me the weight") == "unverified"
    # the rule off: only verified (complete, equal) meanings pass, as before
    assert why("Kindly tell me the Pixel 8 weight", "Pixel 8 weight", compatible=False) == "unverified"


def test_the_index_offers_a_compatible_candidate_only_at_or_above_the_threshold() -> None:
    r = route()
    near, exact = g(r, "Kindly tell me the Pixel 8 weight"), g(r, "Pixel 8 weight")
    index = CandidateIndex()
    index.add("p", Candidate("k-near", array("f", [1.0, 0.0]), near, ()))
    # cosine 0.6: a compatible but unverified candidate is not offered below the threshold...
    assert index.search("p", array("f", [0.6, 0.8]), 0.9, exact.meaning) == []
    # ...and is offered above it (the guards then decide)
    assert [c.key for _, c in index.search("p", array("f", [1.0, 0.0]), 0.9, exact.meaning)] == ["k-near"]


def test_question_words_that_only_ask_for_the_amount_are_compatible() -> None:
    # The banking example without its filler "much": "how much" asks for what the intent names,
    # "when" (as "how long") asks something else.
    bank = load_policy(example_path("semantic-banking"), env={}).cache.semantic
    fillers = [f for f in bank.fillers if f != "much"]
    emb = EmbeddingConfig(url="http://127.0.0.1:9", model="m", threshold=0.9)
    r = SemanticRoute(
        bank.model_copy(update={"mode": "embedding", "embedding": emb, "fillers": fillers}), b"s"
    )
    assert r.cfg.embedding is not None
    cached = g(r, "What is the minimum payment?")
    assert veto(g(r, "How much is the minimum repayment?"), cached, r.cfg.embedding.guards) is None
    assert veto(g(r, "When is the minimum repayment?"), cached, r.cfg.embedding.guards) == "unexplained"


def test_chinese_words_that_only_look_like_numbers_are_no_numbers() -> None:
    # 查一下 ("have a look") is no quantity: the verified pair was refused on "numbers" (bench.semantic)
    assert why("订单号SO20240101到哪了？", "帮我查一下物流单号SO20240101到哪里了") is None
    assert why("一台iPhone 15多少钱", "两台iPhone 15多少钱") == "numbers"
