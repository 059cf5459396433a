"""vLLM's block hashes, reproduced: checked against events recorded from a real vLLM CPU replica.

The fixture (``scripts/vllm_cpu/record_events.py``) holds the requests sent, in order, and every event
batch the replica published; the tokenizer and chat template are the served model's own.
"""

from __future__ import annotations

import base64
import gzip
import json
import shutil
from pathlib import Path

import pytest

from router.engine_prompt import EnginePrompt
from router.kv_events import Stored, decode_batch
from router.vllm_hash import block_hashes, cbor, none_hash

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kv_events"


@pytest.fixture(scope="module")
def recording() -> dict:
    return json.loads((FIXTURES / "tiny_llama_bs32.json").read_text())


@pytest.fixture(scope="module")
def engine_prompt(tmp_path_factory: pytest.TempPathFactory) -> EnginePrompt:
    d = tmp_path_factory.mktemp("model")
    with gzip.open(FIXTURES / "tokenizer.json.gz") as src, (d / "tokenizer.json").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(FIXTURES / "tokenizer_config.json", d / "tokenizer_config.json")
    return EnginePrompt(d / "tokenizer.json", None, 32)


def stored_events(recording: dict) -> list[Stored]:
    out = []
    for frame in recording["frames"]:
        out += [e for e in decode_batch(base64.b64decode(frame["payload"])).events if isinstance(e, Stored)]
    return out


def test_every_request_hashes_to_blocks_the_replica_published(recording, engine_prompt):
    published = {h for e in stored_events(recording) for h in e.block_hashes}
    assert recording["requests"], "empty recording"
    for req in recording["requests"]:
        ids = engine_prompt.token_ids(req["endpoint"], req["body"])
        assert ids is not None and len(ids) == req["usage"]["prompt_tokens"]  # same tokens as the engine
        hashes = engine_prompt.hashes(req["endpoint"], req["body"], req["salt"] or "")
        assert len(hashes) == req["usage"]["prompt_tokens"] // 32
        assert hashes and all(h in published for h in hashes), req["salt"]


def test_chains_follow_parent_hashes_and_the_salt_sits_on_the_first_block(recording):
    events = stored_events(recording)
    first = [e for e in events if e.parent is None]
    assert first and all(e.salted == (e is not events[2]) for e in first)  # the unsalted request is 3rd
    for e in events:
        if e.parent is not None:
            assert e.salted is False


def test_salt_changes_every_hash_of_the_chain():
    ids = list(range(100, 196))
    plain = block_hashes(ids, 32)
    a = block_hashes(ids, 32, salt="tenant-a")
    b = block_hashes(ids, 32, salt="tenant-b")
    assert len(plain) == len(a) == len(b) == 3
    assert not set(plain) & set(a) and not set(a) & set(b)
    assert block_hashes(ids, 32, salt="tenant-a") == a  # deterministic across calls


def test_seed_changes_the_root_and_partial_blocks_are_not_hashed():
    ids = list(range(70))
    assert block_hashes(ids, 32, seed="0") != block_hashes(ids, 32)
    assert none_hash("0") != none_hash(None)
    assert len(block_hashes(ids, 32)) == 2 and block_hashes(ids[:31], 32) == ()
    assert block_hashes(ids, 32, max_blocks=1) == block_hashes(ids, 32)[:1]


@pytest.mark.parametrize(
    ("value", "encoded"),
    [  # RFC 8949 appendix A vectors (canonical forms)
        (0, "00"),
        (23, "17"),
        (24, "1818"),
        (1000, "1903e8"),
        (1000000, "1a000f4240"),
        (18446744073709551615, "1bffffffffffffffff"),
        (-1, "20"),
        (-1000, "3903e7"),
        (None, "f6"),
        (b"\x01\x02\x03\x04", "4401020304"),
        ("IETF", "6449455446"),
        ((1, (2, 3), [4, 5]), "8301820203820405"),
    ],
)
def test_cbor_matches_rfc_8949_vectors(value, encoded):
    assert cbor(value).hex() == encoded
