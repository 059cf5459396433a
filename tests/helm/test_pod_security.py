"""Every pod the chart creates is admitted in a namespace that enforces the Pod Security Standard
"restricted" (pod-security.kubernetes.io/enforce: restricted), rule by rule as the standard lists them.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helm.chart import VALUE_SETS, Manifest, render

ALLOWED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
GOOD_SECCOMP = {"RuntimeDefault", "Localhost"}


def pod_specs(manifests: list[Manifest]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for m in manifests:
        if m.kind == "Pod":
            out.append((f"Pod/{m.name}", m.doc["spec"]))
        elif m.kind in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
            out.append((f"{m.kind}/{m.name}", m.doc["spec"]["template"]["spec"]))
    return out


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """Violations of the baseline + restricted Pod Security Standards by one pod spec."""
    problems = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            problems.append(f"{flag} is set")
    for vol in spec.get("volumes", []):
        kinds = set(vol) - {"name"}
        if not kinds <= ALLOWED_VOLUMES:
            problems.append(f"volume {vol['name']} of type {kinds}")
    pod_sc = spec.get("securityContext", {})
    containers = (
        spec.get("containers", []) + spec.get("initContainers", []) + spec.get("ephemeralContainers", [])
    )
    for c in containers:
        sc = c.get("securityContext", {})
        name = c["name"]
        if sc.get("privileged"):
            problems.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation is not false")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            problems.append(f"{name}: runAsNonRoot is not true")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            problems.append(f"{name}: runAsUser 0")
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        if seccomp not in GOOD_SECCOMP:
            problems.append(f"{name}: seccomp profile {seccomp}")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            problems.append(f"{name}: capabilities not dropping ALL")
        if set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: adds capabilities {caps['add']}")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            problems.append(f"{name}: hostPort")
    return problems


@pytest.mark.parametrize("label", sorted(VALUE_SETS))
def test_every_pod_meets_the_restricted_standard(label: str) -> None:
    specs = pod_specs(render(VALUE_SETS[label]))
    assert specs
    for what, spec in specs:
        assert restricted_violations(spec) == [], what


def test_the_checker_has_teeth() -> None:
    (_, spec) = next(s for s in pod_specs(render()) if s[0].startswith("Deployment/"))
    assert restricted_violations(spec) == []
    spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
    spec["securityContext"]["seccompProfile"] = {"type": "Unconfined"}
    spec["containers"][0]["securityContext"].pop("seccompProfile")
    spec["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    assert len(restricted_violations(spec)) == 3
