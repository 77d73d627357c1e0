"""The scheduler's events: only an adapter (or admin) token may send them, and a scheduler's
model/team mapping never makes the trainer's events fail (docs/model.md, "One job, two
writers"; docs/security.md)."""

from __future__ import annotations

from fastapi.testclient import TestClient

from service.api.app import create_app
from service.api.context import build_context
from service.settings import Settings
from tests import factories
from tests.access.access_helpers import RECENT, event, post, token
from tests.conftest import ADMIN_TOKEN

ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def ts(minutes: float) -> str:
    """Within the ingest window: adapters and writers may send nothing older."""
    return factories.ts(minutes, RECENT)


def sched(type_: str, minutes: float, **fields):
    attrs = {"source": "scheduler", **fields.pop("attrs", {})}
    return event(type_, minutes, attrs=attrs, **fields)


def test_a_writer_may_not_speak_for_the_scheduler(client, db_engine) -> None:
    writer = token(db_engine, "writer", "llm", ("llama*",))
    r = post(client, writer, [sched("allocated", 0, job_id="j", model="llama", gpus=8)])
    assert r.status_code == 403, r.text
    assert "only an adapter or admin token may send scheduler events" in r.text


def test_an_adapter_sends_scheduler_events_for_any_model_and_nothing_else(client,
                                                                        db_engine) -> None:
    adapter = token(db_engine, "adapter")
    ok = post(client, adapter, [sched("allocated", 0, job_id="s1", model="anything", gpus=2,
                                      attrs={"queued_at": ts(-3)})])
    assert ok.status_code == 202 and ok.json()["accepted"] == 1, ok.text
    r = post(client, adapter, [event("heartbeat", 1, job_id="s1", model="anything")])
    assert r.status_code == 403 and "may not write model 'anything'" in r.text


def test_bad_scheduler_attrs_are_named(client, db_engine) -> None:
    adapter = token(db_engine, "adapter")
    body = post(client, adapter, [
        sched("heartbeat", 0, job_id="s2", model="m"),
        sched("allocated", 0, job_id="s2", model="m", gpus=1, attrs={"queued_at": "soon"}),
        event("allocated", 0, job_id="s2", model="m", gpus=1, attrs={"source": "slurm"}),
    ]).json()
    errors = [x["error"] for x in body["rejected"]]
    assert "a scheduler sends only" in errors[0]
    assert errors[1].startswith("attrs.queued_at")
    assert errors[2].startswith("attrs.source: must be 'scheduler'")


def test_a_mapping_mismatch_keeps_both_sides_and_shows_the_conflict(db_engine) -> None:
    settings = Settings(database_url="postgresql://unused", admin_token=ADMIN_TOKEN)
    ctx = build_context(settings, db_engine)
    with TestClient(create_app(ctx)) as client:
        _mismatch(client, db_engine)


def _mismatch(client, db_engine) -> None:
    adapter = token(db_engine, "adapter")
    writer = token(db_engine, "writer", "llm", ("llama*",))
    # The prolog comes first with its mapping (the job name), then the trainer names its own.
    assert post(client, adapter, [sched("allocated", 0, job_id="slurm:c:7", model="train-run",
                                        team="ops", gpus=8)]).json()["accepted"] == 1
    trainer = [event("allocated", 1, job_id="slurm:c:7", model="llama-70b", gpus=8,
                     team="llm"),
               event("phase_start", 2, job_id="slurm:c:7", model="llama-70b",
                     phase="training"),
               event("phase_end", 20, job_id="slurm:c:7", model="llama-70b", phase="training"),
               event("released", 20, job_id="slurm:c:7", model="llama-70b",
                     attrs={"reason": "completed"})]
    assert post(client, writer, trainer).json()["accepted"] == 4
    # The epilog after the trainer: still the scheduler's mapping, still accepted.
    assert post(client, adapter, [sched("released", 21, job_id="slurm:c:7", model="train-run",
                                        team="ops", attrs={"reason": "completed"})]
                ).json()["accepted"] == 1
    assert client.post("/v1/aggregate", headers=ADMIN).status_code == 200
    job = client.get("/v1/jobs/slurm:c:7", headers=ADMIN).json()
    assert (job["model"], job["team"]) == ("llama-70b", "llm")
    assert job["held_seconds"] == 21 * 60
    assert job["phases"]["hardware_setup"] == 60 and job["phases"]["teardown"] == 60
    assert job["diagnostics"]["mapping_conflicts"] == [
        "scheduler model 'train-run' (job: 'llama-70b')", "scheduler team 'ops' (job: 'llm')"]
    # A trainer's later event of another model is still refused: the trainer's claim binds.
    hostile = post(client, ADMIN, [event("heartbeat", 5, job_id="slurm:c:7", model="other")])
    assert hostile.json()["rejected"]
