"""What a front end costs: the same request as chat completions, as the Responses API and as
Anthropic's Messages API, through one gateway, side by side in one run.

    python -m bench.protocols [--requests 2000] [--concurrency 32] [--rounds 2] [--write]
    python -m bench.protocols --micro [--write]

A zero-latency simulator (``--speed 0``) and the gateway (quick start, response cache off, so every
request is mapped, routed and relayed) in their own processes, the load generator in this one. Per API
and mode: requests/s, p50/p99 latency and the gateway's CPU seconds per 1,000 requests, each API's
ratio to chat completions; the APIs alternate ``--rounds`` times and the best run of each is kept. A
Responses request stores its answer (memory store), so that cost is in its row. A last row chains
``previous_response_id`` over ``--turns`` turns per conversation: what expanding a stored
conversation costs on top. On a small shared machine these end-to-end CPU ratios move by tens of per
cent between runs (the event loop batches differently under contention); ``--micro`` measures the
front ends' own work in this process instead: the request map, the answer map, and the stream encoder
per chunk, against what chat completions does at the same points (nothing for the request and the
answer; bytes passed through, or one ``data:`` framing, per chunk).
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import aiohttp
import orjson
import psutil

from bench.loadgen import LoadResult, run_load
from bench.procs import running, start_gateway, start_sim
from bench.report import percentile, table, write_section
from gateway.pipeline.parse import ParsedRequest
from gateway.pipeline.protocols import messages, responses
from gateway.pipeline.protocols.openai import ChatEncoder

MODEL = "sim-llama"
QUESTION = "request {i}: summarise the plot of a short story."
Body = Callable[[int], dict[str, Any]]

APIS: dict[str, tuple[str, Body]] = {
    "chat": (
        "/v1/chat/completions",
        lambda i: {
            "model": MODEL,
            "max_tokens": 16,
            "messages": [{"role": "user", "content": QUESTION.format(i=i)}],
        },
    ),
    "responses": (
        "/v1/responses",
        lambda i: {"model": MODEL, "max_output_tokens": 16, "input": QUESTION.format(i=i)},
    ),
    "messages": (
        "/v1/messages",
        lambda i: {
            "model": MODEL,
            "max_tokens": 16,
            "messages": [{"role": "user", "content": QUESTION.format(i=i)}],
        },
    ),
}


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


async def chains(url: str, conversations: int, turns: int, concurrency: int) -> LoadResult:
    """``conversations`` chains of ``turns`` Responses requests, each naming the previous one."""
    result = LoadResult()
    todo = iter(range(conversations))
    loop = asyncio.get_running_loop()

    async def one(s: aiohttp.ClientSession) -> None:
        for c in todo:
            previous = None
            for t in range(turns):
                body: dict[str, Any] = {
                    "model": MODEL,
                    "max_output_tokens": 16,
                    "input": f"conversation {c} turn {t}",
                }
                if previous is not None:
                    body["previous_response_id"] = previous
                start = loop.time()
                async with s.post(url + "/v1/responses", data=orjson.dumps(body)) as r:
                    data = await r.read()
                    result.statuses[r.status] = result.statuses.get(r.status, 0) + 1
                if r.status != 200:
                    result.errors += 1
                    break
                result.latencies.append(loop.time() - start)
                previous = orjson.loads(data)["id"]

    started = loop.time()
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(headers=headers) as s:
        await asyncio.gather(*(one(s) for _ in range(concurrency)))
    result.wall_s = loop.time() - started
    return result


async def main_async(args: argparse.Namespace) -> str:
    sim, urls = start_sim(1, extra=["--speed", "0"])
    gw = start_gateway(["--replica", urls[0], "--model", MODEL, "--no-cache", "--log-level", "error"])
    measured: dict[tuple[str, str], tuple[LoadResult, float]] = {}  # (API, mode) -> best run, CPU/1k
    with running(gw, sim):
        for stream in (False, True):
            mode = "stream" if stream else "non-stream"
            for _ in range(args.rounds):
                for name, (path, body) in APIS.items():
                    url, n, conc = gw.url + path, args.requests, args.concurrency
                    warm = await run_load(url, body, requests=200, concurrency=conc, stream=stream)
                    assert warm.errors == 0, (name, warm.statuses)
                    before = cpu_seconds(gw.pid)
                    r = await run_load(url, body, requests=n, concurrency=conc, stream=stream)
                    assert r.errors == 0, (name, r.statuses)
                    cpu = (cpu_seconds(gw.pid) - before) / r.ok * 1000
                    kept = measured.get((name, mode))
                    if kept is None or r.rps > kept[0].rps:
                        measured[(name, mode)] = (r, min(cpu, kept[1]) if kept else cpu)
        before = cpu_seconds(gw.pid)
        chained = await chains(gw.url, max(1, args.requests // args.turns), args.turns, args.concurrency)
        assert chained.errors == 0, chained.statuses
        chain = (chained, (cpu_seconds(gw.pid) - before) / chained.ok * 1000)
    rows = []
    for (name, mode), (r, cpu) in measured.items():
        rows.append(_row(name, mode, r, cpu, measured[("chat", mode)]))
    rows.append(
        _row(f"responses, {args.turns}-turn chains", "non-stream", *chain, measured[("chat", "non-stream")])
    )
    headers = [
        "API",
        "mode",
        "requests",
        "req/s",
        "ratio to chat",
        "p50 / p99 ms",
        "gateway CPU s / 1k req",
        "CPU ratio to chat",
    ]
    cmd = "python -m bench.protocols " + " ".join(sys.argv[1:])
    return (
        "## Front ends: Responses and Messages against chat completions\n\n"
        f"Command: `{cmd.strip()}` on {platform.machine()}, {psutil.cpu_count()} cores, Python "
        f"{platform.python_version()}. One simulator with `--speed 0`, the gateway's quick start with "
        f"`--no-cache`, concurrency {args.concurrency}, unique prompts; best of {args.rounds} alternating "
        "rounds. Ratios are to the chat-completions row of the same mode, measured in the same run; the "
        "chain row (each turn names the previous response) is to non-stream chat. On this shared machine "
        "the CPU ratios move by tens of per cent between runs; `--micro` measures the front ends' own "
        "work.\n\n" + table(headers, rows)
    )


def _row(name: str, mode: str, r: LoadResult, cpu: float, chat: tuple[LoadResult, float]) -> list[object]:
    p50, p99 = percentile(r.latencies, 50), percentile(r.latencies, 99)
    return [
        name,
        mode,
        r.ok,
        f"{r.rps:,.0f}",
        f"{r.rps / chat[0].rps:.2f}",
        f"{p50 * 1000:.2f} / {p99 * 1000:.2f}",
        f"{cpu:.2f}",
        f"{cpu / chat[1]:.2f}",
    ]


def _micro_ctx(stream_chunks: int) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """A request context as the front ends read it, a chat stream's chunks and its whole answer."""
    created = 1_700_000_000
    words = [f" word{i}" for i in range(stream_chunks)]
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": created, "model": MODEL}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in words
    ]
    usage = {"prompt_tokens": 40, "completion_tokens": stream_chunks, "total_tokens": 40 + stream_chunks}
    whole = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": created,
        "model": MODEL,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "".join(words)}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }
    body: dict[str, Any] = {
        "model": MODEL,
        "input": QUESTION.format(i=1),
        "instructions": "Be terse.",
        "max_output_tokens": 16,
    }
    turn = responses.Turn("resp_" + "0" * 48, created, body, responses.input_items(body["input"]), False)
    parsed = ParsedRequest("chat", {}, MODEL, True, 0)
    ctx = SimpleNamespace(exchange=turn, parsed=parsed, decision=None, usage=usage, line_item=None)
    return ctx, chunks, whole


