"""The Kubernetes base and docker-compose.yml describe the same three workloads (migrate,
api, aggregator): the same image, command, ports, settings and health checks. The compose
stack is the one the smoke test runs (tests/compose), so a difference here is a
Kubernetes deployment nobody has run."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BASE = REPO / "deploy" / "k8s" / "base"
WORKLOADS = {"migrate": "migrate-job.yaml", "api": "api-deployment.yaml",
             "aggregator": "aggregator-deployment.yaml"}
# Settings every workload needs in both; the rest may be compose-only (the compose file
# gives its three services one environment).
NEEDED = {"migrate": {"ETT_DATABASE_URL"},
          "api": {"ETT_DATABASE_URL", "ETT_ADMIN_TOKEN", "ETT_TAXONOMY"},
          "aggregator": {"ETT_DATABASE_URL", "ETT_TAXONOMY"}}


def _compose() -> dict[str, Any]:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]


def _k8s(service: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the container, the pod spec) of the workload."""
    pod = yaml.safe_load((BASE / WORKLOADS[service]).read_text())["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    return container, pod


def _flag(command: list[str], name: str) -> int | None:
    return int(command[command.index(name) + 1]) if name in command else None


def _healthcheck_url(service: dict[str, Any]) -> tuple[int, str]:
    test = " ".join(service["healthcheck"]["test"])
    match = re.search(r"http://127\.0\.0\.1:(\d+)(/\S*?)['\"]", test)
    assert match, f"no URL in the healthcheck: {test}"
    return int(match[1]), match[2]


def _probe_url(container: dict[str, Any], probe: str) -> tuple[int, str]:
    get = container[probe]["httpGet"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    return ports.get(get["port"], get["port"]), get["path"]


@pytest.mark.parametrize("service", sorted(WORKLOADS))
def test_same_image_and_command(service: str) -> None:
    compose = _compose()[service]
    container, _ = _k8s(service)
    assert compose["image"].split(":")[0] == container["image"]
    kustomized = {i["name"] for i in
                  yaml.safe_load((BASE / "kustomization.yaml").read_text())["images"]}
    assert container["image"] in kustomized
    assert compose["command"] == container["args"]


@pytest.mark.parametrize("service", ["api", "aggregator"])
def test_same_ports(service: str) -> None:
    compose = _compose()[service]
    container, _ = _k8s(service)
    port = _flag(compose["command"], "--port") or _flag(compose["command"], "--metrics-port")
    assert [p["containerPort"] for p in container["ports"]] == [port]
    published = [str(p).rsplit(":", 1)[-1] for p in compose.get("ports", [])]
    assert all(p == str(port) for p in published)
    service_doc = yaml.safe_load((BASE / f"{service}-service.yaml").read_text())
    assert [p["port"] for p in service_doc["spec"]["ports"]] == [port]
    exposed = re.search(r"^EXPOSE (.*)$", (REPO / "Dockerfile").read_text(), re.M)
    assert exposed and str(port) in exposed[1].split()


@pytest.mark.parametrize("service", sorted(WORKLOADS))
def test_same_settings(service: str) -> None:
    compose_env = _compose()[service]["environment"]
    container, pod = _k8s(service)
    k8s_env = {e["name"]: e for e in container.get("env", [])}
    assert NEEDED[service] <= set(compose_env)
    assert NEEDED[service] <= set(k8s_env)
    assert set(k8s_env) <= set(compose_env), "a setting only Kubernetes gets"
    if "ETT_TAXONOMY" in k8s_env:
        # Each points at the file its own mount puts there.
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        path = Path(k8s_env["ETT_TAXONOMY"]["value"])
        volume = next(v for v in pod["volumes"] if v["name"] == mounts[str(path.parent)])
        configmap = yaml.safe_load((BASE / "configmap-taxonomy.yaml").read_text())
        assert configmap["metadata"]["name"] == volume["configMap"]["name"]
        assert path.name in configmap["data"]
        binds = {v.split(":")[1]: v.split(":")[0] for v in _compose()[service]["volumes"]}
        assert binds[compose_env["ETT_TAXONOMY"]] == "./deploy/taxonomy.yaml"
    # Secrets in Kubernetes, development defaults in compose: never a literal password.
    assert "valueFrom" in k8s_env["ETT_DATABASE_URL"]


@pytest.mark.parametrize("service", ["api", "aggregator"])
def test_same_health_checks(service: str) -> None:
    compose = _compose()[service]
    container, _ = _k8s(service)
    assert _healthcheck_url(compose) == _probe_url(container, "readinessProbe")
