"""``prefix-gateway serve`` quick-start flags: they override the file (or the flag-made policy)."""

from __future__ import annotations

import subprocess
import sys

from config.loader import example_path
from gateway.cli.batch import cmd_batch
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


def test_a_batch_command_without_the_batch_extra_says_how_to_install_it(monkeypatch, capsys) -> None:
    """The openai client is loaded when a batch command runs (not at every start of the CLI); without
    the extra the command explains, exit code 2."""
    monkeypatch.setitem(sys.modules, "openai", None)  # import openai now raises ImportError
    args = build_parser().parse_args(["batch", "status", "batch_x"])
    assert cmd_batch(args) == 2
    assert "pip install 'prefix-gateway[batch]'" in capsys.readouterr().err


def test_starting_the_cli_does_not_load_the_batch_client() -> None:
    code = "import sys, gateway.cli.main; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
