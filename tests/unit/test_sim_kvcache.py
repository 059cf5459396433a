"""The simulator's prefix-cache model: token counting, chained block hashes, LRU."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.kvcache import KVCache, block_hashes, count_tokens


def hashes(data: bytes, salt: str | None = None, block_size: int = 4, bpt: int = 4) -> list[int]:
    return block_hashes(data, block_size=block_size, bytes_per_token=bpt, cache_salt=salt)


@pytest.mark.parametrize(("nbytes", "tokens"), [(0, 0), (1, 1), (4, 1), (5, 2), (64, 16), (65, 17)])
def test_count_tokens_counts_the_last_partial_token(nbytes: int, tokens: int) -> None:
    assert count_tokens(nbytes, 4) == tokens


def test_only_full_blocks_are_hashed() -> None:
    # block = 4 tokens × 4 bytes = 16 bytes
    assert hashes(b"x" * 12) == []  # 3 tokens
    assert len(hashes(b"x" * 13)) == 1  # 4 tokens, the last partial
    assert len(hashes(b"x" * 16)) == 1
    assert len(hashes(b"x" * 44)) == 2  # 11 tokens
    # 61 bytes = 16 tokens (the last partial) = 4 full blocks; the last block is 13 bytes long
    assert len(hashes(b"x" * 61)) == 4


def test_hashes_are_chained_so_a_block_depends_on_everything_before_it() -> None:
    a = hashes(b"A" * 16 + b"same-block-text!")
    b = hashes(b"B" * 16 + b"same-block-text!")
    assert a[0] != b[0]
    assert a[1] != b[1]  # identical bytes, different history


def test_shared_prefix_shares_leading_hashes() -> None:
    base = b"0123456789abcdef" * 3
    a = hashes(base + b"tail one........")
    b = hashes(base + b"another tail!!!!")
    assert a[:3] == b[:3]
    assert a[3] != b[3]


def test_salt_changes_every_block() -> None:
    data = b"q" * 64
    plain, s1, s2 = hashes(data), hashes(data, "tenant-1"), hashes(data, "tenant-2")
    assert hashes(data, "tenant-1") == s1
    assert not set(plain) & set(s1)
    assert not set(s1) & set(s2)


@given(st.binary(max_size=300), st.integers(1, 8), st.integers(1, 8))
def test_block_count_matches_token_count(data: bytes, block_size: int, bpt: int) -> None:
    n = len(block_hashes(data, block_size=block_size, bytes_per_token=bpt))
    assert n == count_tokens(len(data), bpt) // block_size


@given(st.binary(min_size=1, max_size=200), st.binary(max_size=200))
def test_appending_keeps_leading_full_block_hashes(prefix: bytes, suffix: bytes) -> None:
    # Blocks made only of whole tokens of the prefix are unchanged by appending.
    step = 16
    whole = len(prefix) // step
    assert hashes(prefix + suffix)[:whole] == hashes(prefix)[:whole]


def test_match_stops_at_first_miss() -> None:
    kv = KVCache(100)
    kv.insert([1, 2, 3])
    assert kv.match([1, 2, 3, 4]) == 3
    assert kv.match([1, 9, 3]) == 1
    assert kv.match([9, 1, 2]) == 0
    assert kv.match([]) == 0


def test_lru_evicts_least_recently_used() -> None:
    kv = KVCache(3)
    kv.insert([1, 2, 3])
    assert kv.match([1]) == 1  # touch 1: now 2 is the coldest
    kv.insert([4])
    assert 2 not in kv
    assert 1 in kv and 3 in kv and 4 in kv
    assert len(kv) == 3
    assert kv.evictions == 1


def test_insert_touches_existing_blocks() -> None:
    kv = KVCache(3)
    kv.insert([1, 2, 3])
    kv.insert([1])  # refresh 1
    kv.insert([5, 6])  # evicts 2 and 3
    assert 1 in kv and 5 in kv and 6 in kv
    assert 2 not in kv and 3 not in kv


def test_request_larger_than_capacity_keeps_its_tail() -> None:
    kv = KVCache(2)
    kv.insert([1, 2, 3, 4])
    assert len(kv) == 2
    assert 3 in kv and 4 in kv
    assert kv.match([1, 2, 3, 4]) == 0  # the head is gone, so nothing leads


def test_clear_and_bad_capacity() -> None:
    kv = KVCache(2)
    kv.insert([1, 2, 3])
    kv.clear()
    assert len(kv) == 0 and kv.evictions == 0
    with pytest.raises(ValueError):
        KVCache(0)
