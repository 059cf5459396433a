"""Issue 19, item 9: the real-vLLM tooling and its documentation agree.

docs/real-vllm.md's precise-mode policy is what ``scripts/vllm_cpu/replicas.py start`` prints for the
replicas it starts with its defaults (ids = topics, replay sockets, block size, tokenizer path), and
the shell scripts run a Python they name (a bare ``python`` fails unless a venv is activated).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import yaml

from config.policy import Policy
from scripts.vllm_cpu import replicas as R

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "real-vllm.md"


def test_the_documented_precise_policy_is_what_replicas_py_starts() -> None:
    text = DOC.read_text()
    section = text[text.index("## Precise mode") :]
    documented = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    command = re.search(r"replicas\.py start ((?:[^\n]*\\\n)*[^\n]*)", text).group(1).replace("\\\n", " ")
    args = R.parser().parse_args(["start", *shlex.split(command)])
    started = R.precise_policy(R.cli_specs(args), args.kv_events, Path("/work/vllm-cpu/tiny-llama"))
    assert documented == started
    policy = started["models"][0]
    topics = policy["routing"]["kv_events"]["topics"]
    assert [r["id"] for r in policy["replicas"]] == list(topics) == list(topics.values())


def test_the_shell_scripts_never_call_a_bare_python() -> None:
    for script in sorted((ROOT / "scripts").rglob("*.sh")):
        for n, line in enumerate(script.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            assert not re.search(r"(^|[\s;&|(])python(\s|$)", code), f"{script.name}:{n}: {line.strip()}"


def test_the_documented_connect_mode_is_what_replicas_py_kv_events_bind_starts(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Issue 31, item 8: the doc showed events on 5557 and replay on 5558 without a topic, the script
    bound base port + 100 + i on every interface. The doc's command, the flag it says a replica gets
    and the policy it says ``start`` prints are the script's; every socket is loopback (or a Unix socket)."""
    monkeypatch.setattr(R, "HOME", Path("/work/vllm-cpu"))  # the doc's $VLLM_CPU_HOME
    text = DOC.read_text()
    section = text[text.index("### Several gateway processes or pods") : text.index("How it works:")]
    shown = re.search(r"```sh\n[^\n]*scripts/vllm_cpu/replicas\.py start ((?:[^\n]*\\\n)*[^\n]*)", section)
    args = R.parser().parse_args(["start", *shlex.split(shown.group(1).replace("\\\n", " "))])
    assert args.kv_events_bind
    specs = R.cli_specs(args)
    started = R.precise_policy(specs, args.kv_events, Path("/work/vllm-cpu/tiny-llama"))
    documented = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    assert documented["kv_events"] == started["models"][0]["routing"]["kv_events"]
    flag = re.search(r"`--kv-events-config '(.*?)'`", section, re.S).group(1).replace("\n", " ")
    argv = R.command(specs[0])
    assert json.loads(flag) == json.loads(argv[argv.index("--kv-events-config") + 1])
    endpoints = [*documented["kv_events"]["endpoints"].values(), *documented["kv_events"]["replay"].values()]
    for endpoint in endpoints:
        assert endpoint.startswith(("ipc://", "tcp://127.0.0.1:")), endpoint  # never tcp://*
    Policy.model_validate(started)  # a policy the gateway accepts


def test_every_doc_that_shows_several_gateway_processes_names_the_secret() -> None:
    """Issue 31, item 8: processes with different secrets hash one prompt differently."""
    real = DOC.read_text()
    several = real[real.index("### Several gateway processes or pods") : real.index("How it works:")]
    assert "PREFIX_GATEWAY_SECRET" in several and "export PREFIX_GATEWAY_SECRET" in several
    ops = (ROOT / "docs" / "operations.md").read_text()
    table = ops[ops.index("| state | per process | shared |") :]
    table = table[: table.index("\n\n")]
    assert "PREFIX_GATEWAY_SECRET" in table
