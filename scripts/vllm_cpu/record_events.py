"""Record real KV-cache event batches from a vLLM CPU replica into a small test fixture.

Binds the SUB socket, starts one replica with a small KV cache (so the recording includes
``BlockRemoved``), sends a fixed sequence of requests (salted and unsalted, repeated prefixes, enough
distinct text to evict), and writes ``tests/fixtures/kv_events/<name>.json``: the replica settings, the
requests in order, and every frame received (topic, sequence number, msgpack payload in base64). The
model's tokenizer files go beside it (gzip) so that the unit tests can recompute the engine's hashes.

Usage: ``python scripts/vllm_cpu/record_events.py [--name tiny_llama_bs32]`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import random
import shutil
import sys
import time
from pathlib import Path

import httpx
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from scripts.vllm_cpu import replicas as R

OUT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "kv_events"


def text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(R.WORDS) for _ in range(n_words))


def requests_plan() -> list[dict]:
    rng = random.Random(8)
    system = "You are a terse assistant. " + text(rng, 120)
    plan: list[dict] = []
    for salt in ("tenant-a", "tenant-a", "tenant-b", None):  # a repeat, another tenant, no salt
        body = {
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": "first question"},
            ],
        }
        plan.append({"endpoint": "chat", "body": body, "salt": salt})
    plan.append(
        {
            "endpoint": "chat",
            "body": {
                "messages": [
                    {"role": "system", "content": system},
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "two"}, {"type": "text", "text": "parts"}],
                    },
                ]
            },
            "salt": "tenant-a",
        }
    )
    plan.append(
        {
            "endpoint": "completions",
            "body": {"prompt": "Once upon a time " + text(rng, 90)},
            "salt": "tenant-c",
        }
    )
    for i in range(6):  # distinct long prompts: more than the cache holds, so blocks are evicted
        plan.append(
            {
                "endpoint": "chat",
                "body": {"messages": [{"role": "user", "content": f"doc {i}: " + text(rng, 700)}]},
                "salt": "tenant-d",
            }
        )
    return plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--name", default="tiny_llama_bs32")
    ap.add_argument("--port", type=int, default=8190)
    ap.add_argument("--events-port", type=int, default=5591)
    ap.add_argument("--block-size", type=int, default=32)
    ap.add_argument("--kv-bytes", default="9M")  # 4096 tokens must fit: 8M is just short
    args = ap.parse_args(argv)
    endpoint = f"tcp://127.0.0.1:{args.events_port}"
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.bind(endpoint)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    spec = R.ReplicaSpec(
        "rec-0",
        args.port,
        core=0,
        kv_bytes=args.kv_bytes,
        block_size=args.block_size,
        kv_events_endpoint=endpoint,
    )
    replica = R.start(spec)
    frames: list[dict] = []

    def drain(wait_s: float) -> None:
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            if sub.poll(100):
                topic, seq, payload = sub.recv_multipart()
                frames.append(
                    {
                        "topic": topic.decode(),
                        "seq": int.from_bytes(seq, "big"),
                        "payload": base64.b64encode(payload).decode(),
                    }
                )

    plan = requests_plan()
    try:
        R.wait_ready([replica])
        drain(1.0)
        with httpx.Client(base_url=replica.url, timeout=60) as client:
            for step in plan:
                body = {**step["body"], "model": R.SERVED_NAME, "max_tokens": 2, "temperature": 0}
                if step["salt"]:
                    body["cache_salt"] = step["salt"]
                path = "/v1/chat/completions" if step["endpoint"] == "chat" else "/v1/completions"
                resp = client.post(path, json=body)
                resp.raise_for_status()
                usage = resp.json()["usage"]
                step["usage"] = {
                    "prompt_tokens": usage["prompt_tokens"],
                    "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
                }
                drain(0.5)
        drain(1.0)
    finally:
        replica.stop()
        sub.close(0)
        ctx.term()
    OUT.mkdir(parents=True, exist_ok=True)
    fixture = {
        "vllm": "vllm-cpu 0.32.0",
        "block_size": args.block_size,
        "kv_cache_memory_bytes": args.kv_bytes,
        "hash_algo": R.HASH_ALGO,
        "hash_seed": None,
        "requests": plan,
        "frames": frames,
    }
    (OUT / f"{args.name}.json").write_text(json.dumps(fixture, indent=1))
    with (
        (R.MODEL_DIR / "tokenizer.json").open("rb") as src,
        gzip.open(OUT / "tokenizer.json.gz", "wb") as dst,
    ):
        shutil.copyfileobj(src, dst)
    shutil.copy(R.MODEL_DIR / "tokenizer_config.json", OUT / "tokenizer_config.json")
    print(f"{len(frames)} frames, {len(plan)} requests -> {OUT / (args.name + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
