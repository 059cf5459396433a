"""Structural checks of the Dockerfile (no Docker daemon or hadolint here; the build itself is not run)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from dataclasses import dataclass, field

import pytest

from tests.helm.chart import ROOT

COMPILERS = (
    "gcc",
    "g++",
    "cc",
    "clang",
    "make",
    "build-essential",
    "python3-dev",
    "libc6-dev",
    "cargo",
    "rustc",
)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def of(self, op: str) -> list[str]:
        return [arg for o, arg in self.instructions if o == op]


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Global ARG defaults and the stages, with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", text)
    args: dict[str, str] = {}
    stages: list[Stage] = []

    def expand(value: str) -> str:
        return re.sub(r"\$\{(\w+)\}", lambda v: args.get(v.group(1), v.group(0)), value)

    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op, rest = op.upper(), rest.strip()
        if op == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.IGNORECASE)
            assert m, line
            stages.append(Stage(expand(m.group(1)), m.group(2)))
        elif not stages:
            assert op == "ARG", f"only ARG may precede the first FROM: {line}"
            name, _, default = rest.partition("=")
            args[name] = expand(default)  # a global ARG may use the ones before it, as in Docker
        else:
            stages[-1].instructions.append((op, rest))
    return args, stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse((ROOT / "Dockerfile").read_text())[1]


def test_multi_stage_on_slim_python_311(stages: list[Stage]) -> None:
    assert len(stages) >= 2
    for s in stages:
        assert re.fullmatch(r"python:3\.11-slim(-\w+)?(@sha256:[0-9a-f]{64})?", s.base), s.base
    builder, final = stages[0], stages[-1]
    copies = final.of("COPY")
    assert any(c.startswith(f"--from={builder.name} ") and "/opt/venv" in c for c in copies), copies


def test_final_stage_runs_as_uid_10001(stages: list[Stage]) -> None:
    final = stages[-1]
    users = final.of("USER")
    assert users, "the final stage sets no USER"
    user = users[-1].split(":")[0]
    assert user == "10001"
    # nothing runs as root after USER
    last_user = max(i for i, (op, _) in enumerate(final.instructions) if op == "USER")
    assert all(op != "RUN" for op, _ in final.instructions[last_user:])
    assert any("--uid 10001" in r for r in final.of("RUN"))


def test_no_build_tools_in_the_final_stage(stages: list[Stage]) -> None:
    final = stages[-1]
    for run in final.of("RUN"):
        words = set(shlex.split(run.replace("&&", " ")))
        assert not words & set(COMPILERS), run
        assert "pip" not in words, "packages are installed in the builder, not the final stage"
    # the venv is made without pip, so the image carries no installer
    assert any("venv --without-pip /opt/venv" in r for r in stages[0].of("RUN"))


def test_entrypoint_cmd_and_port(stages: list[Stage]) -> None:
    final = stages[-1]
    assert json.loads(final.of("ENTRYPOINT")[-1]) == ["prefix-gateway"]
    assert json.loads(final.of("CMD")[-1]) == ["serve", "--config", "/etc/prefix-gateway/policy.yaml"]
    assert final.of("EXPOSE") == ["8080"]
    assert any("PATH=/opt/venv/bin" in e for e in final.of("ENV"))


def test_builder_copies_every_package_of_the_project(stages: list[Stage]) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in pyproject["tool"]["setuptools"]["packages"]["find"]["include"]}
    copied = {c.split()[0] for c in stages[0].of("COPY")}
    assert packages <= copied
    assert "pyproject.toml" in stages[0].of("COPY")[0]


def test_dockerignore_keeps_the_context_small() -> None:
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()}
    assert {".git", "tests", "**/__pycache__"} <= ignored


def test_the_podman_script_builds_this_dockerfile_with_a_pipless_final_base() -> None:
    """scripts/build_image.sh (opt-in, root) passes a base without pip as PYTHON_IMAGE and one with
    pip as BUILDER_IMAGE: the Dockerfile must use the first for the final stage only."""
    args, _ = parse((ROOT / "Dockerfile").read_text())
    assert args["BUILDER_IMAGE"] == args["PYTHON_IMAGE"]  # by default one image, as before
    text = (ROOT / "Dockerfile").read_text()
    assert "FROM ${BUILDER_IMAGE} AS builder" in text and "FROM ${PYTHON_IMAGE} AS runtime" in text
    script = (ROOT / "scripts" / "build_image.sh").read_text()
    assert '--build-arg PYTHON_IMAGE="$BASE"' in script and '--build-arg BUILDER_IMAGE="$BUILDER"' in script
    assert subprocess.run(["bash", "-n", str(ROOT / "scripts" / "build_image.sh")]).returncode == 0
