"""The commands that run the simulator (``sim/``): ``prefix-gateway sim`` (the simulator's own command
line, ``python -m sim``) and ``prefix-gateway demo`` (three simulated replicas and the gateway in one
process). ``gateway.cli.main`` imports this module only when one of them runs: ``serve`` and the other
commands never load the simulator."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shlex
import shutil
import tempfile
from pathlib import Path

import orjson

from config import parse_policy
from config.loader import example_path
from gateway.cli.lifecycle import run_async, serve_until_signal
from gateway.observability.logs import configure_logging
from sim import SimConfig, start_replicas
from sim import cli as sim_cli


def cmd_sim(argv: list[str]) -> int:
    """The simulator's command line on ``argv`` (``python -m sim``), as ``prefix-gateway sim``."""
    return sim_cli.main(argv, prog="prefix-gateway sim")


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
