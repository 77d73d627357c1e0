"""Every PromQL expression of every dashboard panel returns data from a real Prometheus
that scraped the service loaded with `ett demo` data (and evaluated the production rules,
whose recording rules some panels read)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dashboards.queries import all_promql
from service.demo.fleet import Regression
from service.demo.poster import DemoOptions, run_demo
from tests.conftest import REPO
from tests.e2e.stack import ALERTMANAGER, PROMETHEUS, WebhookSink, alertmanager, prometheus, query

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (PROMETHEUS and ALERTMANAGER),
                       reason="needs Debian's prometheus and prometheus-alertmanager"),
]

RULES = REPO / "deploy" / "prometheus" / "rules"
# A team variable names a model team (ads) on some panels and an owning team (compiler,
# reliability) on others: each panel query must return data for at least one of them.
VARIABLES = [{"team": team, "model": "ads_ctr_000"}
             for team in ("ads", "compiler", "reliability", "checkpointing")]


def test_every_dashboard_promql_returns_data(service_factory, tmp_path: Path) -> None:
    svc = service_factory(extra_env={"ETT_AGGREGATE_INTERVAL_S": "2"})
    stop = threading.Event()
    # A fast fleet with plenty of restarts, so failure and recovery panels have data too.
    # A compilation regression makes the compiler team's SLO burn, so the panels that show
    # firing alerts and burn rates have something to show.
    opts = DemoOptions(days=0.05, live=True, seed=5, models=12, time_scale=360,
                       regressions=(Regression.parse("compilation=40x:ads"),))
    demo = threading.Thread(target=run_demo, args=(svc.url, svc.token, opts, stop), daemon=True)
    demo.start()
    sink = WebhookSink()
    am_config = tmp_path / "am.yml"
    am_config.write_text(
        "route: {receiver: sink}\n"
        f"receivers: [{{name: sink, webhook_configs: [{{url: '{sink.url}/sink'}}]}}]\n"
    )
    try:
        with alertmanager(am_config, tmp_path) as am_url, \
                prometheus([svc.url.removeprefix("http://")], RULES, am_url, tmp_path) as p:
            prom = p.url
            # Position i is the same panel target under every variable set.
            targets = list(zip(*(all_promql(v) for v in VARIABLES), strict=True))
            assert targets
            deadline = time.monotonic() + 150
            empty = targets
            while empty and time.monotonic() < deadline:
                time.sleep(5)
                empty = [t for t in empty if not any(query(prom, expr) for _, _, expr in t)]
            assert not empty, "panels without data:\n" + "\n".join(
                f"{t[0][0]} / {t[0][1]}: {t[0][2]}" for t in empty)
            # And every raw metric a panel names is in the service's own exposition.
            exposed = {s.name for f in text_string_to_metric_families(
                httpx.get(svc.url + "/metrics", timeout=10).text) for s in f.samples}
            named = {m for t in targets for _, _, expr in t
                     for m in re.findall(r"\b(ett_[a-z0-9_]+)\b(?!:)", expr)}
            assert named and named <= exposed, sorted(named - exposed)
    finally:
        stop.set()
        demo.join(timeout=30)
        sink.close()
