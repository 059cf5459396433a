"""Command line of the simulator: ``python -m sim`` (wired as ``prefix-gateway sim``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys

from sim.config import MODES, SimConfig
from sim.engine import POLICIES, EngineCosts
from sim.fleet import start_replicas

_DEFAULTS = SimConfig()
_COSTS = EngineCosts()
_SIMPLE_ONLY = ("decode_s_per_token", "overhead_s")  # and prefill_s_per_token, which both modes have
_ENGINE_ONLY = (
    "max_num_batched_tokens", "long_prefill_token_threshold", "stream_interval", "token_scale",
    "scheduling_policy", "step_overhead_s", "decode_s_per_seq", "decode_attn_s_per_ctx_token", "prefill_attn_s_per_pair",
)  # fmt: skip


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the fleet options (``--replicas``, ``--base-port``, ``--host``) and every SimConfig knob."""
    add = parser.add_argument
    add("--replicas", type=int, default=1, help="number of replicas (default 1)")
    add(
        "--base-port", type=int, default=9100, help="port of replica 0; replica i uses base+i; 0 = free ports"
    )
    add("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    add("--model", nargs="+", default=list(_DEFAULTS.models), help="served model name(s)")
    add(
        "--mode",
        choices=MODES,
        default=_DEFAULTS.mode,
        help="engine: vLLM V1's scheduler and paged KV cache, stepped (default); simple: FIFO slots and "
        "fixed per-token delays (fast, for tests)",
    )
    add("--kv-capacity-blocks", type=int, default=_DEFAULTS.kv_capacity_blocks, help="vLLM num_gpu_blocks")
    add("--max-num-seqs", type=int, default=_DEFAULTS.max_num_seqs)
    add(
        "--max-num-batched-tokens",
        type=int,
        help=f"engine: token budget of a step ({_DEFAULTS.max_num_batched_tokens})",
    )
    add("--long-prefill-token-threshold", type=int, help="engine: cap of one prefill chunk (0: none)")
    add("--stream-interval", type=int, help="engine: tokens handed to a stream at once (1)")
    add(
        "--scheduling-policy",
        choices=POLICIES,
        help="engine: vLLM's --scheduling-policy: fcfs (default), or priority (the body's `priority`, "
        "lower first; the victim of a preemption is the lowest priority, latest arrived)",
    )
    add(
        "--token-scale",
        type=float,
        help="engine: one simulated token stands for this many real ones (costs x k, attention x k^2)",
    )
    add("--step-overhead-s", type=float, help=f"engine: fixed cost of a step ({_COSTS.step_overhead_s})")
    add(
        "--decode-s-per-seq",
        type=float,
        help=f"engine: cost of one decoding sequence ({_COSTS.decode_s_per_seq})",
    )
    add(
        "--decode-attn-s-per-ctx-token",
        type=float,
        help=f"engine: decode attention per context token ({_COSTS.decode_attn_s_per_ctx_token})",
    )
    add(
        "--prefill-attn-s-per-pair",
        type=float,
        help=f"engine: prefill attention per (query, key) pair ({_COSTS.prefill_attn_s_per_pair})",
    )
    add(
        "--prefill-s-per-token",
        type=float,
        help=f"cost of one prefill token (engine {_COSTS.prefill_s_per_token}, simple {_DEFAULTS.prefill_s_per_token})",
    )
    add(
        "--decode-s-per-token",
        type=float,
        help=f"simple: delay of each output token ({_DEFAULTS.decode_s_per_token})",
    )
    add(
        "--overhead-s",
        type=float,
        help=f"simple: fixed delay before the first token ({_DEFAULTS.overhead_s})",
    )
    add("--speed", type=float, default=_DEFAULTS.speed, help="multiplies every delay; 0 = no delay at all")
    add("--block-size", type=int, default=_DEFAULTS.block_size)
    add("--no-cache-config-info", action="store_true",
        help="publish no vllm:cache_config_info (an engine whose KV capacity the gateway cannot read)")  # fmt: skip
    add("--no-cached-tokens", action="store_true",
        help="omit usage.prompt_tokens_details.cached_tokens from answers (the hit counter stays)")  # fmt: skip
    add("--bytes-per-token", type=int, default=_DEFAULTS.bytes_per_token)
    add("--max-model-len", type=int, default=_DEFAULTS.max_model_len)
    add("--default-max-tokens", type=int, default=_DEFAULTS.default_max_tokens)
    add(
        "--max-recorded-requests",
        type=int,
        default=_DEFAULTS.max_recorded_requests,
        help="bodies, traces and generations kept for /sim/requests, /sim/traces, /sim/generations",
    )
    add(
        "--embedding-model",
        choices=("minilm",),
        default=None,
        help="answer /v1/embeddings with all-MiniLM-L6-v2 (needs the embed extra) instead of hashes",
    )
    add(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="event loop: uvloop when installed (auto), or plain asyncio",
    )


def config_from_args(args: argparse.Namespace) -> SimConfig:
    """One replica's SimConfig from parsed arguments (every replica gets the same).

    A knob of the other mode is an error (``ValueError``), not silently ignored."""
    given = {k: v for k, v in vars(args).items() if v is not None}
    wrong = [k for k in (_SIMPLE_ONLY if args.mode == "engine" else _ENGINE_ONLY) if k in given]
    if wrong:
        flags = ", ".join("--" + k.replace("_", "-") for k in wrong)
        raise ValueError(f"{flags} {'is' if len(wrong) == 1 else 'are'} not used in mode {args.mode!r}")
    extra: dict[str, object] = {}
    if args.mode == "engine":
        costs = {
            k: given[k]
            for k in ("step_overhead_s", "decode_s_per_seq", "decode_attn_s_per_ctx_token",
                      "prefill_attn_s_per_pair", "prefill_s_per_token")
            if k in given
        }  # fmt: skip
        scaled = EngineCosts(**costs).scaled(given.get("token_scale", 1.0))
        extra["costs"] = scaled
        for k in (
            "max_num_batched_tokens",
            "long_prefill_token_threshold",
            "stream_interval",
            "scheduling_policy",
        ):
            if k in given:
                extra[k] = given[k]
    else:
        for k in (*_SIMPLE_ONLY, "prefill_s_per_token"):
            if k in given:
                extra[k] = given[k]
    return SimConfig(
        models=tuple(args.model),
        mode=args.mode,
        kv_capacity_blocks=args.kv_capacity_blocks,
        max_num_seqs=args.max_num_seqs,
        speed=args.speed,
        block_size=args.block_size,
        publish_cache_config=not args.no_cache_config_info,
        report_cached_tokens=not args.no_cached_tokens,
        bytes_per_token=args.bytes_per_token,
        max_model_len=args.max_model_len,
        default_max_tokens=args.default_max_tokens,
        embedding_model=args.embedding_model,
        max_recorded_requests=args.max_recorded_requests,
        **extra,  # type: ignore[arg-type]
    )


async def _serve(args: argparse.Namespace) -> int:
    configs = [config_from_args(args) for _ in range(args.replicas)]
    fleet = await start_replicas(configs, host=args.host, base_port=args.base_port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        for i, url in enumerate(fleet.urls):
            print(f"sim replica {i}: {url} models={','.join(configs[i].models)}", flush=True)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await fleet.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the replicas until SIGINT/SIGTERM; returns the process exit code."""
    if args.replicas < 1:
        print("--replicas must be >= 1", file=sys.stderr)
        return 2
    try:
        config_from_args(args)
    except ValueError as exc:
        print(f"invalid simulator settings: {exc}", file=sys.stderr)
        return 2
    loop_factory = None
    if args.loop in ("auto", "uvloop"):
        try:
            import uvloop

            loop_factory = uvloop.new_event_loop
        except ImportError:
            if args.loop == "uvloop":
                print("uvloop is not installed", file=sys.stderr)
                return 2
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(_serve(args))
    except OSError as exc:
        print(f"cannot start the simulator: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None, prog: str = "python -m sim") -> int:
    parser = argparse.ArgumentParser(prog=prog, description="Simulated vLLM replicas.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
