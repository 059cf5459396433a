"""``prefix-gateway`` command line: serve, check-config, sim, demo, usage, advise, batch, keys, semantic."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import secrets
import shlex
import shutil
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson

from config import PolicyError, load_policy, parse_policy
from config.checks import metrics_token_problem, policy_warnings, secret_problem
from config.loader import example_path
from config.policy import ModelPoolConfig, Policy
from config.routing import PolicyName
from gateway.cli.advise import add_advise_command
from gateway.cli.batch import add_batch_command
from gateway.cli.keys import add_keys_command
from gateway.cli.quickstart import DiscoveryError, policy_from_flags
from gateway.cli.semantic import add_semantic_command, semantic_problems
from gateway.cli.usage import add_usage_command
from gateway.observability.logs import ACCESS_LOG, configure_logging
from gateway.process.preflight import check_files
from gateway.process.process import PROCESS
from gateway.process.reload import reload
from gateway.process.workers import WORKER_ENV, parse_workers, supervise
from gateway.server.app import serve
from sim import SimConfig, start_replicas
from sim import cli as sim_cli

log = logging.getLogger("prefix_gateway")

POLICY_NAMES = list(PolicyName.__args__)  # type: ignore[attr-defined]


def run_async(main: Callable[[], Awaitable[int]]) -> int:
    """Run on uvloop (a dependency everywhere but Windows; it is faster), else on asyncio's own loop."""
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is optional
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


async def wait_for_signal(on_hup: Callable[[], None] | None = None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if on_hup is not None:
        loop.add_signal_handler(signal.SIGHUP, on_hup)
    await stop.wait()


async def serve_until_signal(
    policy: Policy,
    on_started: Callable[[str, str | None], None] | None = None,
    *,
    policy_path: str | None = None,
    reuse_port: bool = False,
    worker: int = 0,
) -> int:
    """Serve until SIGTERM/SIGINT, then drain: stop accepting at once (and /ready answers 503), let
    requests in flight finish within ``server.drain_timeout_s``, run the shutdown hooks, exit 0.
    SIGHUP reloads the policy file."""
    runner, url = await serve(policy, policy_path=policy_path, reuse_port=reuse_port, worker=worker)
    process = runner.app[PROCESS]
    # What start-up built (modules, the policy, the simulator's and tokenizer's tables) lives as long as
    # the process: out of the collector's generations, so an old-generation collection under load walks
    # only what requests allocate (a pause every request in flight waits out).
    gc.freeze()
    log.info("gateway listening", extra={"event": "listening", "url": url, "metrics": process.metrics_url})
    if on_started:
        on_started(url, process.metrics_url)
    reloads: set[asyncio.Task[object]] = set()

    def on_hup() -> None:
        task = asyncio.ensure_future(reload(process, source="sighup"))
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    await wait_for_signal(on_hup)
    process.draining = True
    log.info("draining", extra={"event": "draining", "timeout_s": policy.server.drain_timeout_s})
    await runner.cleanup()
    log.info("stopped", extra={"event": "stopped"})
    ACCESS_LOG.flush()
    return 0


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


def cmd_sim(args: argparse.Namespace) -> int:
    return sim_cli.run(args)


DEMO_BATCH_LINES = 3  # the example batch file the demo writes


def demo_files(workdir: Path, model: str, token_env: str) -> tuple[Path, Path | None]:
    """The demo's example batch file, and the file holding the admin token the demo drew (None when
    the operator set ``token_env``: theirs is used). The token is written to a 0600 file, never
    printed: the printed command reads it."""
    lines = [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": model,
                "max_tokens": 8,
                "messages": [{"role": "user", "content": f"Hello {i}"}],
            },
        }
        for i in range(DEMO_BATCH_LINES)
    ]
    requests = workdir / "requests.jsonl"
    requests.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    if os.environ.get(token_env):
        return requests, None
    token_file = workdir / "admin-token"
    token = secrets.token_urlsafe(32)
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.environ[token_env] = token  # this process's gateway reads it; the printed command reads the file
    return requests, token_file


