"""`ett impact`, `ett whatif` and `ett annotate` against a real `ett serve`."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import httpx
import pytest

from tests.conftest import REPO
from tests.factories import faster_recovery, labelled, spec_example

MIN = 60.0


def ett(service, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", *args, "--url", service.url,
                           "--token", service.token], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def experiment(service) -> str:
    """Two labelled jobs of a fresh experiment on the shared service, aggregated."""
    name = f"cli-{uuid.uuid4().hex[:8]}"
    events = (labelled(spec_example(f"{name}-b"), variant="baseline", experiment=name)
              + labelled(faster_recovery(f"{name}-c"), variant="optimized", experiment=name))
    with httpx.Client(base_url=service.url, headers=service.headers()) as client:
        assert client.post("/v1/events", json={"events": events}).status_code == 202
        client.post("/v1/aggregate").raise_for_status()
    return name


WINDOW = ("--baseline-start", "2026-10-31T00:00:00Z", "--baseline-end", "2026-11-21T00:00:00Z")


def test_ett_impact_prints_a_table_and_the_document(service, experiment) -> None:
    labels = ("--baseline-label", f"experiment:{experiment}", "--baseline-label",
              "variant:baseline", "--candidate-label", f"experiment:{experiment}",
              "--candidate-label", "variant:optimized")
    out = ett(service, "impact", *WINDOW, *labels, "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["baseline"]["jobs"], doc["candidate"]["jobs"]) == (1, 1)
    assert doc["delta_ett_pp"] == pytest.approx(2.5)  # 90 -> 94 of 160 minutes
    table = ett(service, "impact", *WINDOW, *labels)
    assert table.returncode == 0, table.stderr
    assert "ETT change: +2.50 points" in table.stdout
    assert "compilation" in table.stdout and "recovery share" in table.stdout


def test_ett_whatif_and_a_bad_selector(service, experiment) -> None:
    out = ett(service, "whatif", "--component", "compilation", "--reduction", "0.5",
              "--start", "2026-10-31T00:00:00Z", "--end", "2026-11-21T00:00:00Z",
              "--label", f"experiment:{experiment}", "--label", "variant:baseline", "--json")
    assert out.returncode == 0, out.stderr
    # compilation 10 + 5 min on 8 GPUs: direct 0.5 * 80 GPU-min, cascade 0.5 * 120
    assert json.loads(out.stdout)["gpu_seconds_saved"] == {"direct": 40 * MIN,
                                                           "cascade": 60 * MIN}
    bad = ett(service, "impact", "--baseline-label", "nocolon")
    assert bad.returncode == 1
    assert "422 baseline_label: expected key:value" in bad.stderr


def test_ett_annotate_posts_a_marker_the_api_lists(service) -> None:
    tag = f"t{uuid.uuid4().hex[:8]}"
    out = ett(service, "annotate", "compile cache on", "--ts", "2026-11-05T00:00:00Z",
              "--models", "ads_*,feed_*", "--tag", tag)
    assert out.returncode == 0, out.stderr
    note = int(out.stdout.split()[-1])
    listed = httpx.get(service.url + "/v1/annotations", headers=service.headers(),
                       params={"start": "2026-11-01T00:00:00Z", "end": "2026-11-10T00:00:00Z",
                               "tag": tag}).json()["annotations"]
    assert [(a["id"], a["models"]) for a in listed] == [(note, ["ads_*", "feed_*"])]


def _demo(service, scenario: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.cli", "demo", "--scenario", scenario,
                           "--url", service.url, "--token", service.token], cwd=REPO,
                          capture_output=True, text=True, timeout=600)


def test_ett_demo_paired_posts_the_twelve_labelled_runs(service) -> None:
    out = _demo(service, "paired")
    assert out.returncode == 0, out.stderr
    assert "rejected=0" in out.stdout
    headers = service.headers()
    httpx.post(service.url + "/v1/aggregate", headers=headers, timeout=120).raise_for_status()
    doc = httpx.get(service.url + "/v1/impact", headers=headers, timeout=30, params={
        "model": "paired_*", "baseline_label": "variant:baseline",
        "candidate_label": "variant:optimized"}).json()
    assert (doc["baseline"]["jobs"], doc["candidate"]["jobs"]) == (6, 6)
    assert doc["delta_ett_pp"] == pytest.approx(24.8, abs=0.05)  # docs/impact.md's table


@pytest.mark.slow
def test_ett_demo_rollout_annotates_each_change(service) -> None:
    out = _demo(service, "rollout")
    assert out.returncode == 0, out.stderr
    notes = [int(line.split()[1].rstrip(":")) for line in out.stdout.splitlines()
             if line.startswith("annotation ")]
    assert len(notes) == 5
    headers = service.headers()
    httpx.post(service.url + "/v1/aggregate", headers=headers, timeout=600).raise_for_status()
    gains = [httpx.get(service.url + "/v1/impact", headers=headers, timeout=30,
                       params={"around": n, "days": 7, "model": "rollout_*"}).json()
             ["delta_ett_pp"] for n in notes]
    assert all(g > 0 for g in gains), gains


def test_ett_demo_worked_example_prints_docs_model_figures(service) -> None:
    """docs/model.md section 6 posted, aggregated and read back: anyone can check it."""
    out = _demo(service, "worked-example")
    assert out.returncode == 0, out.stderr
    assert "ETT 0.5625 (56.25 %), held 160 min" in out.stdout, out.stdout
    for part in ("scheduling 2", "initialization 16", "compilation 15", "wasted_training 30",
                 "unattributed 2", "shutdown 5", "effective_training 90"):
        assert part in out.stdout, out.stdout
    again = _demo(service, "worked-example")  # a rerun posts the same events
    assert "accepted=0 duplicates=" in again.stdout, again.stdout


def test_ett_impact_says_why_a_comparison_is_empty(service) -> None:
    out = ett(service, "impact", "--model", "no_such_model_*", "--baseline-label",
              "variant:baseline", "--candidate-label", "variant:optimized")
    assert out.returncode == 1 and out.stdout == ""
    line = out.stderr.strip()
    assert len(line.splitlines()) == 1, out.stderr
    assert line.startswith("ett impact: no ended job matched the baseline (--model"
                           " no_such_model_* --baseline-label variant:baseline"), line
    assert "and the candidate (" in line and "`ett aggregate`" in line
    whatif = ett(service, "whatif", "--component", "compilation", "--reduction", "0.5",
                 "--model", "no_such_model_*")
    assert whatif.returncode == 1
    assert whatif.stderr.startswith("ett whatif: no ended job matched the cohort"), whatif.stderr
