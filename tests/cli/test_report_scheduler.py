"""`ett report --job` for a job the scheduler reported: whose instants bound each attempt,
whether a trainer reported it, its queue time, and the job's unreported share."""

from __future__ import annotations

from service.cli import main
from tests.factories import event, ts


def sched(type_: str, minutes: float, **fields):
    return event(type_, minutes, attrs={"source": "scheduler", **fields.pop("attrs", {})},
                 **fields)


def test_the_job_report_shows_the_schedulers_word(api, database_url, monkeypatch,
                                                  capsys) -> None:
    monkeypatch.setenv("ETT_DATABASE_URL", database_url)
    monkeypatch.setenv("ETT_LOG_LEVEL", "warning")
    monkeypatch.setenv("COLUMNS", "120")
    body = api.post("/v1/events", json={"events": [
        sched("allocated", 0, job_id="s9", gpus=8, attrs={"queued_at": ts(-10)}),
        event("allocated", 3, job_id="s9", gpus=8),
        event("phase_start", 3, job_id="s9", phase="training"),
        event("heartbeat", 34, job_id="s9"),
        sched("released", 50, job_id="s9", attrs={"reason": "failed"}),
        sched("allocated", 55, job_id="s9", attempt=1, gpus=8, attrs={"queued_at": ts(50)}),
        sched("released", 60, job_id="s9", attempt=1, attrs={"reason": "cancelled"}),
    ]}).json()
    assert body["rejected"] == []
    assert api.post("/v1/aggregate").status_code == 200
    assert main(["report", "--job", "s9"]) == 0
    out = capsys.readouterr().out
    section = out.split("the scheduler's word", 1)[1].split("where the held time went")[0]
    table = [[c for c in line.split("  ") if c.strip()] for line in section.splitlines()
             if line.strip().startswith(("0 ", "1 ", "job "))]
    # attempt 0: 10 min queued; attempt 1 (nobody reported it): 5 min; the job's unreported
    # time is 16 (34-50) + 5 (attempt 1, all of it) of 55 held minutes: 38.2%.
    assert [[c.strip() for c in r] for r in table] == [
        ["0", "scheduler", "reported", "10.0 min"],
        ["1", "scheduler", "none (uninstrumented)", "5.0 min"],
        ["job", "15.0 min", "38.2%"]], out

