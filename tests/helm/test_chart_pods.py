"""What the rendered workloads promise: hardening, probes, graceful shutdown, spreading, rollouts."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.helm.chart import (
    FULLNAME,
    MINIMAL,
    VALUE_SETS,
    Manifest,
    env_of,
    gateway_container,
    kinds,
    only,
    render,
)


def pod_spec(manifests: list[Manifest], kind: str = "Deployment", name: str = FULLNAME) -> dict[str, Any]:
    return only(manifests, kind, name)["spec"]["template"]["spec"]


@pytest.mark.parametrize("label", sorted(VALUE_SETS))
def test_gateway_pod_is_hardened(label: str) -> None:
    manifests = render(VALUE_SETS[label])
    spec = pod_spec(manifests)
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 10001
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["automountServiceAccountToken"] is False
    sc = gateway_container(manifests)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["privileged"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}


def test_writable_paths_are_emptydirs() -> None:
    manifests = render({"storage": {"ledgerPath": "/data/ledger"}})
    mounts = {m["mountPath"]: m["name"] for m in gateway_container(manifests)["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(manifests)["volumes"]}
    for path in ("/tmp", "/data/ledger"):
        assert "emptyDir" in volumes[mounts[path]], path
    assert volumes[mounts["/etc/prefix-gateway"]]["configMap"]["name"] == FULLNAME


def test_probes_and_command() -> None:
    c = gateway_container(render())
    assert c["args"] == ["serve", "--config", "/etc/prefix-gateway/policy.yaml"]
    assert c["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["startupProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}


@pytest.mark.parametrize(
    ("values", "grace"),
    [
        ({}, 10 + 30 + 5),  # default policy drains 30 s
        ({"policy": {"server": {"drain_timeout_s": 90}}}, 10 + 90 + 5),
        ({"policy": {"server": {"drain_timeout_s": 2.5}}}, 10 + 3 + 5),
        (
            {"policy": {"server": {"drain_timeout_s": None}}, "shutdown": {"defaultDrainSeconds": 20}},
            10 + 20 + 5,
        ),
        ({"shutdown": {"preStopSleepSeconds": 0, "extraGraceSeconds": 0}}, 30),
        ({"shutdown": {"terminationGracePeriodSeconds": 7}}, 7),
    ],
)
def test_grace_period_covers_prestop_and_drain(values: dict[str, Any], grace: int) -> None:
    manifests = render(values)
    assert pod_spec(manifests)["terminationGracePeriodSeconds"] == grace
    sleep = values.get("shutdown", {}).get("preStopSleepSeconds", 10)
    assert gateway_container(manifests)["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", str(sleep)]


def test_rollout_never_drops_below_desired_ready_pods() -> None:
    dep = only(render(), "Deployment", FULLNAME)
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


def test_policy_change_rolls_pods_and_nothing_else_does() -> None:
    def checksum(values: dict[str, Any]) -> str:
        return only(render(values), "Deployment", FULLNAME)["spec"]["template"]["metadata"]["annotations"][
            "checksum/policy"
        ]

    base = checksum({})
    assert checksum({"replicaCount": 5}) == base
    assert checksum({"policy": {"server": {"log_level": "debug"}}}) != base
    assert checksum({"redis": {"enabled": True}}) != base  # the policy gains redis.url
    annotations = only(render(MINIMAL), "Deployment", FULLNAME)["spec"]["template"]["metadata"].get(
        "annotations"
    )
    assert not annotations  # rollOnChange off and no metrics annotations


def test_pods_spread_over_nodes_and_zones() -> None:
    manifests = render()
    spec = pod_spec(manifests)
    selector = only(manifests, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]
    (soft,) = spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert soft["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert soft["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    (spread,) = spec["topologySpreadConstraints"]
    assert spread["topologyKey"] == "topology.kubernetes.io/zone"
    assert spread["labelSelector"]["matchLabels"] == selector

    hard = pod_spec(render({"antiAffinity": "hard"}))["affinity"]["podAntiAffinity"]
    assert (
        hard["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"
    )
    assert "affinity" not in pod_spec(render(MINIMAL))


def test_hpa_owns_the_replica_count() -> None:
    fixed = render({"replicaCount": 4})
    assert only(fixed, "Deployment", FULLNAME)["spec"]["replicas"] == 4
    assert "HorizontalPodAutoscaler" not in kinds(fixed)

    scaled = render({"autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 9}})
    assert "replicas" not in only(scaled, "Deployment", FULLNAME)["spec"]
    hpa = only(scaled, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 9)


def test_pdb_selects_the_gateway_pods() -> None:
    manifests = render()
    pdb = only(manifests, "PodDisruptionBudget")
    assert (
        pdb["spec"]["selector"]["matchLabels"]
        == only(manifests, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]
    )
    assert pdb["spec"]["maxUnavailable"] == 1
    assert "PodDisruptionBudget" not in kinds(render(MINIMAL))


def test_service_targets_the_gateway_pods_only() -> None:
    manifests = render(VALUE_SETS["everything"])
    svc = only(manifests, "Service", FULLNAME)
    pod_labels = only(manifests, "Deployment", FULLNAME)["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    # neither the Redis pods nor the helm test pod carry the gateway's selector labels
    redis_labels = only(manifests, "StatefulSet")["spec"]["template"]["metadata"]["labels"]
    test_pod_labels = only(manifests, "Pod")["metadata"]["labels"]
    for labels in (redis_labels, test_pod_labels):
        assert not svc["spec"]["selector"].items() <= labels.items()


def test_generated_secret_and_explicit_values() -> None:
    secret = only(render(), "Secret")
    for key in ("server-secret", "admin-token"):
        assert len(base64.b64decode(secret["data"][key])) >= 32
    # random values differ between two installs
    assert only(render(), "Secret")["data"]["server-secret"] != secret["data"]["server-secret"]

    given = only(render({"secret": {"serverSecret": "s3cret-value", "adminToken": "tok"}}), "Secret")
    assert base64.b64decode(given["data"]["server-secret"]) == b"s3cret-value"
    assert base64.b64decode(given["data"]["admin-token"]) == b"tok"


def test_existing_secret_is_referenced_not_created() -> None:
    manifests = render(
        {"secret": {"existingSecret": "mine", "serverSecretKey": "salt", "adminTokenKey": "adm"}}
    )
    assert "Secret" not in kinds(manifests)
    env = env_of(gateway_container(manifests))
    assert env["PREFIX_GATEWAY_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "salt"}
    assert env["PREFIX_GATEWAY_ADMIN_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "mine", "key": "adm"}


def test_bundled_redis_is_hardened_and_persistent_on_request() -> None:
    manifests = render({"redis": {"enabled": True, "persistence": {"enabled": True, "size": "5Gi"}}})
    sts = only(manifests, "StatefulSet")
    spec = sts["spec"]["template"]["spec"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    (c,) = spec["containers"]
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "--appendonly" in c["args"] and c["args"][c["args"].index("--appendonly") + 1] == "yes"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    assert only(manifests, "Service", f"{FULLNAME}-redis")["spec"]["ports"][0]["port"] == 6379

    ephemeral = only(render({"redis": {"enabled": True}}), "StatefulSet")
    assert "volumeClaimTemplates" not in ephemeral["spec"]
    assert ephemeral["spec"]["template"]["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert "StatefulSet" not in kinds(render({"redis": {"external": {"url": "redis://r:6379/0"}}}))


def test_network_policies() -> None:
    assert "NetworkPolicy" not in kinds(render())
    manifests = render(VALUE_SETS["everything"])
    gw = only(manifests, "NetworkPolicy", FULLNAME)
    assert gw["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert gw["spec"]["ingress"][0]["from"] == VALUE_SETS["everything"]["networkPolicy"]["ingressFrom"]
    # the metrics port only from the scraper's peers (issue 19, item 6)
    assert gw["spec"]["ingress"][1]["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert gw["spec"]["ingress"][1]["from"] == VALUE_SETS["everything"]["networkPolicy"]["metricsFrom"]
    egress_ports = [p["port"] for rule in gw["spec"]["egress"] for p in rule.get("ports", [])]
    assert {53, 6379, 8000} <= set(egress_ports)
    redis_np = only(manifests, "NetworkPolicy", f"{FULLNAME}-redis")
    gateway_selector = only(manifests, "Deployment", FULLNAME)["spec"]["selector"]["matchLabels"]
    assert redis_np["spec"]["ingress"][0]["from"] == [{"podSelector": {"matchLabels": gateway_selector}}]
    # ingress-only when no egress rules are given
    only_ingress = only(render({"networkPolicy": {"enabled": True}}), "NetworkPolicy", FULLNAME)
    assert only_ingress["spec"]["policyTypes"] == ["Ingress"]


def test_image_reference() -> None:
    assert gateway_container(render())["image"] == "prefix-gateway:0.1.0"
    assert gateway_container(render({"image": {"tag": "1.2.3"}}))["image"] == "prefix-gateway:1.2.3"
    digest = "sha256:" + "ab" * 32
    assert gateway_container(render({"image": {"digest": digest}}))["image"] == f"prefix-gateway@{digest}"
