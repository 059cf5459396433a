"""What the batch tests need around ``gateway.batch``: for the service tests, a fleet view and a ``send``
that POSTs to simulator replicas over real sockets; for the tests through a gateway, its policy (batch
on, tenants, prices) and small batches."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.batch_workload import URL, BatchWorkload, make_batch
from config.policy import Policy
from config.routing import RoutingConfig
from gateway.batch.runner import BatchLine, Send, Slot
from router.tokenizers import ApproxTokenizer, Tokenizer
from tests.support.stack import policy_for


class StaticFleet:
    """Models → replica ids, one routing config for all (the service's ``Fleet``)."""

    def __init__(self, replicas: Mapping[str, Sequence[str]], routing: RoutingConfig | None = None):
        self._replicas = {m: list(r) for m, r in replicas.items()}
        self._routing = routing or RoutingConfig()
        self._tokenizer = ApproxTokenizer(self._routing.tokenizer.bytes_per_token)

    def serves(self, model: str) -> bool:
        return model in self._replicas

    def allows(self, tenant: str, model: str) -> bool:
        return True  # no tenancy here: the gateway's own fleet (PoolFleet) checks the tenant's models

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


MODEL = "sim-llama"
KEYS = {"acme": "sk-acme", "globex": "sk-globex"}
SLOW = {"mode": "simple", "speed": 1.0, "decode_s_per_token": 0.02, "overhead_s": 0.005}  # sim_fleet settings


def small_batch(requests: int = 60, templates: int = 4, seed: int = 3) -> BatchWorkload:
    """A batch with short prompts and answers: quick on any simulator."""
    return make_batch(
        seed=seed,
        requests=requests,
        templates=templates,
        system_tokens=(300, 600),
        preambles=1,
        preamble_tokens=(100, 150),
        user_tokens=(5, 30),
        max_tokens=(2, 6),
    )


def with_a_bad_line(wl: BatchWorkload) -> bytes:
    """The batch's file and one line more that fails validation (``max_tokens`` 0), ``bad-one``."""
    bad = {
        "custom_id": "bad-one",
        "method": "POST",
        "url": URL,
        "body": {**wl.lines[0]["body"], "max_tokens": 0},
    }
    return wl.jsonl() + orjson.dumps(bad) + b"\n"


def batch_policy(urls: list[str], tmp: Path, *, tenants: bool = False, **batch: Any) -> Policy:
    """A gateway in front of ``urls`` with batches on (files and jobs under ``tmp``), prices for its model,
    and (``tenants``) two tenants with API keys instead of anonymous callers."""
    sections: dict[str, Any] = {
        "batch": {
            "enabled": True,
            "dir": str(tmp / "files"),
            "sqlite_path": str(tmp / "jobs.db"),
            "poll_s": 0.05,
            "share": 0.5,
            "replica_slots": 8,
            "retry_backoff_s": 0.05,
            **batch,
        },
        "billing": {
            "ledger": {"path": ":memory:"},
            "models": {MODEL: {"input_per_1m": "2.0", "output_per_1m": "8.0"}},
        },
    }
    if tenants:
        sections["tenancy"] = {
            "allow_anonymous": False,
            "tenants": [
                {"id": t, "api_key_sha256": [hashlib.sha256(k.encode()).hexdigest()]} for t, k in KEYS.items()
            ],
        }
    return policy_for(urls, routing={"policy": "prefix_affinity"}, **sections)
