"""Chained block hashes of a prompt's first tokens, salted per model and tenant.

``h0 = xxh3_64(model, salt)`` and ``h_i = xxh3_64(block_i, seed=h_{i-1})``: a block's hash stands for
the block and everything before it (as in vLLM's prefix cache), and two tenants or two models never
share a hash chain. Only full blocks are hashed, at most ``max_prefix_tokens`` tokens.
"""

from __future__ import annotations

import functools

from xxhash import xxh3_64_intdigest

from router.tokenizers import Tokens


@functools.lru_cache(maxsize=4096)
def root_hash(model: str, salt: str) -> int:
    """h0: length-prefixed so that (model, salt) pairs cannot run into each other. Cached: a pure
    function of a pool's model and a tenant's salt, both bounded by the policy (the cache is too), was
    8 Python calls a request (two encodes, lengths and ``to_bytes``, the hash), 1 cached (``python -m
    bench.profile --calls``, issue 30 round 9)."""
    m = model.encode("utf-8", "surrogatepass")
    s = salt.encode("utf-8", "surrogatepass")
    return xxh3_64_intdigest(len(m).to_bytes(4, "little") + m + len(s).to_bytes(4, "little") + s)


def block_hashes(tokens: Tokens, root: int, block_size: int, max_prefix_tokens: int) -> tuple[int, ...]:
    """h1..hn of the full blocks among the first ``max_prefix_tokens`` tokens (one hash call per block)."""
    step = block_size * tokens.stride
    n = min(tokens.count, max_prefix_tokens) // block_size
    n = min(n, len(tokens.data) // step)  # approx: the last token may be short of bytes
    data = tokens.data  # slicing 64-byte blocks off bytes is cheaper than memoryview slices here
    out: list[int] = []
    append = out.append
    h = root
    for i in range(0, n * step, step):
        h = xxh3_64_intdigest(data[i : i + step], h)
        append(h)
    return tuple(out)


def route_key(
    tokens: Tokens, hashes: tuple[int, ...], root: int, block_size: int, route_key_tokens: int
) -> int:
    """Hash of the first ``route_key_tokens`` tokens: the chained hash there, or of the whole (short) prompt."""
    k = route_key_tokens // block_size
    if k >= 1 and len(hashes) >= k and k * block_size == route_key_tokens:
        return hashes[k - 1]
    end = min(len(tokens.data), route_key_tokens * tokens.stride)
    return xxh3_64_intdigest(memoryview(tokens.data)[:end], root ^ 0x9E3779B97F4A7C15)
