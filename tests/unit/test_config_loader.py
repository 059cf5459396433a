"""The policy loader: examples validate, errors name the file, the path and what was expected."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from config import PolicyError, load_policy, parse_policy
from config.loader import EXAMPLES_DIR
from gateway.cli import main as cli_main
from tests.support.cli import Ran, run_cli
from tests.support.ports import free_port

EXAMPLES = sorted(EXAMPLES_DIR.glob("*.yaml"))
# What an operator exports before using the examples (no example carries a credential of its own).
# PREFIX_GATEWAY_SECRET: the one server secret of every pod (vllm-fleet shares Redis between pods).
EXAMPLE_ENV = {
    "TEAM_SEARCH_KEY_SHA256": "a" * 64,
    "TEAM_ADS_KEY_SHA256": "b" * 64,
    "PREFIX_GATEWAY_SECRET": "one-secret-for-every-pod",
}

MINIMAL = """
models:
  - name: m
    replicas:
      - url: http://127.0.0.1:9100
"""


def test_there_are_examples_for_local_vllm_and_sglang() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {"local", "vllm-fleet", "sglang-fleet"} <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_validates(path: Path) -> None:
    policy = load_policy(path, env=EXAMPLE_ENV)
    assert policy.models, path
    for pool in policy.models:
        assert pool.replicas


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_no_example_carries_a_usable_default_credential(path: Path) -> None:
    """With none of its variables set, an example either refuses to load or lets no key in: a
    ``${VAR:-digest}`` default would make a guessable key (the digest of "test") work."""
    try:
        policy = load_policy(path, env={})
    except PolicyError as err:
        assert all("is not set" in message for _, message in err.problems), err.render()
        return
    assert not [d for t in policy.tenancy.tenants for d in t.api_key_sha256], path


def _check_config(path: Path, env: dict[str, str] | None = None) -> Ran:
    """``prefix-gateway check-config PATH`` without the examples' variables unless ``env`` gives them
    (in this process: the boundary is ``test_check_config_cli``'s)."""
    return run_cli("check-config", str(path), env=env, unset=EXAMPLE_ENV)


def test_check_config_on_the_examples_warns_about_anonymous_access_off_loopback() -> None:
    results = {p.stem: _check_config(p, EXAMPLE_ENV) for p in EXAMPLES}
    assert all(r.returncode == 0 for r in results.values()), {k: r.stderr for k, r in results.items()}
    assert "warning: tenancy.allow_anonymous" in results["sglang-fleet"].stderr  # 0.0.0.0, anonymous
    assert "0.0.0.0:8080" in results["sglang-fleet"].stderr
    assert "warning" not in results["local"].stderr  # anonymous, but on 127.0.0.1
    assert "warning" not in results["vllm-fleet"].stderr  # 0.0.0.0, but keys only
    unset = _check_config(EXAMPLES_DIR / "vllm-fleet.yaml")  # the digests not exported: no default key
    assert unset.returncode == 1 and "TEAM_SEARCH_KEY_SHA256 is not set" in unset.stderr


def test_check_config_warns_and_serve_refuses_pods_sharing_redis_without_a_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pods sharing Redis hash prompts with their secret: without one each would draw its own and the
    shared index and response cache would never match. check-config warns; serve (and ``--workers``,
    before any worker starts) refuses with the variable's name, never a traceback."""
    path = tmp_path / "p.yaml"
    redis_url = "redis://127.0.0.1:1/0"  # never reached: the check comes first
    path.write_text(MINIMAL + f"redis: {{url: '{redis_url}'}}\nshared_index: {{enabled: true}}\n")
    result = _check_config(path)
    assert result.returncode == 0, result.stderr
    assert "warning: tenancy.secret_env: PREFIX_GATEWAY_SECRET is not set" in result.stderr
    assert "the response cache and the shared prefix index" in result.stderr
    assert "warning" not in _check_config(path, {"PREFIX_GATEWAY_SECRET": "s3cret"}).stderr

    # serve in this process: a refusal comes before anything starts, and a real process was a gateway
    # start's imports (1.1 s of CPU), 38 s each on a two-core machine at load 19, against the 60 s its
    # subprocess had (the flake). A serve that went on to start fails here instead of serving; the
    # process boundary of a refusing serve is test_metrics_listener's (its exit status and stderr).
    def started(*_: object, **__: object) -> int:
        raise AssertionError("serve went on to start a gateway")

    monkeypatch.setattr(cli_main, "run_async", started)
    monkeypatch.setattr(cli_main, "supervise", started)  # --workers: no worker may start
    for workers in ("1", "2"):
        served = run_cli(
            "serve",
            "--config",
            str(path),
            "--port",
            str(free_port()),
            "--workers",
            workers,
            unset=EXAMPLE_ENV,
        )
        assert served.returncode == 1, (workers, served.stderr)
        assert "error: tenancy.secret_env: PREFIX_GATEWAY_SECRET is not set" in served.stderr
        assert "Traceback" not in served.stderr and "workers started" not in served.stderr
    # Without Redis nothing is shared between pods: no warning (--workers draws one for its workers).
    path.write_text(MINIMAL)
    assert "warning" not in _check_config(path).stderr


def test_check_config_warns_when_the_metrics_listener_is_off_loopback_without_a_token(tmp_path: Path) -> None:
    """Issue 31, item 5: the listener publishes per-tenant spend. It binds loopback whatever
    server.host is; an operator who moves it off loopback without a token is told so."""
    assert parse_policy(MINIMAL + "server: {host: 0.0.0.0}\n").server.metrics_host == "127.0.0.1"
    path = tmp_path / "p.yaml"
    path.write_text(MINIMAL + "server: {host: 0.0.0.0}\n")
    assert "server.metrics_host" not in _check_config(path).stderr  # API everywhere, metrics on loopback
    path.write_text(MINIMAL + "server: {metrics_host: 0.0.0.0}\n")
    result = _check_config(path)
    assert result.returncode == 0, result.stderr
    assert "warning: server.metrics_host: the /metrics listener on 0.0.0.0 has no token" in result.stderr
    assert "server.metrics_token_env" in result.stderr
    path.write_text(MINIMAL + "server: {metrics_host: 10.1.2.3, metrics_token_env: METRICS_TOKEN}\n")
    assert "warning" not in _check_config(path, {"METRICS_TOKEN": "t0ken"}).stderr
    unset = _check_config(path)  # the variable it names is not set: serve would refuse
    assert "warning: server.metrics_token_env: METRICS_TOKEN is not set" in unset.stderr
    assert "server.metrics_host" not in unset.stderr
    path.write_text(MINIMAL + "server: {metrics_host: 0.0.0.0, metrics_port: null}\n")  # no listener
    assert "warning" not in _check_config(path).stderr


def test_check_config_refuses_a_trusted_header_without_trusted_proxies(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(MINIMAL + "tenancy: {trusted_header: x-tenant-id}\n")
    result = _check_config(path)
    assert result.returncode == 1
    assert "tenancy" in result.stderr and "trusted_proxies" in result.stderr
    path.write_text(MINIMAL + "tenancy: {trusted_header: x-tenant-id, trusted_proxies: [10.0.0.0/8]}\n")
    assert _check_config(path).returncode == 0


def test_minimal_policy_gets_defaults() -> None:
    policy = parse_policy(MINIMAL)
    assert policy.server.port == 8080
    assert policy.limits.max_body_bytes == 16 * 1024 * 1024
    assert policy.models[0].routing.policy == "prefix_affinity"
    assert policy.models[0].replicas[0].replica_id == "127.0.0.1:9100"


def test_error_names_the_path_inside_the_file() -> None:
    text = """
models:
  - name: m
    replicas:
      - url: http://127.0.0.1:9100
      - url: http://127.0.0.1:9101
      - url: not-a-url
"""
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "fleet.yaml")
    message = str(info.value)
    assert "fleet.yaml" in message
    assert "models[0].replicas[2].url" in message
    assert "URL" in message or "url" in message.lower()


def test_unknown_field_is_rejected_with_its_path() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(MINIMAL + "serverr: {}\n")
    assert ("serverr", "unknown field (check the spelling; see docs/configuration.md)") in info.value.problems


def test_wrong_type_says_what_was_expected() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy(MINIMAL + "server: {port: high}\n")
    path, message = info.value.problems[0]
    assert path == "server.port"
    assert "integer" in message and "'high'" in message


def test_env_references_are_expanded_with_defaults() -> None:
    text = (
        MINIMAL.replace("http://127.0.0.1:9100", "${REPLICA_URL}")
        + "redis: {url: '${REDIS_URL:-redis://x:1/0}'}\n"
    )
    policy = parse_policy(text, env={"REPLICA_URL": "http://10.0.0.1:8000"})
    assert str(policy.models[0].replicas[0].url) == "http://10.0.0.1:8000/"
    assert policy.redis.url == "redis://x:1/0"


def test_missing_env_reference_is_an_error_at_its_path() -> None:
    text = MINIMAL.replace("http://127.0.0.1:9100", "${NOT_SET_ANYWHERE}")
    with pytest.raises(PolicyError) as info:
        parse_policy(text, env={})
    assert info.value.problems[0][0] == "models[0].replicas[0].url"
    assert "NOT_SET_ANYWHERE" in info.value.problems[0][1]


def test_invalid_yaml_names_line() -> None:
    with pytest.raises(PolicyError) as info:
        parse_policy("models: [\n  - a: b\n", "bad.yaml")
    assert "line" in info.value.problems[0][0]


def test_duplicates_are_rejected() -> None:
    text = MINIMAL + "  - name: m\n    replicas: [{url: 'http://127.0.0.1:1'}]\n"
    with pytest.raises(PolicyError, match="repeated"):
        parse_policy(text)


def test_tenant_key_digest_must_be_hex_sha256() -> None:
    text = MINIMAL + "tenancy: {tenants: [{id: t1, api_key_sha256: ['sk-plaintext-key']}]}\n"
    with pytest.raises(PolicyError) as info:
        parse_policy(text)
    assert info.value.problems[0][0] == "tenancy.tenants[0].api_key_sha256"


def test_check_config_cli(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(MINIMAL)
    bad = tmp_path / "bad.yaml"
    bad.write_text(MINIMAL.replace("http://127.0.0.1:9100", "nope"))
    ok = subprocess.run(
        [sys.executable, "-m", "gateway", "check-config", str(good)], capture_output=True, text=True
    )
    assert ok.returncode == 0, ok.stderr
    assert "OK" in ok.stdout
    ko = subprocess.run(
        [sys.executable, "-m", "gateway", "check-config", str(bad)], capture_output=True, text=True
    )
    assert ko.returncode == 1
    assert "bad.yaml" in ko.stderr and "models[0].replicas[0].url" in ko.stderr
    missing = subprocess.run(
        [sys.executable, "-m", "gateway", "check-config", str(tmp_path / "absent.yaml")],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and "cannot read file" in missing.stderr
