"""``prefix-gateway`` command line: serve, check-config, sim, demo, usage, advise, batch, keys, semantic."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from types import ModuleType

from config import PolicyError, load_policy
from config.checks import metrics_token_problem, policy_warnings, secret_problem
from config.policy import ModelPoolConfig, Policy
from config.routing import PolicyName
from gateway.cli.advise import add_advise_command
from gateway.cli.batch import add_batch_command
from gateway.cli.keys import add_keys_command
from gateway.cli.lifecycle import run_async, serve_until_signal
from gateway.cli.quickstart import DiscoveryError, policy_from_flags
from gateway.cli.semantic import add_semantic_command, semantic_problems
from gateway.cli.usage import add_usage_command
from gateway.observability.logs import configure_logging
from gateway.process.preflight import check_files
from gateway.process.workers import WORKER_ENV, parse_workers, supervise

log = logging.getLogger("prefix_gateway")

POLICY_NAMES = list(PolicyName.__args__)  # type: ignore[attr-defined]


def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate a policy and load every file it names; warnings go to stderr and do not fail it."""
    try:
        policy = load_policy(args.file)
        warnings = check_files(policy, args.file, create=False) + policy_warnings(policy)
        for check in (secret_problem, metrics_token_problem):
            if (problem := check(policy, os.environ)) is not None:
                warnings.append(problem)
        errors, semantic_warnings = semantic_problems(policy)
        if errors:
            raise PolicyError(args.file, errors)
        warnings += semantic_warnings
    except PolicyError as err:
        print(err.render(), file=sys.stderr)
        return 1
    for path, message in warnings:
        print(f"{args.file}: warning: {path}: {message}", file=sys.stderr)

    def fleet(m: ModelPoolConfig) -> str:
        found = f" + DNS {m.discovery.dns}:{m.discovery.port}" if m.discovery else ""
        return f"{len(m.replicas)} replicas{found}"

    models = ", ".join(f"{m.name} ({fleet(m)}, {m.routing.policy})" for m in policy.models)
    print(f"{args.file}: OK: {models}")
    return 0


def policy_for_serve(args: argparse.Namespace) -> Policy:
    if args.config and args.replica:
        raise SystemExit("give either --config or --replica, not both")
    if args.config:
        policy = load_policy(args.config)
    elif args.replica:
        try:
            policy = policy_from_flags(
                args.replica,
                model=args.model,
                routing_policy=args.policy or "prefix_affinity",
                host=args.host or "127.0.0.1",
                port=8080 if args.port is None else args.port,
                backend=args.backend,
            )
        except DiscoveryError as exc:
            raise SystemExit(f"error: {exc}") from None
    else:
        raise SystemExit("give --config FILE, or one --replica URL per replica (see --help)")
    return with_flags(policy, args)


def with_flags(policy: Policy, args: argparse.Namespace) -> Policy:
    """The policy with what the command line overrides (the flags win over the file)."""
    server: dict[str, object] = {}
    if args.host:
        server["host"] = args.host
    if args.port is not None:
        server["port"] = args.port
    if args.metrics_port is not None:
        server["metrics_port"] = None if args.metrics_port < 0 else args.metrics_port
    if args.log_level:
        server["log_level"] = args.log_level
    updates: dict[str, object] = {}
    if server:
        updates["server"] = policy.server.model_copy(update=server)
    if args.no_cache:
        updates["cache"] = policy.cache.model_copy(update={"enabled": False})
    if args.redis:
        updates["redis"] = policy.redis.model_copy(update={"url": args.redis})
    if args.admin_token_env:
        updates["admin"] = policy.admin.model_copy(update={"token_env": args.admin_token_env})
    if args.policy:
        updates["models"] = [
            m.model_copy(update={"routing": m.routing.model_copy(update={"policy": args.policy})})
            for m in policy.models
        ]
    return policy.model_copy(update=updates)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        policy = policy_for_serve(args)
        warnings = check_files(policy, args.config or "<command line>", create=True)
    except PolicyError as err:
        print(err.render(), file=sys.stderr)
        return 1
    for check in (secret_problem, metrics_token_problem):
        if (problem := check(policy, os.environ)) is not None:
            print(f"error: {problem[0]}: {problem[1]}", file=sys.stderr)  # before any worker starts
            return 1
    configure_logging(policy.server.log_level)
    for path, message in warnings + policy_warnings(policy):
        log.warning("policy warning", extra={"event": "policy_warning", "path": path, "warning": message})
    workers = args.workers or 1
    if workers > 1:
        if policy.server.port == 0:
            raise SystemExit("--workers needs a fixed --port (every worker listens on it)")
        return supervise(worker_argv(args._argv), workers, policy.tenancy.secret_env)
    worker = int(os.environ.get(WORKER_ENV, "0")) if args.reuse_port else 0
    return run_async(
        lambda: serve_until_signal(
            policy, policy_path=args.config, reuse_port=bool(args.reuse_port), worker=worker
        )
    )


