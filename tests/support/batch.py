"""What the batch tests need around ``gateway.batch``: a fleet view and a ``send`` that POSTs to simulator
replicas over real sockets (phase 2 replaces both with the gateway's pools and request path)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import aiohttp

from config.routing import RoutingConfig
from gateway.batch.runner import BatchLine, Send, Slot
from router.tokenizers import ApproxTokenizer, Tokenizer


class StaticFleet:
    """Models → replica ids, one routing config for all (the service's ``Fleet``)."""

    def __init__(self, replicas: Mapping[str, Sequence[str]], routing: RoutingConfig | None = None):
        self._replicas = {m: list(r) for m, r in replicas.items()}
        self._routing = routing or RoutingConfig()
        self._tokenizer = ApproxTokenizer(self._routing.tokenizer.bytes_per_token)

    def serves(self, model: str) -> bool:
        return model in self._replicas

    def replicas(self, model: str) -> Sequence[str]:
        return self._replicas[model]

    def routing(self, model: str) -> RoutingConfig:
        return self._routing

    def tokenizer(self, model: str) -> Tokenizer:
        return self._tokenizer


def http_send(session: aiohttp.ClientSession, urls: Mapping[str, str]) -> Send:
    """POST each line to the replica the plan chose (its url by replica id), as JSON."""
    first = next(iter(urls.values()))

    async def send(line: BatchLine, slot: Slot) -> tuple[int, Any]:
        url = urls.get(slot.replica, first) if slot.replica is not None else first
        async with session.post(
            url + line.url, json=line.body, headers={"x-request-id": line.request_id}
        ) as r:
            return r.status, await r.json(content_type=None)

    return send


async def chunks(data: bytes, size: int = 1 << 16) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]
