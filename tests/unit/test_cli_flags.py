"""``prefix-gateway serve`` quick-start flags: they override the file (or the flag-made policy)."""

from __future__ import annotations

from config.loader import example_path
from gateway.cli.main import build_parser, policy_for_serve


def parse(*argv: str):  # type: ignore[no-untyped-def]
    return policy_for_serve(build_parser().parse_args(["serve", *argv]))


def test_quick_start_flags_shape_the_policy() -> None:
    policy = parse(
        "--replica", "http://127.0.0.1:9001", "--replica", "http://127.0.0.1:9002", "--model", "m",
        "--no-cache", "--redis", "redis://127.0.0.1:6390/2", "--admin-token-env", "MY_ADMIN",
        "--log-level", "debug", "--policy", "least_load", "--port", "0",
    )  # fmt: skip
    assert [r.base_url for r in policy.models[0].replicas] == [
        "http://127.0.0.1:9001",
        "http://127.0.0.1:9002",
    ]
    assert policy.cache.enabled is False
    assert policy.redis.url == "redis://127.0.0.1:6390/2"
    assert policy.admin.token_env == "MY_ADMIN"
    assert policy.server.log_level == "debug" and policy.server.port == 0
    assert policy.models[0].routing.policy == "least_load"


def test_flags_override_a_file_and_leave_the_rest() -> None:
    plain = parse("--config", str(example_path("local")))
    flagged = parse("--config", str(example_path("local")), "--no-cache", "--log-level", "error")
    assert plain.cache.enabled is True and flagged.cache.enabled is False
    assert flagged.server.log_level == "error"
    assert flagged.redis == plain.redis and flagged.models == plain.models
