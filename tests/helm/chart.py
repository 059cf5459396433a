"""Render the Helm chart with the real Helm SDK (helm-python-sdk) and hand back parsed manifests.

No template is re-implemented here: Helm renders (with values.schema.json enforced), we only parse
its output.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = ROOT / "helm" / "prefix-gateway"
EXAMPLES_DIR = CHART_DIR / "examples"
EXAMPLES = sorted(p.stem for p in EXAMPLES_DIR.glob("*.yaml"))
RELEASE = "pgw"
NAMESPACE = "llm"
FULLNAME = f"{RELEASE}-prefix-gateway"


@dataclass(frozen=True)
class Manifest:
    source: str  # template path, e.g. prefix-gateway/templates/deployment.yaml
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return self.doc["kind"]

    @property
    def name(self) -> str:
        return self.doc["metadata"]["name"]


@functools.lru_cache(maxsize=1)
def _chart() -> helm.Chart:
    return helm.Chart.load(CHART_DIR)


def example_values(name: str) -> dict[str, Any]:
    return yaml.safe_load((EXAMPLES_DIR / f"{name}.yaml").read_text())


def render_raw(values: dict[str, Any] | None = None) -> dict[str, str]:
    """Template path -> rendered text, exactly as `helm template` would produce it."""
    return _chart().render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)


def render(values: dict[str, Any] | None = None, *, include_tests: bool = True) -> list[Manifest]:
    """Every Kubernetes object the chart renders for ``values`` (NOTES.txt excluded)."""
    out: list[Manifest] = []
    for source, text in sorted(render_raw(values).items()):
        if source.endswith("NOTES.txt"):
            continue
        if not include_tests and "/templates/tests/" in source:
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                out.append(Manifest(source, doc))
    return out


def only(manifests: list[Manifest], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single manifest of ``kind`` (and ``name``); fails the test if there is not exactly one."""
    found = [m.doc for m in manifests if m.kind == kind and (name is None or m.name == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kinds(manifests: list[Manifest]) -> set[str]:
    return {m.kind for m in manifests}


def policy_text(manifests: list[Manifest]) -> str:
    return only(manifests, "ConfigMap", FULLNAME)["data"]["policy.yaml"]


def gateway_container(manifests: list[Manifest]) -> dict[str, Any]:
    dep = only(manifests, "Deployment", FULLNAME)
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    return container


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


# Every toggle of the chart on at once, so every template branch is rendered and validated.
EVERYTHING: dict[str, Any] = {
    "image": {"repository": "registry.example.com/pgw", "digest": "sha256:" + "ab" * 32},
    "imagePullSecrets": [{"name": "regcred"}],
    "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 5},
    "antiAffinity": "hard",
    "priorityClassName": "high",
    "nodeSelector": {"pool": "cpu"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gw", "effect": "NoSchedule"}],
    "podAnnotations": {"example.com/team": "ml"},
    "podLabels": {"team": "ml"},
    "extraEnv": [{"name": "LOG_FORMAT", "value": "json"}],
    "envFrom": [{"secretRef": {"name": "tenant-keys"}}],
    "service": {"type": "LoadBalancer", "port": 443, "annotations": {"example.com/lb": "internal"}},
    "serviceAccount": {"annotations": {"example.com/role": "gw"}},
    "secret": {"serverSecret": "s" * 32, "adminToken": "t" * 32},
    "redis": {"enabled": True, "persistence": {"enabled": True, "storageClassName": "fast"}},
    "metrics": {
        "serviceMonitor": {"enabled": True, "labels": {"release": "prom"}},
        "token": {"existingSecret": "scrape-token"},
    },
    "dashboard": {"enabled": True, "labels": {"team": "ml"}},
    "networkPolicy": {
        "enabled": True,
        "ingressFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "apps"}}}],
        "metricsFrom": [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
        ],
        "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "vllm"}}}], "ports": [{"port": 8000}]}],
    },
}

# Every optional part off.
MINIMAL: dict[str, Any] = {
    "replicaCount": 1,
    "config": {"rollOnChange": False},
    "metrics": {"podAnnotations": False},
    "podDisruptionBudget": {"enabled": False},
    "serviceAccount": {"create": False},
    "antiAffinity": "none",
    "topologySpread": {"enabled": False},
    "resources": {},
    "secret": {"existingSecret": "mine"},
}

VALUE_SETS: dict[str, dict[str, Any]] = {
    "default": {},
    **{f"example:{name}": example_values(name) for name in EXAMPLES},
    "everything": EVERYTHING,
    "minimal": MINIMAL,
}
