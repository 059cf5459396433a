"""The policy the chart writes into its ConfigMap passes `prefix-gateway check-config`."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helm.chart import FULLNAME, ROOT, VALUE_SETS, env_of, gateway_container, only, policy_text, render
from tests.support.cli import Ran, run_cli

# What the pod's environment supplies to ${...} references of the example policies.
POD_ENV = {
    "PREFIX_GATEWAY_SECRET": "x" * 32,
    "PREFIX_GATEWAY_ADMIN_TOKEN": "y" * 32,
    "TEAM_SEARCH_KEY_SHA256": "a" * 64,
    "TEAM_ADS_KEY_SHA256": "b" * 64,
    "POD_IP": "10.0.0.7",  # the downward API's status.podIP
    "PREFIX_GATEWAY_METRICS_TOKEN": "z" * 32,
}


def check_config(path: Path, extra_env: dict[str, str]) -> Ran:
    """The gateway's own validator, as an operator runs it (`prefix-gateway check-config FILE`, with
    the pod's environment), in this process (tests/support/cli.py)."""
    return run_cli("check-config", str(path), env=POD_ENV | extra_env, unset=("REDIS_URL",), cwd=ROOT)


def redis_env(label: str) -> dict[str, str]:
    """REDIS_URL as the rendered Deployment would set it (a plain value, or a URL from a Secret)."""
    env = env_of(gateway_container(render(VALUE_SETS[label])))
    if "REDIS_URL" not in env:
        return {}
    return {"REDIS_URL": env["REDIS_URL"].get("value", "redis://redis.example.internal:6379/0")}


@pytest.mark.parametrize("label", sorted(VALUE_SETS))
def test_rendered_policy_passes_check_config(label: str, tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text(render(VALUE_SETS[label])))
    result = check_config(path, redis_env(label))
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_check_config_rejects_a_broken_rendered_policy(tmp_path: Path) -> None:
    """The check has teeth: a policy typo that the chart's schema lets through is caught here."""
    values = {"policy": {"models": [{"name": "m", "replicas": [{"url": "http://vllm:8000"}], "routin": {}}]}}
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text(render(values)))
    result = check_config(path, {})
    assert result.returncode != 0
    assert "routin" in result.stderr


def test_policy_is_served_on_all_interfaces_on_the_container_port() -> None:
    manifests = render({"policy": {"server": {"host": None, "port": 9000}}})
    policy = yaml.safe_load(policy_text(manifests))
    assert policy["server"]["host"] == "0.0.0.0"
    assert policy["server"]["port"] == 9000
    assert policy["server"]["metrics_port"] == 29000  # /metrics on its own listener (issue 19, item 6)
    container = gateway_container(manifests)
    assert container["ports"] == [
        {"name": "http", "containerPort": 9000, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 29000, "protocol": "TCP"},
    ]
    moved = gateway_container(render({"policy": {"server": {"metrics_port": 9100}}}))
    assert {"name": "metrics", "containerPort": 9100, "protocol": "TCP"} in moved["ports"]


def test_the_metrics_listener_binds_the_pod_address_behind_an_optional_token() -> None:
    """Issue 31, item 5: the policy's metrics listener defaults to loopback; in a pod the scraper must
    reach it, so the chart binds the pod's address (never 0.0.0.0), and with metrics.token the listener
    wants the Secret's token, which the ServiceMonitor sends."""
    manifests = render({"metrics": {"serviceMonitor": {"enabled": True}}})
    policy = yaml.safe_load(policy_text(manifests))
    assert policy["server"]["metrics_host"] == "${POD_IP}"
    assert "metrics_token_env" not in policy["server"]
    env = env_of(gateway_container(manifests))
    assert env["POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "PREFIX_GATEWAY_METRICS_TOKEN" not in env
    assert "authorization" not in only(manifests, "ServiceMonitor")["spec"]["endpoints"][0]

    guarded = render(
        {"metrics": {"serviceMonitor": {"enabled": True}, "token": {"existingSecret": "scrape"}}}
    )
    policy = yaml.safe_load(policy_text(guarded))
    assert policy["server"]["metrics_token_env"] == "PREFIX_GATEWAY_METRICS_TOKEN"
    env = env_of(gateway_container(guarded))
    ref = {"secretKeyRef": {"name": "scrape", "key": "metrics-token"}}
    assert env["PREFIX_GATEWAY_METRICS_TOKEN"]["valueFrom"] == ref
    endpoint = only(guarded, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["authorization"] == {"type": "Bearer", "credentials": ref["secretKeyRef"]}

    moved = yaml.safe_load(policy_text(render({"policy": {"server": {"metrics_host": "127.0.0.1"}}})))
    assert moved["server"]["metrics_host"] == "127.0.0.1"  # the operator's own choice stands


def test_check_config_warns_about_the_rendered_metrics_listener_only_without_a_token(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text(render()))
    result = check_config(path, {})
    assert result.returncode == 0, result.stderr
    assert "warning: server.metrics_host: the /metrics listener on 10.0.0.7 has no token" in result.stderr
    path.write_text(policy_text(render({"metrics": {"token": {"existingSecret": "scrape"}}})))
    assert "server.metrics_host" not in check_config(path, {}).stderr


def test_redis_url_is_wired_only_when_a_redis_is_configured() -> None:
    plain = yaml.safe_load(policy_text(render()))
    assert "redis" not in plain
    assert "REDIS_URL" not in env_of(gateway_container(render()))

    manifests = render({"redis": {"enabled": True}})
    assert yaml.safe_load(policy_text(manifests))["redis"]["url"] == "${REDIS_URL}"
    assert env_of(gateway_container(manifests))["REDIS_URL"]["value"] == f"redis://{FULLNAME}-redis:6379/0"

    manifests = render({"redis": {"external": {"existingSecret": "r", "existingSecretKey": "url"}}})
    ref = env_of(gateway_container(manifests))["REDIS_URL"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "r", "key": "url"}

    # an explicit policy redis.url is left alone
    manifests = render({"redis": {"enabled": True}, "policy": {"redis": {"url": "redis://other:6379/1"}}})
    assert yaml.safe_load(policy_text(manifests))["redis"]["url"] == "redis://other:6379/1"


def test_the_sqlite_ledger_lands_in_the_writable_ledger_volume() -> None:
    """A relative ledger path resolves against the policy's directory (a read-only ConfigMap mount):
    the chart names the ledger volume's file unless the policy names a path or a Redis ledger."""
    policy = yaml.safe_load(policy_text(render({"storage": {"ledgerPath": "/data/ledger"}})))
    assert policy["billing"]["ledger"]["path"] == "/data/ledger/ledger.db"
    mounts = {
        m["mountPath"]
        for m in gateway_container(render({"storage": {"ledgerPath": "/data/ledger"}}))["volumeMounts"]
    }
    assert "/data/ledger" in mounts
    explicit = {"policy": {"billing": {"ledger": {"path": "/elsewhere/l.db"}}}}
    assert yaml.safe_load(policy_text(render(explicit)))["billing"]["ledger"]["path"] == "/elsewhere/l.db"
    shared = {"policy": {"billing": {"ledger": {"kind": "redis"}}}, "redis": {"enabled": True}}
    assert "path" not in yaml.safe_load(policy_text(render(shared)))["billing"]["ledger"]
