"""Issue 19, item 6: what anyone on the API port can read.

``/metrics`` names tenants, their spend and the replicas: it is served on its own listener
(``server.metrics_port``), and the API port answers it only with the admin token. ``/ready`` says ready
or not and nothing more. A real gateway process, real sockets.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest
import yaml

from bench.procs import START_TIMEOUT_S, Proc, running, start_gateway, start_sim
from tests.support.ports import free_port

ADMIN_TOKEN = "metrics-test-admin-token"
KEY = "sk-tenant-acme"


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    sim, urls = start_sim(1, extra=["--speed", "0"])
    path: Path = tmp_path_factory.mktemp("metrics") / "policy.yaml"
    policy = {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
        "billing": {"ledger": {"path": ":memory:"}, "default": {"input_per_1m": "1.0"}},
        "tenancy": {
            "allow_anonymous": False,
            "tenants": [{"id": "acme-corp", "api_key_sha256": [hashlib.sha256(KEY.encode()).hexdigest()]}],
        },
        "models": [{"name": "sim-llama", "replicas": [{"url": urls[0], "id": "gpu-node-7"}]}],
    }
    path.write_text(yaml.safe_dump(policy))
    with running(sim):
        gw = start_gateway(
            ["--config", str(path)],
            env={"PREFIX_GATEWAY_SECRET": "s", "PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN},
        )
        with running(gw):
            body = {"model": "sim-llama", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
            auth = {"Authorization": f"Bearer {KEY}"}
            r = httpx.post(gw.url + "/v1/chat/completions", json=body, headers=auth)
            assert r.status_code == 200, r.text
            yield gw


def test_the_api_port_answers_metrics_only_with_the_admin_token(gateway: Proc) -> None:
    anonymous = httpx.get(gateway.url + "/metrics")
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "missing_admin_token"
    assert "acme-corp" not in anonymous.text and "gpu-node-7" not in anonymous.text
    wrong = httpx.get(gateway.url + "/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 403
    admin = httpx.get(gateway.url + "/metrics", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    assert admin.status_code == 200 and "prefix_gateway_requests_total" in admin.text


def test_the_metrics_listener_serves_the_scraper_and_nothing_else(gateway: Proc) -> None:
    assert gateway.metrics_url is not None and gateway.metrics_url != gateway.url
    scraped = httpx.get(gateway.metrics_url + "/metrics")
    assert scraped.status_code == 200
    assert scraped.headers["content-type"].startswith("text/plain")
    assert 'tenant="acme-corp"' in scraped.text  # per-tenant spend, for the operator
    assert 'replica="gpu-node-7"' in scraped.text
    for path in ("/v1/models", "/ready", "/admin/replicas"):
        assert httpx.get(gateway.metrics_url + path).status_code == 404


def test_ready_names_nothing(gateway: Proc) -> None:
    r = httpx.get(gateway.url + "/ready")
    assert r.status_code == 200 and r.json() == {"ready": True}
    assert "gpu-node-7" not in r.text and "sim-llama" not in r.text


METRICS_TOKEN = "scrape-token-31"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """Issue 31, item 5: the API on every interface, the metrics listener behind a token, with hashed
    tenant labels."""
    sim, urls = start_sim(1, extra=["--speed", "0"])
    path: Path = tmp_path_factory.mktemp("guarded") / "policy.yaml"
    policy = {
        "server": {"access_log": False, "metrics_token_env": "METRICS_TOKEN"},
        "observability": {"tenant_labels": "hashed"},
        "billing": {"ledger": {"path": ":memory:"}, "default": {"input_per_1m": "1.0"}},
        "tenancy": {
            "allow_anonymous": False,
            "tenants": [{"id": "acme-corp", "api_key_sha256": [hashlib.sha256(KEY.encode()).hexdigest()]}],
        },
        "models": [{"name": "sim-llama", "replicas": [{"url": urls[0]}]}],
    }
    path.write_text(yaml.safe_dump(policy))
    with running(sim):
        gw = start_gateway(
            ["--config", str(path), "--host", "0.0.0.0"],
            env={"PREFIX_GATEWAY_SECRET": "s", "METRICS_TOKEN": METRICS_TOKEN},
        )
        with running(gw):
            body = {"model": "sim-llama", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}
            r = httpx.post(
                gw.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}
            )
            assert r.status_code == 200, r.text
            yield gw


def listening(pid: int, port: int) -> set[str]:
    """The addresses process ``pid`` listens on at ``port``."""
    conns = psutil.Process(pid).net_connections(kind="inet")
    return {c.laddr.ip for c in conns if c.status == psutil.CONN_LISTEN and c.laddr.port == port}


def test_the_metrics_listener_binds_loopback_when_the_api_listens_everywhere(guarded: Proc) -> None:
    assert guarded.metrics_url is not None
    api_port = int(guarded.url.rsplit(":", 1)[1])
    metrics_port = int(guarded.metrics_url.rsplit(":", 1)[1])
    assert listening(guarded.popen.pid, api_port) == {"0.0.0.0"}
    assert listening(guarded.popen.pid, metrics_port) == {"127.0.0.1"}


def test_the_metrics_listener_wants_its_bearer_token(guarded: Proc) -> None:
    assert guarded.metrics_url is not None
    url = guarded.metrics_url + "/metrics"
    anonymous = httpx.get(url)
    assert anonymous.status_code == 401 and anonymous.headers["www-authenticate"].startswith("Bearer")
    assert "prefix_gateway" not in anonymous.text
    assert httpx.get(url, headers={"Authorization": "Bearer nope"}).status_code == 401
    assert httpx.get(url, headers={"Authorization": METRICS_TOKEN}).status_code == 401  # no scheme
    scraped = httpx.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert scraped.status_code == 200 and "prefix_gateway_billed_cost_micros_total" in scraped.text


def test_hashed_tenant_labels_never_name_the_tenant(guarded: Proc) -> None:
    assert guarded.metrics_url is not None
    scraped = httpx.get(
        guarded.metrics_url + "/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}
    )
    assert "acme-corp" not in scraped.text
    labels = set(re.findall(r'tenant="([^"]*)"', scraped.text))
    assert labels and all(re.fullmatch(r"t-[0-9a-f]{12}|other", label) for label in labels), labels


def test_serve_refuses_a_metrics_token_variable_that_is_not_set(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    policy = {
        "server": {"metrics_token_env": "METRICS_TOKEN_UNSET_31"},
        "models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:9"}]}],
    }
    path.write_text(yaml.safe_dump(policy))
    env = {k: v for k, v in os.environ.items() if k != "METRICS_TOKEN_UNSET_31"}
    served = subprocess.run(
        [
            sys.executable,
            "-m",
            "gateway",
            "serve",
            "--config",
            str(path),
            "--port",
            str(free_port()),
            "--metrics-port",
            str(free_port()),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=START_TIMEOUT_S,  # a gateway start's imports: 38 s on a loaded machine
    )
    assert served.returncode != 0
    assert "error: server.metrics_token_env: METRICS_TOKEN_UNSET_31 is not set" in served.stderr
    assert "Traceback" not in served.stderr
