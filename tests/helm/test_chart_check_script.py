"""scripts/chart_check.py: the offline `helm template` + checks that docs/deploy.md tells operators to run."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from tests.helm.chart import EXAMPLES_DIR, ROOT


@pytest.fixture(scope="module")
def chart_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("chart_check", ROOT / "scripts" / "chart_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_passes_and_is_written_out(chart_check: ModuleType, tmp_path: Path) -> None:
    args = ["-f", str(EXAMPLES_DIR / "vllm-fleet.yaml"), "--namespace", "llm", "--out", str(tmp_path)]
    args += ["--env", "TEAM_SEARCH_KEY_SHA256=" + "a" * 64, "--env", "TEAM_ADS_KEY_SHA256=" + "b" * 64]
    assert chart_check.main(args) == 0
    deployment = tmp_path / "prefix-gateway" / "templates" / "deployment.yaml"
    assert "kind: Deployment" in deployment.read_text()


def test_unset_policy_variable_fails(chart_check: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert chart_check.main(["-f", str(EXAMPLES_DIR / "vllm-fleet.yaml")]) == 1
    assert "TEAM_SEARCH_KEY_SHA256" in capsys.readouterr().err


def test_schema_violation_fails(chart_check: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    assert chart_check.main(["--set", "replicaCount=abc"]) == 1
    assert "replicaCount" in capsys.readouterr().out


def test_values_files_merge_like_helm(chart_check: ModuleType) -> None:
    merged = chart_check.merge({"a": {"b": 1, "c": [1, 2]}, "d": 1}, {"a": {"c": [3]}, "d": {"e": 2}})
    assert merged == {"a": {"b": 1, "c": [3]}, "d": {"e": 2}}
