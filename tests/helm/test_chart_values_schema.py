"""values.schema.json rejects bad values at install time (Helm validates before rendering)."""

from __future__ import annotations

import json
from typing import Any

import helm_python as helm
import pytest

from tests.helm.chart import CHART_DIR, VALUE_SETS, render

BAD_VALUES: dict[str, tuple[dict[str, Any], str]] = {
    "unknown-top-level-key": ({"replicas": 3}, "replicas"),
    "misspelt-nested-key": ({"autoscaling": {"enabeld": True}}, "enabeld"),
    "replica-count-string": ({"replicaCount": "three"}, "replicaCount"),
    "negative-replica-count": ({"replicaCount": -1}, "replicaCount"),
    "pull-policy-enum": ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
    "bad-digest": ({"image": {"digest": "latest"}}, "digest"),
    "service-port-range": ({"service": {"port": 70000}}, "port"),
    "policy-without-models": ({"policy": {"models": None}}, "models"),
    "policy-empty-models": ({"policy": {"models": []}}, "models"),
    "model-without-name": ({"policy": {"models": [{"replicas": []}]}}, "name"),
    "policy-loopback-host": ({"policy": {"server": {"host": "127.0.0.1"}}}, "host"),
    "policy-port-string": ({"policy": {"server": {"port": "http"}}}, "port"),
    "redis-url-scheme": ({"redis": {"external": {"url": "http://redis:6379"}}}, "url"),
    "anti-affinity-enum": ({"antiAffinity": "always"}, "antiAffinity"),
    "hpa-cpu-percent": (
        {"autoscaling": {"targetCPUUtilizationPercentage": 0}},
        "targetCPUUtilizationPercentage",
    ),
    "scrape-interval": ({"metrics": {"serviceMonitor": {"interval": "often"}}}, "interval"),
    "ledger-path-relative": ({"storage": {"ledgerPath": "var/lib"}}, "ledgerPath"),
}


@pytest.mark.parametrize("label", sorted(BAD_VALUES))
def test_bad_values_are_rejected(label: str) -> None:
    values, key = BAD_VALUES[label]
    with pytest.raises(helm.HelmValuesError) as err:
        render(values)  # what `helm install` / `helm template` does
    assert key in str(err.value)


@pytest.mark.parametrize("label", sorted(BAD_VALUES))
def test_lint_reports_bad_values(label: str) -> None:
    values, _ = BAD_VALUES[label]
    report = helm.lint(CHART_DIR, values)
    assert any(m["severity"] == 3 for m in report["messages"]), report


@pytest.mark.parametrize("label", sorted(VALUE_SETS))
def test_good_values_pass_the_schema(label: str) -> None:
    with helm.Chart.load(CHART_DIR) as chart:
        chart.validate_schema(VALUE_SETS[label])


def test_schema_covers_every_default_value() -> None:
    """Each top-level key of values.yaml is described (the schema forbids the rest)."""
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    with helm.Chart.load(CHART_DIR) as chart:
        defaults = chart.values
    assert schema["additionalProperties"] is False
    assert set(defaults) <= set(schema["properties"])
