"""Tokenizers: approx byte strides, and a real Hugging Face tokenizer built locally (nothing downloaded)."""

from __future__ import annotations

import gzip
from array import array
from pathlib import Path

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


FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kv_events"


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    """The tiny model's byte-level BPE tokenizer (the real-vLLM fixture)."""
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    path.write_bytes(gzip.decompress((FIXTURES / "tokenizer.json.gz").read_bytes()))
    return HFTokenizer(path)


def _long_pieces() -> list[str]:
    return [
        f"\x1euser\x1fmessage {i}: " + "the quick brown fox jumps over the lazy dog " * 30 for i in range(400)
    ]


def test_approx_keeps_only_the_hashed_prefix_and_counts_everything():
    pieces = _long_pieces()
    whole = ApproxTokenizer(4).encode("".join(pieces))
    head = ApproxTokenizer(4).tokens(iter(pieces), keep=1000)
    assert head.data == whole.data[:4000] and head.count == whole.count and head.stride == 4
    assert ApproxTokenizer(4).tokens(["é", "x" * 10], keep=2).data == "é".encode() + b"xxxxxx"


def test_hf_tokenizes_only_a_prefix_of_a_long_prompt_with_the_same_first_tokens(bpe):
    """Issue 19, item 1: a 560 kB prompt is not tokenized whole for routing (its Encoding would keep
    offsets and token strings for every token); the first ``keep`` ids are the whole text's."""
    pieces = _long_pieces()
    full = bpe._ids("".join(pieces))
    head = bpe.tokens(iter(pieces), keep=512)
    assert array("I", head.data).tolist() == full[:512]
    assert abs(head.count - len(full)) < 0.05 * len(full)  # the tail is counted at the head's density
    short = ["\x1euser\x1fhello there"]
    assert array("I", bpe.tokens(short, keep=512).data).tolist() == bpe._ids(short[0])  # whole: exact
    assert bpe.tokens(short, keep=512).count == len(bpe._ids(short[0]))
