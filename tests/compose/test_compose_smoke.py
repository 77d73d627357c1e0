"""docker-compose.yml as users run it, on Podman: our image built from our Dockerfile, the
stack up with only tests/compose/compose.local.yml on top (images built here, one API
port), a fleet posted through the API container, the ETT series read back from
Prometheus's HTTP API, and an injected compilation regression paging the compiler team
through the generated SLO rules and Alertmanager's routes.

Grafana cannot run here (no registry to pull grafana/grafana from, and no Debian package
of it): the dashboards are checked offline instead, against the JSON Schema of Grafana's
own dashboard types (tests/dashboards/test_dashboards_grafana_schema.py).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from tests.factories import event, spec_example

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "compose-smoke.sh"
BIN = Path(sys.executable).parent
PODMAN_COMPOSE = shutil.which("podman-compose") or shutil.which("podman-compose", path=str(BIN))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (shutil.which("podman") and shutil.which("mmdebstrap") and PODMAN_COMPOSE
             and os.geteuid() == 0),
        reason="needs root, podman and mmdebstrap (scripts/install-podman.sh) and "
               "podman-compose (the test extras)"),
]

API = "http://127.0.0.1:8080"
PROMETHEUS = "http://127.0.0.1:9090"
SINK = "http://127.0.0.1:9095"
# docker-compose.yml's development default (ETT_ADMIN_TOKEN unset).
TOKEN = "dev-admin-token-change-me"
MODEL, TEAM = "smoke-model", "ads"
GPU_MIN = 8 * 60  # GPU-seconds per minute of an 8-GPU job


def _script(action: str) -> str:
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(SCRIPT), action], env=env, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, f"compose-smoke.sh {action}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def stack() -> dict[str, float]:
    _script("down")  # whatever an interrupted run left
    try:
        out = _script("up")
        yield {m[1]: float(m[2]) for m in re.finditer(r"^timing: (\S+) ([\d.]+)$", out, re.M)}
    finally:
        _script("down")
        left = subprocess.run(["podman", "ps", "-aq", "--filter",
                               "label=io.podman.compose.project=ett"],
                              capture_output=True, text=True, check=True).stdout
        assert not left.strip(), f"containers left running: {left}"


def _post(events: list[dict]) -> None:
    r = httpx.post(API + "/v1/events", json={"events": events},
                   headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert r.status_code == 202, r.text
    assert r.json()["accepted"] == len(events), r.text


def _query(expr: str) -> list[dict]:
    r = httpx.get(PROMETHEUS + "/api/v1/query", params={"query": expr}, timeout=10)
    r.raise_for_status()
    return r.json()["data"]["result"]


def _value(expr: str) -> float | None:
    result = _query(expr)
    return float(result[0]["value"][1]) if result else None


def _wait(what: str, predicate, timeout_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if predicate():
            return time.monotonic() - start
        time.sleep(2)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")


def _jobs_up() -> set[str]:
    targets = httpx.get(PROMETHEUS + "/api/v1/targets", timeout=10).json()["data"]
    return {t["labels"]["job"] for t in targets["activeTargets"] if t["health"] == "up"}


def _regressed_job(base: datetime) -> list[dict]:
    """One more 8-GPU job of the same model: 50 of its 60 held minutes compiling."""
    e = lambda t, m, **kw: event(t, m, job_id="smoke-regressed", model=MODEL, base=base,  # noqa: E731
                                 **kw)
    return [
        e("allocated", 0, gpus=8, team=TEAM),
        e("phase_start", 0, phase="compilation"), e("phase_end", 50, phase="compilation"),
        e("phase_start", 50, phase="training"), e("phase_end", 60, phase="training"),
        e("released", 60, attrs={"reason": "completed"}),
    ]


def _compiler_pages() -> list[dict]:
    received = httpx.get(SINK + "/received", timeout=5).json()
    return [a for n in received if n["path"] == "/hooks/compiler"
            for a in n["body"]["alerts"]
            if a["labels"].get("slo") == "compilation-share" and a["status"] == "firing"]


def test_the_stack_scrapes_the_fleet_and_pages_the_owning_team(stack) -> None:
    now = datetime.now(UTC).replace(microsecond=0)
    # docs/model.md section 6, worked by hand: held 160 minutes, of which effective 90
    # and compilation 15, on 8 GPUs.
    _post(spec_example(job_id="smoke-spec", model=MODEL, base=now - timedelta(hours=4)))
    held = f'ett_held_gpu_seconds_total{{model="{MODEL}",team="{TEAM}"}}'
    first_series = _wait("the first ETT series in Prometheus",
                         lambda: _value(held) is not None, 180)
    assert _value(held) == 160 * GPU_MIN
    settled = f'sum by (component) (ett_settled_gpu_seconds_total{{model="{MODEL}"}})'
    by_component = {r["metric"]["component"]: float(r["value"][1]) for r in _query(settled)}
    assert by_component["effective_training"] == 90 * GPU_MIN
    assert by_component["compilation"] == 15 * GPU_MIN
    assert sum(by_component.values()) == 160 * GPU_MIN
    # The API replicas are found by DNS every 30s (deploy/compose/prometheus.yml).
    _wait("both ETT scrape jobs up", lambda: _jobs_up() >= {"ett-api", "ett-aggregator"}, 90)

    # The regression: the next job of the model spends most of its time compiling. The
    # counters' increase is what the burn-rate rules read.
    injected = time.monotonic()
    _post(_regressed_job(now - timedelta(hours=2)))
    _wait("the regressed job in the counters",
          lambda: _value(held) == (160 + 60) * GPU_MIN, 180)
    firing = ('ALERTS{alertname="EttComponentBudgetBurn",slo="compilation-share",'
              'alertstate="firing"}')
    _wait("the compilation-share alert to fire", lambda: _query(firing), 180)
    _wait("the compiler team's webhook to receive it", _compiler_pages, 180)
    delivered = time.monotonic() - injected
    page = _compiler_pages()[0]
    assert page["labels"]["team"] == "compiler"
    assert page["labels"]["severity"] == "page"
    assert page["labels"]["model"] == MODEL
    assert page["annotations"]["runbook_url"].endswith("EttComponentBudgetBurn.md")

    timings = {**stack, "first_scraped_series": first_series, "alert_delivered": delivered}
    print("compose smoke timings (s): "
          + ", ".join(f"{k}={v:.1f}" for k, v in timings.items()))
