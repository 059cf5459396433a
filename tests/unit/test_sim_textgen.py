"""Deterministic generated text and embeddings; SimConfig and Faults validation."""

from __future__ import annotations

import pytest

from sim import textgen
from sim.config import Faults, SimConfig


def test_same_inputs_same_words() -> None:
    base = textgen.answer_seed(b"prompt", None, 0.0)
    assert textgen.tokens(base, 20) == textgen.tokens(textgen.answer_seed(b"prompt", None, 0.0), 20)
    assert all(t.startswith(" ") and t.strip() in textgen.WORDS for t in textgen.tokens(base, 20))


def test_prompt_seed_temperature_and_nonce_change_the_answer() -> None:
    ref = textgen.tokens(textgen.answer_seed(b"prompt", None, 0.0), 20)
    for other in (
        textgen.answer_seed(b"prompt!", None, 0.0),
        textgen.answer_seed(b"prompt", 1, 0.0),
        textgen.answer_seed(b"prompt", None, 0.7),
        textgen.answer_seed(b"prompt", None, 0.0, nonce=5),
    ):
        assert textgen.tokens(other, 20) != ref


def test_huge_seed_is_fine() -> None:
    assert textgen.answer_seed(b"x", 2**80, 0.0) != textgen.answer_seed(b"x", 2**80 + 1, 0.0)


def test_embedding_is_deterministic_and_bounded() -> None:
    v = textgen.embedding(b"abc", 8)
    assert v == textgen.embedding(b"abc", 8)
    assert v != textgen.embedding(b"abd", 8)
    assert len(v) == 8 and all(-1.0 <= x <= 1.0 for x in v)


def test_faults_from_json() -> None:
    assert Faults.from_json({}) == Faults()
    f = Faults.from_json({"fail_status": 503, "slow_factor": 2, "hang": True, "drop_mid_stream_after": 0})
    assert (f.fail_status, f.slow_factor, f.hang, f.drop_mid_stream_after) == (503, 2.0, True, 0)
    assert Faults.from_json(f.to_json()) == f
    for bad in (
        {"nope": 1},
        {"fail_status": 42},
        {"hang": 1},
        {"slow_factor": -1},
        {"drop_mid_stream_after": "3"},
    ):
        with pytest.raises(ValueError):
            Faults.from_json(bad)


def test_simconfig_validates() -> None:
    assert SimConfig(models="m").models == ("m",)
    for bad in ({"block_size": 0}, {"speed": -1.0}, {"models": ()}, {"max_num_seqs": 0}):
        with pytest.raises(ValueError):
            SimConfig(**bad)
