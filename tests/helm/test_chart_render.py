"""The chart lints and renders for every value set, and each object is valid Kubernetes (strict)."""

from __future__ import annotations

import json
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest

from tests.helm.chart import CHART_DIR, EXAMPLES, FULLNAME, VALUE_SETS, kinds, only, render

# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ["1.25.0", kubernetes_validate.utils.latest_version()]
SERVICEMONITOR_SCHEMA = json.loads((Path(__file__).parent / "servicemonitor.schema.json").read_text())


def test_examples_exist() -> None:
    assert {"vllm-fleet", "sglang-fleet"} <= set(EXAMPLES)


@pytest.mark.parametrize("label", sorted(VALUE_SETS))
def test_lint_is_clean(label: str) -> None:
    report = helm.lint(CHART_DIR, VALUE_SETS[label], strict=True, namespace="llm")
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert problems == []


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize("label", sorted(VALUE_SETS))
def test_manifests_validate_strictly(label: str, kube_version: str) -> None:
    manifests = render(VALUE_SETS[label])
    assert {"Deployment", "Service", "ConfigMap"} <= kinds(manifests)
    for m in manifests:
        if m.doc["apiVersion"].startswith("monitoring.coreos.com/"):
            # A CRD: no Kubernetes schema exists; checked against our own strict subset below.
            jsonschema.validate(m.doc, SERVICEMONITOR_SCHEMA)
            continue
        try:
            kubernetes_validate.validate(m.doc, kube_version, strict=True)
        except kubernetes_validate.ValidationError as err:
            pytest.fail(
                f"{m.source}: {m.kind}/{m.name} invalid for {kube_version}: {err.message} at {list(err.path)}"
            )


def test_every_template_renders_in_some_value_set() -> None:
    """No template is left out of the checks above (each renders a non-empty object somewhere)."""
    rendered = {
        m.source.rsplit("/templates/", 1)[1] for label in VALUE_SETS for m in render(VALUE_SETS[label])
    }
    templates = {
        str(p.relative_to(CHART_DIR / "templates")) for p in (CHART_DIR / "templates").rglob("*.yaml")
    }
    assert templates - rendered == set()


def test_servicemonitor_scrapes_the_gateway_service() -> None:
    manifests = render(VALUE_SETS["everything"])
    sm = only(manifests, "ServiceMonitor")
    svc = only(manifests, "Service", FULLNAME)
    selector = sm["spec"]["selector"]["matchLabels"]
    assert selector.items() <= svc["metadata"]["labels"].items()
    # the scraper reads the gateway's metrics listener, not the API port (issue 19, item 6)
    assert [e["port"] for e in sm["spec"]["endpoints"]] == ["metrics"]
    ports = {p["name"]: p for p in svc["spec"]["ports"]}
    assert {"http", "metrics"} <= set(ports) and ports["metrics"]["targetPort"] == "metrics"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["metadata"]["labels"]["release"] == "prom"
    # the Redis Service must not be scraped as a gateway
    redis_svc = only(manifests, "Service", f"{FULLNAME}-redis")
    assert not selector.items() <= redis_svc["metadata"]["labels"].items()


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda c: c.update(readinessProbes=c["readinessProbe"]),  # misspelt field
        lambda c: c["securityContext"].update(runAsNonRoot="yes"),  # wrong type
        lambda c: c.pop("name"),  # required field
    ],
    ids=["unknown-field", "wrong-type", "missing-required"],
)
def test_strict_validation_catches_a_broken_deployment(corrupt) -> None:
    """The check above is not vacuous: the same validator rejects a Deployment with one fault."""
    dep = only(render(), "Deployment", FULLNAME)
    corrupt(dep["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(dep, KUBE_VERSIONS[-1], strict=True)


def test_notes_tell_where_to_connect_and_warn_about_unshared_state() -> None:
    from tests.helm.chart import render_raw

    def notes(values: dict) -> str:
        return next(t for s, t in render_raw(values).items() if s.endswith("NOTES.txt"))

    text = notes({})
    assert f"http://{FULLNAME}.llm.svc:80/v1" in text
    assert "no Redis is configured" in text  # 2 pods by default, each with its own state
    assert "no Redis is configured" not in notes({"replicaCount": 1})
    assert "no Redis is configured" not in notes({"redis": {"enabled": True}})
    assert "get secret" not in notes({"secret": {"existingSecret": "mine"}})
