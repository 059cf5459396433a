"""Tokenizers: approx byte strides, and a real Hugging Face tokenizer built locally (nothing downloaded)."""

from __future__ import annotations

from array import array

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from config.routing import TokenizerConfig
from router.tokenizers import ApproxTokenizer, HFTokenizer, from_ids, make_tokenizer


def test_approx_counts_utf8_bytes_without_token_lists():
    t = ApproxTokenizer(4).encode("abcdefghi")
    assert (t.data, t.stride, t.count) == (b"abcdefghi", 4, 3)
    assert ApproxTokenizer(4).encode("é" * 4).count == 2  # 8 UTF-8 bytes
    assert ApproxTokenizer(1).encode("abc").count == 3
    assert ApproxTokenizer().encode("").count == 0


def test_from_ids_packs_four_bytes_per_token():
    t = from_ids([1, 2, 0xFFFFFFFF])
    assert t.stride == 4 and t.count == 3
    assert array("I", t.data).tolist() == [1, 2, 0xFFFFFFFF]


@pytest.fixture
def tokenizer_json(tmp_path):
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    tok.train_from_iterator(["the cache holds the prefix", "route the prompt to the replica"], trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return path


def test_hf_tokenizer_loads_when_built_and_packs_ids(tokenizer_json):
    hf = HFTokenizer(tokenizer_json)
    assert hf._tok is not None  # loaded at construction: a bad path fails at start, not per request
    t = hf.encode("the prefix the cache unknownword")
    assert t.stride == 4 and t.count == 5
    ids = array("I", t.data).tolist()
    assert ids[0] == ids[2]  # "the" twice, same id
    assert ids[4] == hf._tok.token_to_id("[UNK]")


def test_make_tokenizer_from_config(tokenizer_json):
    assert isinstance(make_tokenizer(TokenizerConfig()), ApproxTokenizer)
    assert make_tokenizer(TokenizerConfig(bytes_per_token=2)).bytes_per_token == 2
    hf = make_tokenizer(TokenizerConfig(kind="hf", path=str(tokenizer_json)))
    assert isinstance(hf, HFTokenizer) and hf.encode("the cache").count == 2


def test_hf_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="tokenizer file not found"):
        HFTokenizer(tmp_path / "nope.json").encode("x")
