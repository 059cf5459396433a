"""The replica's prefix cache, modelled without a tokenizer: pure, no I/O.

A prompt is a byte string; one token is ``bytes_per_token`` bytes (the last partial token counts).
Tokens are grouped in blocks of ``block_size``; only full blocks are cached. Block ``i`` is
identified by ``h_i = xxh3_64(block_i, seed=h_{i-1})`` where the seed of the first block is derived
from the request's ``cache_salt`` (0 without one), so a block's identity covers everything before it
and two salts never share a block, as in vLLM.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import xxhash

_xxh3 = xxhash.xxh3_64_intdigest


def count_tokens(nbytes: int, bytes_per_token: int) -> int:
    """Approximate token count of ``nbytes`` bytes: ceil(nbytes / bytes_per_token)."""
    return -(-nbytes // bytes_per_token)


def salt_seed(cache_salt: str | None) -> int:
    """The seed mixed into the first block's hash; 0 when there is no salt."""
    if not cache_salt:
        return 0
    return _xxh3(b"cache_salt\x00" + cache_salt.encode("utf-8"))


def block_hashes(
    data: bytes, *, block_size: int, bytes_per_token: int, cache_salt: str | None = None
) -> list[int]:
    """Chained hashes of every full block of ``data`` (a trailing partial block is not hashed).

    A block is full when it has ``block_size`` tokens; its last token may itself be partial.
    """
    n_blocks = count_tokens(len(data), bytes_per_token) // block_size
    step = block_size * bytes_per_token
    h = salt_seed(cache_salt)
    out = []
    for i in range(n_blocks):
        h = _xxh3(data[i * step : (i + 1) * step], h)
        out.append(h)
    return out


class KVCache:
    """An LRU of block hashes bounded by ``capacity_blocks``.

    ``match`` counts the leading blocks present (stopping at the first miss) and refreshes them;
    ``insert`` adds or refreshes all of a request's full blocks, evicting the least recently used.
    """

    __slots__ = ("_lru", "capacity_blocks", "evictions")

    def __init__(self, capacity_blocks: int) -> None:
        if capacity_blocks < 1:
            raise ValueError("capacity_blocks must be >= 1")
        self.capacity_blocks = capacity_blocks
        self._lru: OrderedDict[int, None] = OrderedDict()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._lru)

    def __contains__(self, block_hash: int) -> bool:
        return block_hash in self._lru

    def match(self, hashes: Sequence[int]) -> int:
        """Number of leading blocks of ``hashes`` found in the cache; those blocks are touched."""
        lru = self._lru
        n = 0
        for h in hashes:
            if h not in lru:
                break
            lru.move_to_end(h)
            n += 1
        return n

    def insert(self, hashes: Sequence[int]) -> None:
        """Insert or touch every block, in order; evict from the cold end beyond capacity."""
        lru = self._lru
        for h in hashes:
            if h in lru:
                lru.move_to_end(h)
            else:
                lru[h] = None
        overflow = len(lru) - self.capacity_blocks
        for _ in range(max(0, overflow)):
            lru.popitem(last=False)
        if overflow > 0:
            self.evictions += overflow

    def clear(self) -> None:
        self._lru.clear()
        self.evictions = 0
