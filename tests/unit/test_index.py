"""Per-replica prefix index: matching, LRU bound and eviction order, TTL with an injected clock."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from router.index import PrefixIndex


def chain(tag: int, n: int) -> list[int]:
    return [tag * 1_000_000 + i for i in range(n)]


def consistent(idx: PrefixIndex) -> None:
    """Every replica within its bound, and its entries prefix-closed for the test chains (chain(tag, n))."""
    for r, lru in idx._lru.items():
        assert len(lru) <= idx._cap[r]
        for h in lru:
            tag, i = divmod(h, 1_000_000)
            if tag < 90:  # test chains only
                assert all(tag * 1_000_000 + j in lru for j in range(i)), (r, h)


def test_match_walks_leading_blocks_for_every_replica():
    idx = PrefixIndex()
    for r in ("a", "b", "c"):
        idx.add_replica(r, 100)
    c = chain(1, 10)
    idx.insert("a", c[:10])
    idx.insert("b", c[:4])
    idx.insert("c", [99 * 1_000_000, *chain(99, 9)[1:]])  # another chain: it does not match c
    assert idx.match(c) == {"a": 10, "b": 4}
    # A prompt that diverges after its first block: every later hash differs (chained hashing).
    assert idx.match([c[0], *chain(5, 9)]) == {"a": 1, "b": 1}
    assert idx.match(c[:3]) == {"a": 3, "b": 3}
    assert idx.match([777]) == {}
    assert idx.match([]) == {}
    consistent(idx)


def test_lru_bound_evicts_least_recent_and_chain_tails_first():
    idx = PrefixIndex()
    idx.add_replica("a", 10)
    old, new = chain(1, 6), chain(2, 6)
    idx.insert("a", old)
    idx.insert("a", new)
    assert idx.size("a") == 10
    # The old chain lost its tail (2 blocks), not its head: it still matches its first 4 blocks.
    assert idx.match(old) == {"a": 4}
    assert idx.match(new) == {"a": 6}
    idx.insert("a", old[:4])  # refresh: now the new chain's tail is the oldest
    idx.insert("a", chain(3, 2))
    assert idx.match(new) == {"a": 4}
    assert idx.match(old) == {"a": 4}
    assert idx.stats().evictions == 4
    consistent(idx)


def test_insert_longer_than_capacity_keeps_the_head():
    idx = PrefixIndex()
    idx.add_replica("a", 5)
    c = chain(1, 20)
    idx.insert("a", c)
    assert idx.size("a") == 5 and idx.match(c) == {"a": 5}


def test_known_prefix_refresh_matches_the_plain_loop():
    a, b = PrefixIndex(), PrefixIndex()
    for idx in (a, b):
        idx.add_replica("r", 12)
        idx.insert("r", chain(1, 8))
        idx.insert("r", chain(2, 4))
    a.insert("r", chain(1, 10), known=8)
    b.insert("r", chain(1, 10))
    assert list(a._lru["r"]) == list(b._lru["r"])
    consistent(a)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 5), st.integers(1, 30)), max_size=40))
def test_memory_stays_bounded_and_consistent(ops):
    idx = PrefixIndex()
    caps = {"a": 7, "b": 20, "c": 50}
    for r, cap in caps.items():
        idx.add_replica(r, cap)
    for r, tag, n in ops:
        idx.insert(r, chain(tag, n))
    for r, cap in caps.items():
        assert idx.size(r) <= cap
    assert idx.stats().entries <= sum(caps.values())
    consistent(idx)


def test_ttl_expiry_with_an_injected_clock():
    idx = PrefixIndex(ttl_s=10.0)
    idx.add_replica("a", 100)
    idx.add_replica("b", 100)
    c = chain(1, 5)
    idx.insert("a", c, now=0.0)
    idx.insert("b", c, now=5.0)
    assert idx.match(c, now=9.0) == {"a": 5, "b": 5}
    assert idx.match(c, now=12.0) == {"b": 5}  # a's entries are 12 s old
    idx.insert("b", c[:2], now=14.0)  # refresh only the head
    assert idx.match(c, now=16.0) == {"b": 2}
    assert idx.match(c, now=30.0) == {}
    assert idx.stats().entries == 0 and idx.stats().expirations == 10
    consistent(idx)


def test_drop_replica_and_shrink_capacity():
    idx = PrefixIndex()
    idx.add_replica("a", 50)
    idx.add_replica("b", 50)
    c = chain(1, 30)
    idx.insert("a", c)
    idx.insert("b", c)
    idx.drop_replica("a")
    assert idx.match(c) == {"b": 30}
    idx.add_replica("b", 10)  # capacity learnt smaller: evict at once
    assert idx.size("b") == 10 and idx.match(c) == {"b": 10}
    stats = idx.stats()
    assert stats.replicas == 1 and stats.per_replica == {"b": 10} and stats.entries == 10
    consistent(idx)
    with pytest.raises(KeyError):
        idx.insert("a", c)


def test_forget_from_drops_a_chain_tail_of_one_replica():
    idx = PrefixIndex()
    idx.add_replica("a", 50)
    idx.add_replica("b", 50)
    c = chain(1, 6)
    idx.insert("a", c)
    idx.insert("b", c)
    idx.forget_from("a", c, 3)
    assert idx.match(c) == {"a": 3, "b": 6}
    consistent(idx)


def test_match_agrees_with_a_naive_model():
    rng = random.Random(3)
    idx = PrefixIndex()
    held: dict[str, set[int]] = {}
    for r in "abcdef":
        idx.add_replica(r, 10_000)
        held[r] = set()
    chains = [chain(t, 40) for t in range(5)]
    for _ in range(60):
        r, c = rng.choice("abcdef"), rng.choice(chains)
        part = c[: rng.randint(1, 40)]
        idx.insert(r, part)
        held[r].update(part)
    for c in chains:
        want = {}
        for r, hs in held.items():
            n = 0
            while n < len(c) and c[n] in hs:
                n += 1
            if n:
                want[r] = n
        assert idx.match(c) == want


def test_headroom_and_unlearn_oldest():
    idx = PrefixIndex()
    idx.add_replica("a", 4)
    assert idx.headroom("a", 10.0) == (4, float("inf"))
    idx.insert("a", [1, 2], now=1.0)
    assert idx.headroom("a", 10.0) == (2, float("inf"))
    idx.insert("a", [5, 6], now=4.0)
    assert idx.headroom("a", 10.0) == (0, 9.0)  # full: its next eviction was sent at t = 1
    assert idx.unlearn_oldest("a", 3) == 3 and idx.size("a") == 1
    assert idx.match([5, 6])["a"] == 1  # 6 was older than 5 (a chain is inserted last block first)
    assert idx.unlearn_oldest("a", 10) == 1 and idx.unlearn_oldest("gone", 1) == 0
    assert idx.stats().unlearned == 4
    assert idx.headroom("unknown", 0.0) == (0, 0.0)


def test_ghosts_are_what_the_bound_forgot_with_how_many_evictions_came_after():
    """router.capacity grows a replica's estimate only on hits the index's own bound had forgotten."""
    idx = PrefixIndex(ghosts=True)
    idx.add_replica("r", 4)
    idx.insert("r", [1, 2, 3, 4])
    idx.insert("r", [5, 6])  # evicts 4 then 3 (a chain's tail first)
    assert not idx.holds("r", 3) and not idx.holds("r", 4)
    assert idx.ghost_depths("r", [1, 2, 3, 4], 2) == (1, 2)  # 3 buried last: a depth counts itself
    assert idx.ghost_depths("r", [1, 2, 3, 4], 3) == (2,)
    assert idx.ghost_depths("r", [7, 3], 0) == ()  # never held: no evidence
    idx.insert("r", [1, 2, 3])  # back in the index: no longer a ghost
    assert idx.ghost_depths("r", [1, 2, 3], 2) == ()
    assert idx.ghost_depths("r", [6], 0) == (1,)  # evicted by that insert (oldest: 6, 5, 3, 2, 1)
    idx.unlearn_oldest("r", 1)  # what the replica evicted is a ghost too
    assert idx.ghost_depths("r", [5], 0) == (1,) and idx.ghost_depths("r", [6], 0) == (2,)
    for h in range(100, 120):
        idx.insert("r", [h])
    assert sum(len(idx.ghost_depths("r", [h], 0)) for h in range(100, 120)) == 4  # at most the bound
    assert PrefixIndex().ghost_depths("r", [1], 0) == ()


def test_no_ghosts_unless_asked():
    idx = PrefixIndex()
    idx.add_replica("r", 1)
    idx.insert("r", [1])
    idx.insert("r", [2])
    assert idx.ghost_depths("r", [1], 0) == ()
