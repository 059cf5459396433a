"""Two real vLLM CPU replicas of the tiny model (session scope) and the gateway in front of them.

The replicas have a small KV cache (8,192 tokens each): every test uses fresh prompts well within it,
and the eviction test fills it on purpose.

Opt-in: ``scripts/vllm_cpu/run_tests.sh`` (sets up the venv and the model if needed). The replicas
publish KV-cache events to the gateway's bound SUB socket (topics ``r0``/``r1``) and keep a replay
buffer, so a gateway started after them catches up from sequence 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from config.policy import Policy
from scripts.vllm_cpu import replicas as R
from tests.support.ports import free_port
from tests.support.stack import Gateway, gateway

pytestmark = pytest.mark.real_vllm

BLOCK = 32
KV_BYTES = "16M"  # 256 blocks = 8,192 tokens per replica: small enough to evict on purpose
KEYS = {"tenant-a": "key-a-0123456789", "tenant-b": "key-b-0123456789"}


@dataclass
class Fleet:
    replicas: list[R.Replica]
    events_bind: str

    def url(self, i: int) -> str:
        return self.replicas[i].url


@pytest.fixture(scope="session")
def fleet() -> Iterator[Fleet]:
    R.check_installed()  # a missing setup is a failure, not a skip
    bind = f"tcp://127.0.0.1:{free_port()}"
    specs = R.fleet_specs(2, bind, free_port=free_port, block_size=BLOCK, kv_bytes=KV_BYTES)
    started = [R.start(s) for s in specs]
    try:
        R.wait_ready(started)
        yield Fleet(started, bind)
    finally:
        for r in started:
            r.stop()


def policy(fleet: Fleet, index: str = "precise") -> Policy:
    replicas = [{"url": r.url, "id": r.spec.replica_id} for r in fleet.replicas]
    routing = {
        "policy": "prefix_affinity",
        "index": index,
        "block_size": BLOCK,
        "engine_block_size": BLOCK,
        "tokenizer": {"kind": "hf", "path": str(R.MODEL_DIR / "tokenizer.json")},
        "kv_events": {
            "bind": fleet.events_bind,
            "replay": {r.spec.replica_id: r.spec.replay_endpoint for r in fleet.replicas},
            "replay_timeout_s": 5.0,
        },
        "seed": 7,
    }
    return Policy.model_validate(
        {
            "server": {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "access_log": False},
            "health": {"interval_s": 1.0, "timeout_s": 2.0, "fails_to_eject": 3},
            "scrape": {"enabled": True, "interval_s": 0.5, "timeout_s": 2.0},
            "timeouts": {"connect_s": 2.0, "first_byte_s": 60.0, "total_s": 120.0},
            "cache": {"enabled": False},
            "billing": {"ledger": {"path": ":memory:"}},
            "tenancy": {
                "allow_anonymous": False,
                "tenants": [
                    {"id": t, "api_key_sha256": [hashlib.sha256(k.encode()).hexdigest()]}
                    for t, k in KEYS.items()
                ],
            },
            "models": [
                {"name": R.SERVED_NAME, "backend": "vllm", "replicas": replicas, "routing": routing},
                # Only r0: both tenants land on the same replica for the isolation check.
                {
                    "name": "tiny-r0",
                    "served_model_name": R.SERVED_NAME,
                    "backend": "vllm",
                    "replicas": replicas[:1],
                    "routing": {**routing, "index": "approximate", "kv_events": None},
                },
            ],
        }
    )


@pytest.fixture
async def gw(fleet: Fleet) -> AsyncIterator[Gateway]:
    async with gateway(policy(fleet)) as g:
        yield g
