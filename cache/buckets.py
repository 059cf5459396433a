"""Token buckets: in memory (one pod) and in Redis (atomic Lua on the server's clock, so pods agree).

Semantics, identical for both: a bucket starts full (``capacity``), refills continuously at
``refill_per_s`` up to ``capacity``; ``take`` removes ``cost`` tokens if there are enough, else
answers how long until there will be (``retry_after_s``). A cost above the capacity can never be paid:
it is refused with ``retry_after_s = inf`` (the caller answers 429/400 without a Retry-After it could
not honour). ``refund`` puts tokens back (capped at the capacity), e.g. reserved tokens not used.

On top of them: the per-key fill bucket, the fill breaker and the per-tenant limits (``limits`` below).
Redis failures never raise: the result says ``degraded=True`` and is allowed or refused per fail mode
(refused with ``retry_after_s = 1``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import redis.asyncio as aioredis

from cache.store import ErrorHook
from cache.store_redis import REDIS_ERRORS


class TakeResult(NamedTuple):
    allowed: bool
    retry_after_s: float
    remaining: float
    degraded: bool = False  # the backend failed; ``allowed`` is the fail-mode answer


class Buckets(Protocol):
    async def take(self, key: str, cost: float, capacity: float, refill_per_s: float) -> TakeResult: ...

    async def refund(self, key: str, amount: float, capacity: float) -> None: ...


def _step(
    tokens: float, last: float, now: float, cost: float, capacity: float, rate: float
) -> tuple[TakeResult, float]:
    tokens = min(capacity, tokens + max(0.0, now - last) * rate)
    if cost > capacity:
        return TakeResult(False, math.inf, tokens), tokens
    if tokens >= cost:
        return TakeResult(True, 0.0, tokens - cost), tokens - cost
    return TakeResult(False, (cost - tokens) / rate, tokens), tokens


@dataclass(slots=True)
class _State:
    tokens: float
    last: float
    capacity: float
    rate: float


class MemoryBuckets:
    """In-process buckets with an injectable clock. Idle full buckets are forgotten (bounded memory)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_keys: int = 100_000):
        self.clock = clock
        self.max_keys = max_keys
        self._state: dict[str, _State] = {}

    async def take(self, key: str, cost: float, capacity: float, refill_per_s: float) -> TakeResult:
        now = self.clock()
        st = self._state.get(key)
        if st is None:
            if len(self._state) >= self.max_keys:
                self._forget_full(now)
            st = self._state[key] = _State(capacity, now, capacity, refill_per_s)
        st.capacity, st.rate = capacity, refill_per_s
        result, st.tokens = _step(st.tokens, st.last, now, cost, capacity, refill_per_s)
        st.last = now
        return result

    async def refund(self, key: str, amount: float, capacity: float) -> None:
        st = self._state.get(key)
        if st is not None:
            st.tokens = min(capacity, st.tokens + amount)

    def _forget_full(self, now: float) -> None:
        # A bucket refilled to capacity is the same as no bucket: drop those; if none, drop the oldest
        # tenth (which makes those keys more lenient, never stricter).
        full = [k for k, s in self._state.items() if s.tokens + (now - s.last) * s.rate >= s.capacity]
        for k in full or sorted(self._state, key=lambda k: self._state[k].last)[: len(self._state) // 10 + 1]:
            del self._state[k]


# KEYS[1] bucket; ARGV cost, capacity, rate. Uses the server clock (TIME) so every pod agrees.
_TAKE_LUA = """
local cost = tonumber(ARGV[1])
local cap = tonumber(ARGV[2])
local rate = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local v = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(v[1])
local ts = tonumber(v[2])
if tokens == nil or ts == nil then tokens = cap; ts = now end
local elapsed = now - ts
if elapsed < 0 then elapsed = 0 end
tokens = math.min(cap, tokens + elapsed * rate)
local allowed = 0
local retry = 0
if cost > cap then
  retry = -1
elseif tokens >= cost then
  tokens = tokens - cost
  allowed = 1
else
  retry = (cost - tokens) / rate
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(cap / rate * 1000) + 1000)
return {allowed, tostring(retry), tostring(tokens)}
"""

# KEYS[1] bucket; ARGV amount, capacity. A missing bucket is full already: nothing to refund.
_REFUND_LUA = """
local v = redis.call('HGET', KEYS[1], 'tokens')
if not v then return 0 end
local tokens = math.min(tonumber(ARGV[2]), tonumber(v) + tonumber(ARGV[1]))
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens))
return 1
"""


class RedisBuckets:
    """Buckets in Redis (``{prefix}:tb:{key}``); ``fail_open`` decides the answer when Redis fails."""

    def __init__(
        self,
        client: aioredis.Redis,
        *,
        key_prefix: str = "pgw",
        fail_open: bool = True,
        on_error: ErrorHook | None = None,
    ):
        self.redis = client
        self.prefix = key_prefix
        self.fail_open = fail_open
        self.on_error = on_error
        self.errors = 0
        self._take = client.register_script(_TAKE_LUA)
        self._refund = client.register_script(_REFUND_LUA)

    def _key(self, key: str) -> str:
        return f"{self.prefix}:tb:{{{key}}}"

    def _failed(self, op: str, exc: BaseException) -> None:
        self.errors += 1
        if self.on_error is not None:
            self.on_error(op, exc)

    async def take(self, key: str, cost: float, capacity: float, refill_per_s: float) -> TakeResult:
        try:
            allowed, retry, remaining = await self._take(
                keys=[self._key(key)],
                args=[repr(float(cost)), repr(float(capacity)), repr(float(refill_per_s))],
            )
        except REDIS_ERRORS as exc:
            self._failed("take", exc)
            return TakeResult(self.fail_open, 0.0 if self.fail_open else 1.0, 0.0, degraded=True)
        retry_s = float(retry)
        return TakeResult(bool(allowed), math.inf if retry_s < 0 else retry_s, float(remaining))

    async def refund(self, key: str, amount: float, capacity: float) -> None:
        if amount <= 0:
            return
        try:
            await self._refund(keys=[self._key(key)], args=[repr(float(amount)), repr(float(capacity))])
        except REDIS_ERRORS as exc:
            self._failed("refund", exc)


# --- uses ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reservation:
    """Tokens taken from a tenant's per-minute bucket before the call; settle with the actual usage."""

    tenant: str
    reserved: float


class TenantLimiter:
    """Per-tenant requests/s and tokens/min. None disables a limit.

    Token limits reserve prompt + max_tokens before the call and refund what was not used afterwards.
    """

    def __init__(
        self,
        buckets: Buckets,
        *,
        requests_per_s: float | None = None,
        request_burst: float | None = None,
        tokens_per_min: float | None = None,
    ):
        self.buckets = buckets
        self.requests_per_s = requests_per_s
        self.request_burst = request_burst or (2 * requests_per_s if requests_per_s else None)
        self.tokens_per_min = tokens_per_min

    async def check_request(self, tenant: str) -> TakeResult:
        if self.requests_per_s is None or self.request_burst is None:
            return TakeResult(True, 0.0, math.inf)
        return await self.buckets.take(f"rq:{tenant}", 1, self.request_burst, self.requests_per_s)

    async def reserve_tokens(self, tenant: str, tokens: int) -> tuple[TakeResult, Reservation | None]:
        if self.tokens_per_min is None:
            return TakeResult(True, 0.0, math.inf), None
        result = await self.buckets.take(
            f"tk:{tenant}", tokens, self.tokens_per_min, self.tokens_per_min / 60.0
        )
        if not result.allowed or result.degraded:
            return result, None
        return result, Reservation(tenant, float(tokens))

    async def settle(self, reservation: Reservation | None, used_tokens: int) -> None:
        """Refund the unused part of a reservation (nothing if more was used than reserved)."""
        if reservation is None or self.tokens_per_min is None:
            return
        unused = reservation.reserved - used_tokens
        if unused > 0:
            await self.buckets.refund(f"tk:{reservation.tenant}", unused, self.tokens_per_min)


class KeyGate:
    """Anti-stampede per cache key: how often one key may go to the fleet, and the fill breaker.

    ``admit(key)`` answers whether this request may go upstream. The key bucket (default 10 burst,
    1/s) limits fleet calls per key; the fill breaker trips when a key is requested more than
    ``threshold_per_min`` times a minute (a bucket of that size refilling over a minute), and the
    caller then answers the configured fallback or 503 + Retry-After.
    """

    def __init__(
        self,
        buckets: Buckets,
        *,
        capacity: float = 10.0,
        refill_per_s: float = 1.0,
        breaker_threshold_per_min: int | None = None,
    ):
        self.buckets = buckets
        self.capacity = capacity
        self.refill_per_s = refill_per_s
        self.breaker = breaker_threshold_per_min

    async def breaker_check(self, key: str) -> TakeResult:
        """Count one request for ``key``; ``allowed=False`` means the breaker is open for it."""
        if self.breaker is None:
            return TakeResult(True, 0.0, math.inf)
        return await self.buckets.take(f"fb:{key}", 1, float(self.breaker), self.breaker / 60.0)

    async def admit(self, key: str) -> TakeResult:
        """Take one fleet call from the key's bucket."""
        return await self.buckets.take(f"kb:{key}", 1, self.capacity, self.refill_per_s)
