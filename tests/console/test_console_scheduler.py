"""The job page for an attempt the scheduler reported: its span above the lane, the
trainer's below, the gaps only the scheduler saw dotted, queue and unreported time shown
as the API gives them (docs/model.md section 25, the worked example)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from fastapi.testclient import TestClient

from tests.console.console_helpers import Figures, as_number, post_all
from tests.factories import event, ts


def test_the_scheduler_span_and_its_gaps_are_drawn(api: TestClient, browser: TestClient) -> None:
    base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=4)

    def ev(kind: str, minute: float, attempt: int = 0, scheduler: bool = False, **fields):
        attrs = fields.pop("attrs", {})
        if scheduler:
            attrs = {"source": "scheduler", **attrs}
        return event(kind, minute, job_id="slurm:c:9", model="llama", attempt=attempt,
                     base=base, **({"attrs": attrs} if attrs else {}), **fields)

    post_all(api, [
        ev("allocated", 0, scheduler=True, gpus=8, attrs={"queued_at": ts(-10, base)}),
        ev("allocated", 3, gpus=8), ev("phase_start", 3, phase="launcher_init"),
        ev("phase_end", 8, phase="launcher_init"), ev("phase_start", 8, phase="training"),
        ev("heartbeat", 34),
        ev("released", 50, scheduler=True, attrs={"reason": "failed"}),
        ev("allocated", 55, 1, scheduler=True, gpus=8, attrs={"queued_at": ts(50, base)}),
        ev("allocated", 57, 1, gpus=8), ev("phase_start", 57, 1, phase="training"),
        ev("phase_end", 100, 1, phase="training"),
        ev("released", 100, 1, attrs={"reason": "completed"}),
        ev("released", 102, 1, scheduler=True, attrs={"reason": "completed"}),
    ])
    api.post("/v1/aggregate")
    job = api.get("/v1/jobs/slurm:c:9").json()
    assert job["queue_seconds"] == 15 * 60 and job["unreported_seconds"] == 16 * 60
    page = browser.get("/ui/jobs/slurm:c:9")
    assert page.status_code == 200
    f = Figures(page.text)
    assert as_number(f.field("queue_seconds")) == job["queue_seconds"]
    assert as_number(f.field("unreported_seconds")) == job["unreported_seconds"]
    lane0, lane1 = page.text.split('class="lane" data-attempt="1"', 1)
    for lane, gaps in ((lane0, ("hardware_setup", "unreported")),
                       (lane1.split("</svg>")[0], ("hardware_setup", "teardown"))):
        assert lane.count('class="span scheduler"') == 1
        assert lane.count('class="span trainer"') == 1
        for phase in gaps:
            assert f'class="gap-shade" data-phase="{phase}"' in lane, phase
