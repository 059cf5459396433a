"""Issue 25: the false hits an independent set found, each reproduced, and the policy checks that
keep an operator from writing them (dangerous fillers, YAML booleans, rules compiled at check-config)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cache.semantic.guards import veto
from cache.semantic.route import SemanticRoute
from cache.semantic.vocab import dangerous_fillers
from config import PolicyError, load_policy, parse_policy
from config.loader import example_path
from config.semantic import EmbeddingConfig, SemanticConfig
from tests.support.cli import run_cli

POLICY_PATH = example_path("semantic-ecommerce")
CFG = load_policy(POLICY_PATH, env={}).cache.semantic
ROUTE = SemanticRoute(CFG, b"tag-secret")


def body(text: str) -> dict[str, object]:
    return {"model": "sim-llama", "temperature": 0, "messages": [{"role": "user", "content": text}]}


def key(text: str, route: SemanticRoute = ROUTE) -> str | None:
    return route.analyse("chat", body(text)).key("salt", route.cfg.version)


def with_fillers(*extra: str) -> SemanticRoute:
    return SemanticRoute(CFG.model_copy(update={"fillers": [*CFG.fillers, *extra]}), b"tag-secret")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("How much is the Pixel 8?", "How much is the Pixel 8 battery?"),
        ("How much does the iPhone 15 cost?", "How much does it cost to charge the iPhone 15?"),
        ("How much is the iPhone 15?", "How much is the iPhone 15 charger?"),
    ],
)
def test_a_word_that_changes_the_answer_is_never_a_filler(a: str, b: str) -> None:
    # The example policy, and any policy that lists such a word as a filler: the word is not ignored.
    for route in (ROUTE, with_fillers("battery", "charge", "charger")):
        ka, kb = key(a, route), key(b, route)
        assert ka is not None
        assert kb != ka


def test_dangerous_fillers_are_named_with_the_reason() -> None:
    cfg = CFG.model_copy(
        update={"fillers": ["the", "battery", "charge", "screen", "电池", "not", "three", "吗"]}
    )
    found = {f.filler: f.why for f in dangerous_fillers(cfg)}
    assert set(found) == {"battery", "charge", "screen", "电池", "not", "three"}
    assert "battery_life" in found["battery"]  # a word of the policy's own synonym
    assert "negation" in found["not"]
    assert dangerous_fillers(CFG) == []  # the example lists none


@pytest.mark.parametrize(
    "text", ["请问SO2024051234到哪了", "帮我查一下SO2024051234物流状态", "订单号SO2024051234到哪了"]
)
def test_an_id_pattern_with_word_boundaries_finds_the_id_between_chinese_characters(text: str) -> None:
    # What an operator writes from the docs (\b), and the example's own pattern.
    pattern = r"(?:order_no\s*)?\b(?P<order_no>(?:so|po)\d{8,14})\b"
    slots = [s.model_copy(update={"pattern": pattern}) if s.kind == "regex" else s for s in CFG.slots]
    route = SemanticRoute(CFG.model_copy(update={"slots": slots}), b"tag-secret")
    for r in (route, ROUTE):
        fp = r.analyse("chat", body(text)).fingerprint
        assert fp is not None and fp.missing is None, fp
        assert dict(fp.slots) == {"order_no": "SO2024051234"}
        assert key(text, r) != key(text.replace("SO2024051234", "SO2024051235"), r)


def _guarded() -> SemanticRoute:
    emb = EmbeddingConfig(url="http://127.0.0.1:9", model="m", threshold=0.9)
    return SemanticRoute(CFG.model_copy(update={"mode": "embedding", "embedding": emb}), b"s")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("订单号SO2024051234到哪了", "订单号SO2024051234取消了吗"),
        ("小米14多少克", "小米14多少斤"),
        ("iPhone 15 续航多久", "iPhone 15 充电要多久"),
        ("退货政策是什么", "保修政策是什么"),
        ("北京到伦敦的航班", "伦敦到北京的航班"),
        (
            "What is the battery life of the Mate 60 in hours?",
            "What is the battery life of the Mate 60 in days?",
        ),
        ("How much is the Xiaomi 14?", "How much are three Xiaomi 14 phones?"),
        ("How much is one Pixel 8?", "How much are two Pixel 8?"),
        ("Is the Mate 60 refundable?", "Is the Mate 60 non-refundable?"),
        ("What is the Pixel 8 display size?", "What is the Pixel 8 display resolution?"),
    ],
)
def test_the_embedding_guard_refuses_what_it_cannot_verify(a: str, b: str) -> None:
    route = _guarded()
    ga, gb = (route.analyse("chat", body(t)).guards for t in (a, b))
    assert ga is not None and gb is not None
    assert veto(ga, gb, route.cfg.embedding.guards) is not None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("iphone 15 price", "IPHONE 15 PRICE???"),
        ("What is the price of the iPhone 15 Pro?", "how much is the iphone15 pro"),
    ],
)
def test_the_embedding_guard_lets_verified_paraphrases_through(a: str, b: str) -> None:
    route = _guarded()
    ga, gb = (route.analyse("chat", body(t)).guards for t in (a, b))
    assert ga is not None and gb is not None
    assert veto(ga, gb, route.cfg.embedding.guards) is None  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Where's my order SO20231104001?", "Where is my order SO20231104001?"),
        ("Hi! Quick question: how much is the Galaxy S24?", "Galaxy S24 price"),
        ("Hello, what is the screen size of the Pixel 8?", "Pixel 8 display size"),
    ],
)
def test_harmless_wording_shares_the_key(a: str, b: str) -> None:
    assert key(a) is not None and key(a) == key(b)


def _semantic_policy(fillers: str) -> str:
    sem = yaml.safe_load(Path(POLICY_PATH).read_text())["cache"]["semantic"]
    sem["fillers"] = ["the"]
    text = yaml.safe_dump({"version": 1, "models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:9100"}]}],
                           "cache": {"semantic": sem}}, allow_unicode=True)  # fmt: skip
    return text.replace("- the\n", fillers)


def test_an_unquoted_yaml_boolean_in_fillers_says_to_quote_it() -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(_semantic_policy("- the\n    - on\n"), "p.yaml")
    assert "quote it" in err.value.render() and "'on'" in err.value.render()


def test_check_config_names_the_dangerous_fillers(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(_semantic_policy("- the\n    - battery\n    - 电池\n"), encoding="utf-8")
    run = run_cli("check-config", str(path))
    assert run.returncode == 0, run.stderr
    assert "warning: cache.semantic.fillers[1]: 'battery'" in run.stderr
    assert "warning: cache.semantic.fillers[2]: '电池'" in run.stderr
    assert "'the'" not in run.stderr
    ok = run_cli("check-config", str(POLICY_PATH))
    assert ok.returncode == 0 and "fillers" not in ok.stderr, ok.stderr


def test_check_config_compiles_the_rules_like_a_started_gateway(tmp_path: Path) -> None:
    sem = yaml.safe_load(Path(POLICY_PATH).read_text())["cache"]["semantic"]
    sem["intents"][1]["terms"].append("battery life")  # also an alias of query_battery_duration's term
    path = tmp_path / "p.yaml"
    text = yaml.safe_dump({"version": 1, "models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:9100"}]}],
                           "cache": {"semantic": sem}}, allow_unicode=True)  # fmt: skip
    path.write_text(text, encoding="utf-8")
    SemanticConfig.model_validate(sem)  # structurally valid
    run = run_cli("check-config", str(path))
    assert run.returncode == 1 and "cache.semantic" in run.stderr and "belongs to" in run.stderr, run.stderr


def test_semantic_explain_prints_fingerprints_and_whether_questions_share_an_answer() -> None:
    run = run_cli("semantic", "explain", "--config", str(POLICY_PATH),
                  "How much is the Pixel 8?", "How much is the Pixel 8 battery?", "pixel 8 price")  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = run.stdout
    assert "intent: query_price" in out and "slots: {'product': 'pixel8'}" in out
    assert "unexplained: ['battery']" in out
    first, second = out.split("\n[2]")[0].split("\n[1]")[1], out.split("\n[2]")[1]
    assert "no shared answer" in first and "unexplained_words" in first
    assert "SHARES the answer" in second
