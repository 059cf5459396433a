"""The reorder estimate against an exact replay: blocks too short to hold a chunk of their own.

Forty glossary entries of 10-30 tokens, shuffled per request after fixed instructions: half of them
have no content-defined cut that does not depend on their neighbours, so no stable chunk marks them.
The estimate (the advisor's replay of the sorted layout) is compared with the same ``replay`` run on
the real prompts, as is and sorted, cut into the router's token blocks: a single prefix cache, the
billing rules, no chunks. Before the group's region was laid out whole the ratio was 0.45-0.63.
"""

from __future__ import annotations

import random

import pytest

from cache.advisor.advisor import Advisor
from cache.advisor.replay import Prompt, replay
from router.blocks import block_hashes, root_hash
from router.prompt import render_prompt
from tests.unit.test_advisor import MODEL, TOK, chat, feed, policy, text

T0 = 1e9
N = 150


def glossary(seed: int, n: int, *, sort: bool) -> list[dict]:
    rng = random.Random(seed)
    instr = text(rng, 400)
    entries = [f"- {text(rng, 2)}: {text(rng, rng.randint(10, 30))}" for _ in range(40)]
    out = []
    for i in range(n):
        es = sorted(entries) if sort else random.Random(seed * 1000 + i).sample(entries, len(entries))
        out.append(chat(instr + "\nGlossary:\n" + "\n".join(es), text(rng, rng.randint(15, 60))))
    return out


def exact_per_request(adv: Advisor, bodies: list[dict]) -> float:
    spec = adv.specs[MODEL]
    bs = spec.shape.block_size
    prompts = []
    for i, body in enumerate(bodies):
        tokens = TOK.encode(str(render_prompt("chat", body)))
        hashes = block_hashes(tokens, root_hash(MODEL, "t"), bs, 1 << 20)
        units = [(h, bs) for h in hashes] + [(-1 - i, tokens.count - len(hashes) * bs)]
        prompts.append(Prompt(units, tokens.count, 0, T0 + i))
    return replay(prompts, spec.rules, spec.prices, bs).per_request()


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_shuffled_short_blocks_are_estimated_within_15_percent(seed: int) -> None:
    adv = Advisor.from_policy(policy(window_s=7 * 86_400), clock=lambda: T0 + 5000)
    as_is = glossary(seed, N, sort=False)
    feed(adv, "t", as_is, t0=T0)
    found = adv.findings("t")
    assert found and found[0].kind == "reorder"
    measured = exact_per_request(adv, as_is) - exact_per_request(adv, glossary(seed, N, sort=True))
    ratio = found[0].saving_micros_per_request / measured
    assert 0.85 <= ratio <= 1.15, f"reorder estimate / exact replay {ratio:.3f}"
