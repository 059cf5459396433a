"""The Responses API's store: what ``previous_response_id`` and ``GET/DELETE /v1/responses/{id}`` read.

vLLM keeps responses in the memory of the one replica that answered (and only with
``VLLM_ENABLE_RESPONSES_API_STORE=1``), so behind a load balancer a follow-up that lands elsewhere
fails with "Response with id … not found". Here the gateway keeps them, so any replica can answer a
follow-up: a record is the response object the client received and the conversation that led to it
(input items, history included, and the output), so expanding a chain is one read, whatever its length.

Records are per tenant (a tenant never reads another's ids), expire after ``ttl_s``, and are bounded:
``max_record_bytes`` each; in memory also ``max_entries`` and ``max_bytes`` in all, the oldest dropped
first. In Redis (several pods): ``{prefix}:resp:<tenant digest>:<id>`` with Redis' own TTL; keys carry
no text. Redis failures raise ``REDIS_ERRORS`` to the caller, which answers 503 (a read) or counts them
(a write: the answer was already generated).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any, Protocol

import orjson
import redis.asyncio as aioredis
import xxhash

from config.protocols import ResponseStoreConfig

Record = dict[str, Any]  # {"response": <the response object>, "items": [<conversation items>]}


class ConversationStore(Protocol):
    async def get(self, tenant: str, response_id: str) -> Record | None: ...

    async def put(self, tenant: str, response_id: str, record: Record) -> bool: ...

    async def delete(self, tenant: str, response_id: str) -> bool: ...


class MemoryConversations:
    """Records of this process, oldest dropped first beyond ``max_entries`` or ``max_bytes``."""

    def __init__(self, cfg: ResponseStoreConfig, clock: Any = time.monotonic):
        self.cfg = cfg
        self.clock = clock
        self._records: OrderedDict[tuple[str, str], tuple[float, bytes]] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._records)

    async def get(self, tenant: str, response_id: str) -> Record | None:
        found = self._records.get((tenant, response_id))
        if found is None:
            return None
        expires, data = found
        if self.clock() >= expires:
            self._drop((tenant, response_id))
            return None
        return orjson.loads(data)

    async def put(self, tenant: str, response_id: str, record: Record) -> bool:
        data = orjson.dumps(record)
        if len(data) > self.cfg.max_record_bytes:
            return False
        key = (tenant, response_id)
        self._drop(key)
        self._records[key] = (self.clock() + self.cfg.ttl_s, data)
        self.bytes += len(data)
        while len(self._records) > self.cfg.max_entries or self.bytes > self.cfg.max_bytes:
            self._drop(next(iter(self._records)))
        return True

    async def delete(self, tenant: str, response_id: str) -> bool:
        return self._drop((tenant, response_id))

    def _drop(self, key: tuple[str, str]) -> bool:
        found = self._records.pop(key, None)
        if found is None:
            return False
        self.bytes -= len(found[1])
        return True


class RedisConversations:
    """Records in the policy's Redis, shared by every pod (the process's client, never closed here)."""

    def __init__(self, client: aioredis.Redis, cfg: ResponseStoreConfig, key_prefix: str):
        self.client = client
        self.cfg = cfg
        self.prefix = key_prefix

    def key(self, tenant: str, response_id: str) -> str:
        return f"{self.prefix}:resp:{xxhash.xxh3_64_hexdigest(tenant.encode())}:{response_id}"

    async def get(self, tenant: str, response_id: str) -> Record | None:
        data = await self.client.get(self.key(tenant, response_id))
        if data is None:
            return None
        record = orjson.loads(data)
        return record if isinstance(record, dict) else None

    async def put(self, tenant: str, response_id: str, record: Record) -> bool:
        data = orjson.dumps(record)
        if len(data) > self.cfg.max_record_bytes:
            return False
        await self.client.set(self.key(tenant, response_id), data, px=int(self.cfg.ttl_s * 1000))
        return True

    async def delete(self, tenant: str, response_id: str) -> bool:
        return bool(await self.client.delete(self.key(tenant, response_id)))


def make_conversations(
    cfg: ResponseStoreConfig, redis: aioredis.Redis | None, key_prefix: str
) -> ConversationStore | None:
    """None when the policy turns the store off; Redis when the policy names one, else memory."""
    if not cfg.enabled:
        return None
    if redis is not None:
        return RedisConversations(redis, cfg, key_prefix)
    return MemoryConversations(cfg)
