"""Issue 19, item 4: a policy uploaded to ``POST /admin/reload`` never expands the environment (except
the names the file policy allows), and no public endpoint echoes configuration values.

A real gateway process with a secret in its environment: an uploaded model named
``leak-${PREFIX_GATEWAY_SECRET}`` is refused, and neither ``/v1/models`` nor ``/ready`` ever shows it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from bench.procs import Proc, running, start_gateway, start_sim

SECRET = "s3cr3t-salt-value-0123456789"
ADMIN_TOKEN = "admin-token-for-upload-tests"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def policy(urls: list[str], *, names: tuple[str, ...] = ("sim-llama",), **sections: object) -> dict:
    raw: dict[str, object] = {
        "server": {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "access_log": False},
        "cache": {"enabled": False},
        "billing": {"ledger": {"path": ":memory:"}},
        "models": [{"name": n, "replicas": [{"url": u} for u in urls]} for n in names],
    }
    raw.update(sections)
    return raw


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[tuple[Proc, list[str]]]:
    sim, urls = start_sim(1, extra=["--speed", "0"])
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy(urls, admin={"upload_env": ["UPLOAD_OK_URL"]})))
    env = {
        "PREFIX_GATEWAY_SECRET": SECRET,
        "PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN,
        "UPLOAD_OK_URL": urls[0],
    }
    with running(sim):
        gw = start_gateway(["--config", str(path)], env=env)
        with running(gw):
            yield gw, urls


def public_text(c: httpx.Client, url: str) -> str:
    return c.get(url + "/v1/models").text + c.get(url + "/ready").text


def test_an_uploaded_policy_does_not_expand_the_environment(gateway: tuple[Proc, list[str]]) -> None:
    gw, urls = gateway
    with httpx.Client(timeout=10) as c:
        leak = yaml.safe_dump(policy(urls, names=("sim-llama", "leak-${PREFIX_GATEWAY_SECRET}")))
        r = c.post(gw.url + "/admin/reload", content=leak, headers=ADMIN)
        assert r.status_code == 422, r.text
        problems = r.json()["problems"]
        assert any("PREFIX_GATEWAY_SECRET" in p["message"] and "upload_env" in p["message"] for p in problems)
        assert SECRET not in r.text
        # A default does not help either: the name is not expanded, its default is what is used.
        fallback = yaml.safe_dump(policy(urls, names=("sim-llama", "m-${PREFIX_GATEWAY_SECRET:-none}")))
        r = c.post(gw.url + "/admin/reload", content=fallback, headers=ADMIN)
        assert r.status_code == 200, r.text
        assert SECRET not in public_text(c, gw.url)
        assert SECRET not in c.get(gw.url + "/admin/replicas", headers=ADMIN).text
        # A name the file policy allows is expanded.
        allowed = policy(urls)
        allowed["models"][0]["replicas"] = [{"url": "${UPLOAD_OK_URL}"}]  # type: ignore[index]
        r = c.post(gw.url + "/admin/reload", content=yaml.safe_dump(allowed), headers=ADMIN)
        assert r.status_code == 200, r.text
        body = {"model": "sim-llama", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        assert c.post(gw.url + "/v1/chat/completions", json=body).status_code == 200


def test_public_endpoints_list_only_the_file_policy_names(gateway: tuple[Proc, list[str]]) -> None:
    gw, urls = gateway
    with httpx.Client(timeout=10) as c:
        uploaded = yaml.safe_dump(policy(urls, names=("sim-llama", "uploaded-model")))
        assert c.post(gw.url + "/admin/reload", content=uploaded, headers=ADMIN).status_code == 200
        assert [m["id"] for m in c.get(gw.url + "/v1/models").json()["data"]] == ["sim-llama"]
        ready = c.get(gw.url + "/ready")
        assert ready.status_code == 200 and ready.json() == {"ready": True}
        assert "uploaded-model" not in public_text(c, gw.url)
        assert urls[0] not in public_text(c, gw.url)