def _per_call_us(fn: Callable[[], object], n: int) -> float:
    for _ in range(min(1000, n)):
        fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


def micro(n: int) -> str:
    ctx, chunks, whole = _micro_ctx(16)
    chunk = chunks[3]
    raw = b"data: " + orjson.dumps(chunk) + b"\n\n"
    req_r: dict[str, Any] = {
        "model": MODEL,
        "input": QUESTION.format(i=1),
        "instructions": "Be terse.",
        "max_output_tokens": 16,
    }
    req_m = {
        "model": MODEL,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": QUESTION.format(i=1)}],
    }
    turn = ctx.exchange
    enc_r, enc_m, enc_c = responses.ResponsesEncoder(ctx), messages.MessagesEncoder(ctx), ChatEncoder()
    enc_r.start(), enc_m.start()
    message = whole["choices"][0]["message"]
    rows = [
        [
            "request map",
            "-",
            f"{_per_call_us(lambda: responses.to_chat(req_r, responses.input_items(req_r['input'])), n):.1f}",
            f"{_per_call_us(lambda: messages.to_chat(req_m), n):.1f}",
        ],
        [
            "answer map (whole)",
            "-",
            f"{_per_call_us(lambda: responses.response_object(turn, 'completed', responses.output_items(turn, message), whole['usage'], 'stop'), n):.1f}",
            f"{_per_call_us(lambda: messages.message_object(ctx, messages.content_blocks(message), 'stop'), n):.1f}",
        ],
        [
            "stream, per chunk",
            f"{_per_call_us(lambda: enc_c.chunk(orjson.loads(raw[6:])), n):.1f} (when parsed; else 0)",
            f"{_per_call_us(lambda: enc_r.chunk(orjson.loads(raw[6:])), n):.1f}",
            f"{_per_call_us(lambda: enc_m.chunk(orjson.loads(raw[6:])), n):.1f}",
        ],
    ]
    headers = ["work", "chat completions, µs", "Responses, µs", "Messages, µs"]
    cmd = "python -m bench.protocols " + " ".join(sys.argv[1:])
    return (
        "## Front ends, their own work (in process)\n\n"
        f"Command: `{cmd.strip()}` on {platform.machine()}, Python {platform.python_version()}: mean of "
        f"{n:,} calls each after a warm-up, one short question and a 16-chunk answer. Per chunk: the "
        "replica's chunk parsed and written in the client's API, once per chunk the replica sends; chat "
        "completions pass a chunk's bytes through unless something needs them parsed (usage, the cache's "
        "assembly, PII unmasking). The Responses answer map excludes the store's write.\n\n"
        + table(headers, rows)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=2000, help="requests per measurement")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--turns", type=int, default=4, help="turns per conversation in the chain row")
    parser.add_argument("--micro", action="store_true", help="the front ends' own work, in process")
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args()
    if args.micro:
        md = micro(50_000)
    else:
        with asyncio.Runner() as runner:
            md = runner.run(main_async(args))
    print(md)
    if args.write:
        write_section("protocols-micro" if args.micro else "protocols", md)


if __name__ == "__main__":
    main()
