"""A batch worker process for the kill tests: a ``BatchService`` on a policy's ``batch`` section that
sends each line straight to the policy's replicas (phase 2 runs the same service inside the gateway).

    python -m tests.support.batch_worker --config policy.yaml --owner pod-a

Runs until SIGTERM (graceful: leases released) or SIGKILL (leases left to expire).
"""

from __future__ import annotations

import argparse
import asyncio
import signal

import aiohttp
import redis.asyncio as aioredis

from config.loader import load_policy
from gateway.batch.files import FileStore
from gateway.batch.service import BatchService
from gateway.batch.store import open_store
from tests.support.batch import StaticFleet, http_send


async def serve(config: str, owner: str) -> None:
    policy = load_policy(config)
    cfg = policy.batch
    client = aioredis.from_url(policy.redis.url) if policy.redis.url else None
    store = await open_store(cfg, client, policy.redis.key_prefix)
    urls = {r.replica_id: r.base_url for m in policy.models for r in m.replicas}
    fleet = StaticFleet({m.name: [r.replica_id for r in m.replicas] for m in policy.models})
    async with aiohttp.ClientSession() as session:
        service = BatchService(
            cfg,
            store=store,
            files=FileStore(cfg.dir, cfg.limits),
            fleet=fleet,
            send=http_send(session, urls),
            load=lambda _: None,
            max_line_bytes=policy.limits.max_body_bytes,
            owner=owner,
        )
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: loop.create_task(service.close()))
        print(f"batch worker {owner} running", flush=True)
        await service.run()
        await service.close()
    await store.close()
    if client is not None:
        await client.aclose()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--owner", required=True)
    args = ap.parse_args()
    asyncio.run(serve(args.config, args.owner))


if __name__ == "__main__":
    main()