def _workers_arg(value: str) -> int:
    try:
        return parse_workers(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count of at least 1 or 'auto', got {value!r}") from None


def worker_argv(argv: list[str]) -> list[str]:
    """The parent's ``serve`` arguments for one worker: without ``--workers``, with ``--reuse-port``."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == "--workers":
            skip = True
            continue
        if a.startswith("--workers="):
            continue
        out.append(a)
    return [*out, "--reuse-port"]


def _demo() -> ModuleType:
    """``gateway.cli.demo``, the commands that run the simulator (``sim``, ``demo``), loaded when one
    of them runs. Not at import: importing it loads the simulator (``sim/``, 17 modules, 0.10 to 0.17 s
    of the CLI's 1.9 to 2.7 s on this loaded 2-core machine, ``python -X importtime -c 'import
    gateway.cli.main'``), which ``serve`` and the other commands never run. A start-up cost, not a
    cycle: ``gateway.cli.demo`` imports nothing of this module."""
    return importlib.import_module("gateway.cli.demo")


def cmd_sim(args: argparse.Namespace) -> int:
    """``prefix-gateway sim ARGS`` is ``python -m sim ARGS``: the simulator's parser reads ``ARGS``."""
    return int(_demo().cmd_sim(args.forwarded))


def cmd_demo(args: argparse.Namespace) -> int:
    return int(_demo().cmd_demo(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prefix-gateway", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gateway")
    serve.add_argument("--config", help="YAML policy file")
    serve.add_argument(
        "--replica", action="append", metavar="URL", help="quick start: a replica base URL (repeat)"
    )
    serve.add_argument("--model", help="quick start: model name (default: ask the replicas' /v1/models)")
    serve.add_argument("--backend", choices=["vllm", "sglang", "openai"], default="vllm", help="quick start")
    serve.add_argument("--policy", choices=POLICY_NAMES, help="routing policy for every model")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.add_argument("--no-cache", action="store_true", help="turn the response cache off")
    serve.add_argument("--redis", metavar="URL", help="shared state in Redis (redis://host:port/db)")
    serve.add_argument("--admin-token-env", metavar="NAME", help="variable holding the admin token")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="JSON logs' level")
    serve.add_argument(
        "--metrics-port", type=int, help="port of the /metrics listener (server.metrics_port; -1: none)"
    )
    serve.add_argument(
        "--workers",
        type=_workers_arg,
        default=1,
        help="worker processes sharing the port (SO_REUSEPORT): a count, or auto (one per usable core)",
    )
    serve.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    serve.set_defaults(func=cmd_serve)

    check = sub.add_parser("check-config", help="validate a policy file and explain any error")
    check.add_argument("file")
    check.set_defaults(func=cmd_check_config)

    # Its options are the simulator's (``python -m sim --help``), parsed by the simulator's parser.
    sim = sub.add_parser("sim", help="run simulated vLLM-like replicas (python -m sim)", add_help=False)
    sim.set_defaults(func=cmd_sim, forwards=True)

    add_usage_command(sub)
    add_advise_command(sub)
    add_batch_command(sub)
    add_keys_command(sub)
    add_semantic_command(sub)

    demo = sub.add_parser("demo", help="gateway + 3 simulated replicas with the embedded local policy")
    demo.add_argument("--port", type=int, help="gateway port (default 8080)")
    demo.add_argument("--base-port", type=int, default=9100, help="first simulator port")
    demo.add_argument("--verbose", action="store_true", help="print the JSON logs")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if rest and not getattr(args, "forwards", False):
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.forwarded = rest
    args._argv = list(sys.argv[1:] if argv is None else argv)
    return int(args.func(args) or 0)
