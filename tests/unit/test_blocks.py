"""Chained block hashes: identity of a block includes everything before it, salted per model and tenant."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from xxhash import xxh3_64_intdigest

from router.blocks import block_hashes, root_hash, route_key
from router.tokenizers import ApproxTokenizer, from_ids

BS = 16
approx = ApproxTokenizer(4)


def hashes(text: str, model: str = "m", salt: str = "t", max_tokens: int = 4096) -> tuple[int, ...]:
    return block_hashes(approx.encode(text), root_hash(model, salt), BS, max_tokens)


def test_hashes_follow_the_documented_chain():
    data = bytes(range(256)) * 2  # 512 bytes = 128 tokens = 8 blocks of 64 bytes
    root = root_hash("m", "t")
    got = block_hashes(approx.encode(data.decode("latin-1")), root, BS, 4096)
    raw = data.decode("latin-1").encode()
    h, want = root, []
    for i in range(0, (len(raw) // 64) * 64, 64):
        h = xxh3_64_intdigest(raw[i : i + 64], h)
        want.append(h)
    assert list(got) == want


def test_only_full_blocks_and_at_most_max_prefix_tokens():
    assert len(hashes("x" * (64 * 3 + 63))) == 3
    assert hashes("x" * 63) == ()
    assert len(hashes("x" * 64 * 1000, max_tokens=4096)) == 4096 // BS
    assert len(hashes("x" * 64 * 1000, max_tokens=100)) == 100 // BS


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=9), st.integers(min_value=0, max_value=63))
def test_a_changed_early_block_changes_every_later_hash(block, offset):
    base = "".join(chr(ord("a") + i) * 64 for i in range(10))
    pos = block * 64 + offset
    changed = base[:pos] + "Z" + base[pos + 1 :]
    a, b = hashes(base), hashes(changed)
    assert a[:block] == b[:block]
    assert all(x != y for x, y in zip(a[block:], b[block:], strict=True))


def test_different_salt_or_model_never_shares_any_hash():
    text = "shared system prompt " * 200
    base = set(hashes(text))
    assert not base & set(hashes(text, salt="other-tenant"))
    assert not base & set(hashes(text, model="other-model"))
    # (model, salt) pairs cannot run into each other by concatenation
    assert root_hash("ab", "c") != root_hash("a", "bc")


def test_token_id_prompts_hash_packed_ids():
    ids = list(range(100))
    a = block_hashes(from_ids(ids), root_hash("m", "t"), BS, 4096)
    b = block_hashes(from_ids([*ids[:50], 7, *ids[51:]]), root_hash("m", "t"), BS, 4096)
    assert len(a) == 100 // BS
    assert a[:3] == b[:3] and a[3] != b[3]


def test_route_key_is_the_chained_hash_at_route_key_tokens_or_of_a_short_prompt():
    root = root_hash("m", "t")
    long = approx.encode("y" * 4 * 1000)
    hs = block_hashes(long, root, BS, 4096)
    assert route_key(long, hs, root, BS, 256) == hs[256 // BS - 1]
    # A longer prompt with the same first 256 tokens has the same key; a different start does not.
    longer = approx.encode("y" * 4 * 2000)
    assert route_key(longer, block_hashes(longer, root, BS, 4096), root, BS, 256) == hs[15]
    short = approx.encode("short prompt")
    k1 = route_key(short, block_hashes(short, root, BS, 4096), root, BS, 256)
    other = approx.encode("short prompt!")
    assert k1 != route_key(other, block_hashes(other, root, BS, 4096), root, BS, 256)


def test_an_8k_token_prompt_hashes_256_blocks():
    t = approx.encode("z" * 4 * 8192)
    assert t.count == 8192
    assert len(block_hashes(t, 1, BS, 4096)) == 256
