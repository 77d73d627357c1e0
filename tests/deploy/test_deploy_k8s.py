"""The kustomize base, validated offline: resource list, schemas, generated manifests."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

from dashboards import k8s  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "k8s" / "base"
SCHEMAS = Path(__file__).resolve().parent / "schemas"
K8S_VERSION = "1.30.0"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule-monitoring-v1.json",
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor-monitoring-v1.json",
}


def kustomization() -> dict[str, Any]:
    return yaml.safe_load((BASE / "kustomization.yaml").read_text())


def resources() -> list[dict[str, Any]]:
    docs = []
    for name in kustomization()["resources"]:
        docs += [d for d in yaml.safe_load_all((BASE / name).read_text()) if d]
    return docs


def validate(doc: dict[str, Any]) -> None:
    key = (doc["apiVersion"], doc["kind"])
    if key in CRD_SCHEMAS:
        schema = json.loads((SCHEMAS / CRD_SCHEMAS[key]).read_text())
        jsonschema.Draft202012Validator(schema).validate(doc)
    else:
        # Bundled schemas, strict: unknown fields fail, as `kubectl apply` would warn.
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_every_listed_resource_exists_and_every_manifest_is_listed() -> None:
    listed = kustomization()["resources"]
    assert all((BASE / name).is_file() for name in listed)
    on_disk = {p.name for p in BASE.glob("*.yaml")} - {"kustomization.yaml"}
    assert on_disk == set(listed)


def test_the_base_has_the_resources_a_deployment_needs() -> None:
    kinds = {(d["kind"], d["metadata"]["name"]) for d in resources()}
    assert kinds == {
        ("Deployment", "ett-api"), ("Deployment", "ett-aggregator"), ("Job", "ett-migrate"),
        ("Service", "ett-api"), ("Service", "ett-aggregator"),
        ("ConfigMap", "ett-taxonomy"), ("ConfigMap", "ett-slo"),
        ("PrometheusRule", "ett-rules"), ("ServiceMonitor", "ett"),
    }


def test_every_resource_validates_against_its_schema() -> None:
    for doc in resources():
        validate(doc)


def test_a_schema_violation_is_caught() -> None:
    deployment = next(d for d in resources() if d["kind"] == "Deployment")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(deployment)
    rule = next(d for d in resources() if d["kind"] == "PrometheusRule")
    rule["spec"]["groups"] = [{"name": "g", "rules": [{"recrod": "x", "expr": "1"}]}]
    with pytest.raises(jsonschema.ValidationError):
        validate(rule)


def test_generated_manifests_match_their_sources() -> None:
    for path, text in k8s.render_all(REPO).items():
        assert (REPO / path).read_text() == text, f"{path} is stale: run `ett dashboards`"


def test_prometheus_rule_holds_every_generated_rule_group() -> None:
    rule = next(d for d in resources() if d["kind"] == "PrometheusRule")
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert names and len(names) == len(set(names))
    assert names == [g["name"] for g in k8s.rule_groups(k8s.rule_files(REPO), REPO)]


def test_prometheus_rule_expressions_pass_promtool(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus)")
    rule = next(d for d in resources() if d["kind"] == "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"]))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_workloads_run_as_non_root_with_limits_and_probes() -> None:
    for doc in resources():
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = doc["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for c in pod["containers"]:
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["resources"]["limits"]["memory"]
            if doc["kind"] == "Deployment":
                assert c["readinessProbe"] and c["livenessProbe"]


def test_config_maps_carry_the_files_the_pods_mount() -> None:
    maps = {d["metadata"]["name"]: d for d in resources() if d["kind"] == "ConfigMap"}
    taxonomy = yaml.safe_load(maps["ett-taxonomy"]["data"]["taxonomy.yaml"])
    assert "effective_training" in taxonomy["components"]
    api = next(d for d in resources() if d["metadata"]["name"] == "ett-api"
               and d["kind"] == "Deployment")
    env = {e["name"]: e for e in api["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["ETT_TAXONOMY"]["value"] == "/etc/ett/taxonomy/taxonomy.yaml"


def test_kustomize_renders_the_base_when_kubectl_is_available() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with built-in kustomize) not installed")
    result = subprocess.run([kubectl, "kustomize", str(BASE)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert len(docs) == len(resources())
    for doc in docs:
        assert doc["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ett-telemetry"
        validate(doc)
    images = {c["image"] for d in docs if d["kind"] in ("Deployment", "Job")
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert images == {"ghcr.io/ett-telemetry/ett-telemetry:0.1.0"}
