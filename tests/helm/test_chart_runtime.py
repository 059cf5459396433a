"""The chart's contract with a running gateway: the policy it renders starts a real gateway whose probe
paths answer as the Deployment expects, and SIGTERM ends it well within the pod's grace period.

Real processes and sockets on 127.0.0.1: a simulated vLLM replica (`prefix-gateway sim`) and the gateway
started exactly as the container's CMD does (`serve --config <rendered policy>`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from bench.procs import START_TIMEOUT_S
from tests.helm.chart import ROOT, gateway_container, only, policy_text, render
from tests.support.ports import free_port

MODEL = "chart-model"


def wait_for(url: str, status: int = 200, timeout_s: float = START_TIMEOUT_S) -> httpx.Response:
    deadline = time.monotonic() + timeout_s
    last: object = None
    with httpx.Client(timeout=2.0) as client:  # one client: each builds an SSL context (bench.procs)
        while time.monotonic() < deadline:
            try:
                r = client.get(url)
                if r.status_code == status:
                    return r
                last = r.status_code
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer {status} within {timeout_s}s (last: {last!r})")


def start(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:  # a file, not a pipe: a full pipe would block the server
        return subprocess.Popen(
            [sys.executable, "-m", "gateway", *args],
            cwd=ROOT,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    args = ["sim", "--replicas", "1", "--base-port", str(port), "--speed", "0", "--model", MODEL]
    proc = start(args, tmp_path / "sim.log")
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(f"{url}/v1/models")
        yield url
    finally:
        stop(proc)


def test_rendered_policy_runs_a_gateway_that_honours_the_pod_contract(replica: str, tmp_path: Path) -> None:
    port = free_port()
    values = {
        "policy": {
            "server": {"port": port, "metrics_port": free_port(), "drain_timeout_s": 5},
            "models": [{"name": MODEL, "backend": "vllm", "replicas": [{"url": replica}]}],
        },
        "secret": {"serverSecret": "x" * 32, "adminToken": "y" * 32},
        "storage": {"ledgerPath": str(tmp_path / "ledger")},  # the pod's ledger volume
    }
    manifests = render(values)
    container = gateway_container(manifests)
    policy = tmp_path / "policy.yaml"
    rendered = yaml.safe_load(policy_text(manifests))
    assert rendered["server"]["host"] == "0.0.0.0"
    rendered["server"]["host"] = "127.0.0.1"  # the one change: tests listen on loopback only
    policy.write_text(yaml.safe_dump(rendered))
    # the pod's address, from the downward API: here the test's loopback
    env = {"PREFIX_GATEWAY_SECRET": "x" * 32, "PREFIX_GATEWAY_ADMIN_TOKEN": "y" * 32, "POD_IP": "127.0.0.1"}
    assert {e["name"] for e in container["env"]} >= set(env)

    # the container's CMD, with the rendered policy in place of the mounted ConfigMap
    args = [a if a != "/etc/prefix-gateway/policy.yaml" else str(policy) for a in container["args"]]
    log = tmp_path / "gateway.log"
    proc = start(args, log, env)
    try:
        base = f"http://127.0.0.1:{container['ports'][0]['containerPort']}"
        wait_for(base + container["startupProbe"]["httpGet"]["path"])
        wait_for(base + container["livenessProbe"]["httpGet"]["path"])
        wait_for(base + container["readinessProbe"]["httpGet"]["path"])

        r = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4},
            timeout=10.0,
        )
        assert r.status_code == 200, r.text
        # /metrics: on the container's metrics port for the scraper; the API port wants the admin token
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        metrics = httpx.get(f"http://127.0.0.1:{ports['metrics']}/metrics", timeout=5.0).text
        assert "prefix_gateway_requests_total" in metrics
        assert httpx.get(f"{base}/metrics", timeout=5.0).status_code == 401

        # SIGTERM (after the preStop sleep) must end the process within what is left of the grace period
        spec = only(manifests, "Deployment")["spec"]["template"]["spec"]
        sleep_s = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
        budget = spec["terminationGracePeriodSeconds"] - sleep_s
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=budget)
        assert code == 0, log.read_text(errors="replace")[-2000:]
        assert time.monotonic() - t0 < budget
    finally:
        stop(proc)
