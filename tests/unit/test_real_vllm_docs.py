"""Issue 19, item 9: the real-vLLM tooling and its documentation agree.

docs/real-vllm.md's precise-mode policy is what ``scripts/vllm_cpu/replicas.py start`` prints for the
replicas it starts with its defaults (ids = topics, replay sockets, block size, tokenizer path), and
the shell scripts run a Python they name (a bare ``python`` fails unless a venv is activated).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

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
