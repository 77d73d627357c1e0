"""The control loop end to end: a demo fleet whose `ads` models regress in compilation,
the service's /metrics scraped by a real Prometheus evaluating the generated rules
(windows shortened by the generator), and a real Alertmanager delivering to per-team
webhook sinks. The compiler team is paged; nobody else hears anything; clearing the
regression resolves it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import httpx
import pytest

from service.demo.fleet import Regression
from service.demo.poster import DemoOptions, run_demo
from tests.conftest import REPO
from tests.e2e.stack import ALERTMANAGER, PROMETHEUS, WebhookSink, alertmanager, prometheus, query

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (PROMETHEUS and ALERTMANAGER),
                       reason="needs Debian's prometheus and prometheus-alertmanager"),
]

SCALE = 360  # the simulated fleet runs 360x faster than real time; so do the alert windows


def _ett(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "service.cli", *args], cwd=REPO, check=True,
                   capture_output=True)


def _demo(service, stop: threading.Event, seed: int, regress: tuple[Regression, ...],
          days: float, backfilled: threading.Event | None = None,
          lift: threading.Event | None = None) -> threading.Thread:
    # No interruptions: durations shrink 360x but failures per GPU-hour would not, so any
    # failure would burn the failure-rate SLO (reliability) for real.
    opts = DemoOptions(days=days, live=True, seed=seed, models=36, regressions=regress,
                       time_scale=SCALE, failure_rate_per_hour=0.0, lift_regressions=lift)
    thread = threading.Thread(target=run_demo,
                              args=(service.url, service.token, opts, stop, backfilled),
                              daemon=True)
    thread.start()
    return thread


def _wait(predicate, timeout_s: float, what: str, sink: WebhookSink) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(1)
    raise AssertionError(f"timed out waiting for {what}; received: {sink.received}")


def _others(sink: WebhookSink) -> list[tuple[str, str, str]]:
    """(team, alertname, slo) of every notification for another component's team.

    Not the fleet's own SLO (`fleet-ett`, its owner's): a compilation regression large
    enough to page the compiler team also takes fleet ETT down, and whether that crosses
    the fleet's page threshold too is a race between two true alerts (a CI run saw the
    fleet's fire while the test checked; docs/alerts.md, "Which model regressed, and who
    is paged")."""
    return sorted({(team, a["labels"].get("alertname", ""), a["labels"].get("slo", ""))
                   for team, body in sink.received if team != "compiler"
                   for a in body["alerts"] if a["labels"].get("slo") != "fleet-ett"})


def _compilation_alerts(sink: WebhookSink, status: str) -> list[dict]:
    return [a for a in sink.alerts("compiler")
            if a["labels"].get("slo") == "compilation-share" and a["status"] == status]


def test_a_compilation_regression_pages_the_compiler_team_no_other_component_and_resolves(
        service_factory, tmp_path) -> None:
    # A long heartbeat timeout: the regressed fleet's jobs, silenced when the regression is
    # cleared, must not turn into lost attempts (failures: reliability's SLO) mid-test.
    svc = service_factory(extra_env={"ETT_AGGREGATE_INTERVAL_S": "2",
                                     "ETT_HEARTBEAT_TIMEOUT_S": "7200"})
    sink = WebhookSink()
    rules = tmp_path / "rules"
    rules.mkdir()
    am_config = tmp_path / "alertmanager.yml"
    _ett("alertmanager-config", "--webhook-base", sink.url, "--timing-scale", "0.02",
         "--out", str(am_config))

    stop, backfilled, fixed = threading.Event(), threading.Event(), threading.Event()
    fleet = _demo(svc, stop, seed=11, regress=(Regression.parse("compilation=25x:ads"),),
                  days=0.02, backfilled=backfilled, lift=fixed)
    # Prometheus starts once the history is in and aggregated: while a back-fill streams
    # in, some of its time is settled before the rest (checkpoints arrive later), and
    # short alert windows would read that skew as a burn.
    assert backfilled.wait(180), "the demo back-fill did not finish"
    httpx.post(svc.url + "/v1/aggregate", headers=svc.headers(), timeout=120).raise_for_status()
    target = svc.url.removeprefix("http://")
    try:
        with alertmanager(am_config, tmp_path) as am_url, \
                prometheus([target], rules, am_url, tmp_path) as prom:
            # Rules are loaded only once Prometheus holds more than the shortest alert
            # window of live data, as in any running deployment: windows filled by a few
            # seconds of scrapes would read the start-up transient as a burn.
            time.sleep(75)
            _ett("rules", "--window-scale", str(1 / SCALE), "--min-window", "60s",
                 "--out-dir", str(rules))
            prom.reload()
            prom_url = prom.url
            _wait(lambda: _compilation_alerts(sink, "firing"), 300,
                  "the compiler team's compilation alert", sink)
            share = query(prom_url, 'sum(rate(ett_settled_gpu_seconds_total'
                                    '{component="compilation"}[1m]))'
                                    ' / sum(rate(ett_held_gpu_seconds_total[1m]))')
            assert float(share[0]["value"][1]) > 0.03
            # The alert names the regressing models' team. (A model of another team can
            # be named too while its job starts: the short test windows then hold its
            # compilation but not yet its training, which settles at the first checkpoint.)
            _wait(lambda: any(a["labels"].get("model_team") == "ads"
                              for a in _compilation_alerts(sink, "firing")), 120,
                  "a compilation alert naming the ads models", sink)
            firing = _compilation_alerts(sink, "firing")[0]
            assert firing["labels"]["team"] == "compiler"
            assert firing["annotations"]["runbook_url"].endswith("EttComponentBudgetBurn.md")
            assert not _others(sink)

            # The fix rolls out: jobs started from now on compile as fast as before. (Not a
            # new fleet in place of the old one: 36 jobs starting at once, and the old
            # jobs' unsettled training never settling, are a real dip in fleet ETT.)
            fixed.set()
            _wait(lambda: _compilation_alerts(sink, "resolved"), 420,
                  "the compilation alert to resolve", sink)
            assert not _others(sink)
            assert "compiler" in sink.teams()
    finally:
        stop.set()
        fleet.join(timeout=30)
        sink.close()
