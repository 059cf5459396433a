"""Schemathesis against docs/openapi.yaml and a real gateway process (offline: the schema is local).

Not collected by pytest (schemathesis is not a project dependency). Needs, e.g. in a side directory:

    pip install --target /tmp/st_pkgs --no-deps schemathesis harfile hypothesis-graphql jsonschema_rs \
        markdown-it-py mdurl pyrate-limiter rich
    PYTHONPATH=/tmp/st_pkgs python -m tests.fault.schemathesis_run [--max-examples 30]

Checks ``not_a_server_error`` on every operation except ``POST /admin/reload`` (random bodies there are
random policies). Exits with schemathesis' status.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

from bench.procs import running, start_gateway, start_sim

ROOT = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-examples", type=int, default=30)
    args = p.parse_args(argv)
    sim, urls = start_sim(1)
    with running(sim), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy.yaml"
        policy = {
            "server": {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "access_log": False},
            "billing": {"ledger": {"path": ":memory:"}},
            "models": [{"name": "sim-llama", "replicas": [{"url": urls[0]}]}],
        }
        path.write_text(yaml.safe_dump(policy))
        env = {"PREFIX_GATEWAY_ADMIN_TOKEN": "schemathesis", "PREFIX_GATEWAY_SECRET": "schemathesis"}
        gw = start_gateway(["--config", str(path)], env=env)
        with running(gw):
            cmd = [
                sys.executable, "-m", "schemathesis.cli", "run", str(ROOT / "docs" / "openapi.yaml"),
                "--url", gw.url, "--checks", "not_a_server_error", "--max-examples", str(args.max_examples),
                "-H", "Authorization: Bearer schemathesis", "--exclude-path", "/admin/reload",
            ]  # fmt: skip
            return subprocess.run(cmd, env=os.environ, timeout=600).returncode


if __name__ == "__main__":
    raise SystemExit(main())