def demo_commands(
    url: str, ledger: Path, requests: Path, token_env: str, token_file: Path | None
) -> list[str]:
    """One command for each feature the demo turns on, exactly as a shell runs them."""
    token = f"{token_env}=$(cat {shlex.quote(str(token_file))}) " if token_file is not None else ""
    local = shlex.quote(str(example_path("local")))
    return [
        f"prefix-gateway usage --ledger {shlex.quote(str(ledger))}",
        f"prefix-gateway batch submit {shlex.quote(str(requests))} --url {url} --wait --json",
        f"prefix-gateway batch list --url {url}",
        f"{token}prefix-gateway advise --config {local} --url {url}",
    ]


def cmd_demo(args: argparse.Namespace) -> int:
    """Three simulated replicas and the gateway in one process, with the embedded local policy (its
    relative paths, the ledger's, are relative to the working directory: it is not the user's file);
    the metrics listener on any free port; the Batch API (its files and job state under a temporary
    directory of its own, removed at exit) and the layout advisor (every request observed) on; an admin
    token drawn for the run when none is set (``advise`` needs one). It prints one command for each."""
    path = example_path("local")
    policy = parse_policy(path.read_text(encoding="utf-8"), str(path))
    server = {"access_log": args.verbose, "metrics_port": 0} | (
        {"port": args.port} if args.port is not None else {}
    )
    workdir = Path(tempfile.mkdtemp(prefix="prefix-gateway-demo-"))
    batch = {"enabled": True, "dir": str(workdir / "files"), "sqlite_path": str(workdir / "batch.db")}
    policy = policy.model_copy(
        update={
            "server": policy.server.model_copy(update=server),
            "batch": policy.batch.model_copy(update=batch),
            "advisor": policy.advisor.model_copy(update={"enabled": True, "sample_rate": 1.0}),
        }
    )
    ledger = Path(policy.billing.ledger.path).absolute()
    configure_logging("warning" if not args.verbose else "info")

    async def main() -> int:
        pool = policy.models[0]
        fleet = await start_replicas([SimConfig() for _ in pool.replicas], base_port=args.base_port)
        replicas = [
            r.model_copy(update={"url": url}) for r, url in zip(pool.replicas, fleet.urls, strict=True)
        ]
        demo_policy = policy.model_copy(update={"models": [pool.model_copy(update={"replicas": replicas})]})
        requests, token_file = demo_files(workdir, pool.name, policy.admin.token_env)
        try:

            def started(url: str, metrics_url: str | None) -> None:
                model = policy.models[0].name
                print(f"prefix-gateway listening on {url} in front of {len(fleet.urls)} simulated replicas:")
                for u in fleet.urls:
                    print(f"  replica {u}")
                print("try:")
                print(
                    f"  curl -s {url}/v1/chat/completions -H 'Content-Type: application/json' "
                    f'-d \'{{"model": "{model}", "temperature": 0, '
                    f'"messages": [{{"role": "user", "content": "Hello"}}]}}\''
                )
                print(
                    "  (temperature 0: the response cache answers the same request again, x-cache: hit;"
                    " sampled requests are never cached)"
                )
                usage, submit, listing, advise = demo_commands(
                    url, ledger, requests, policy.admin.token_env, token_file
                )
                print(f"usage and spend, from the billing ledger:\n  {usage}")
                print(f"a batch of {DEMO_BATCH_LINES} requests (the Batch API), then the batches:")
                print(f"  {submit}\n  {listing}")
                print(f"what each tenant's prompt layout costs it (the advisor):\n  {advise}")
                print(f"metrics: {metrics_url}/metrics   stop: Ctrl-C", flush=True)

            return await serve_until_signal(demo_policy, started)
        finally:
            with contextlib.suppress(Exception):
                await fleet.stop()

    try:
        return run_async(main)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


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

    sim = sub.add_parser("sim", help="run simulated vLLM-like replicas")
    sim_cli.add_arguments(sim)
    sim.set_defaults(func=cmd_sim)

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
    args = build_parser().parse_args(argv)
    args._argv = list(sys.argv[1:] if argv is None else argv)
    return int(args.func(args) or 0)
