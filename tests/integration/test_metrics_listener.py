"""Issue 19, item 6: what anyone on the API port can read.

``/metrics`` names tenants, their spend and the replicas: it is served on its own listener
(``server.metrics_port``), and the API port answers it only with the admin token. ``/ready`` says ready
or not and nothing more. A real gateway process, real sockets.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from bench.procs import Proc, running, start_gateway, start_sim

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
