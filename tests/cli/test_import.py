"""`ett import`: the backfill path. An NDJSON file's events go through POST /v1/events of
the real app (on the real test database) with an admin token: older than the ingest
window, in batches; a bad line is reported by number and the others are stored; a batch
whose answer was lost is sent again and counts its events once."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import orjson
import pytest
from sqlalchemy import text

from service.cli.history import ImportRefused, import_events
from tests.cli.test_first_run import ett, one_line_error


def _event(job: str, ts: datetime, etype: str, **extra) -> dict:
    return {"event_id": str(uuid.uuid4()), "ts": ts.isoformat(), "job_id": job, "attempt": 0,
            "model": "backfilled", "type": etype, **extra}


def _stored(engine, job: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM events WHERE job_id = :j"),
                            {"j": job}).scalar_one()


def _file(*lines: bytes | dict) -> io.BytesIO:
    return io.BytesIO(b"\n".join(line if isinstance(line, bytes) else orjson.dumps(line)
                                 for line in lines) + b"\n")


def test_a_month_old_job_is_imported_and_each_bad_line_is_named(api, db_engine) -> None:
    start = datetime.now(UTC) - timedelta(days=30)
    good = [_event("old-job", start, "allocated", gpus=8),
            _event("old-job", start + timedelta(seconds=10), "phase_start", phase="training"),
            _event("old-job", start + timedelta(hours=2), "phase_end", phase="training"),
            _event("old-job", start + timedelta(hours=2, seconds=5), "released")]
    no_id = {k: v for k, v in _event("old-job", start, "heartbeat").items() if k != "event_id"}
    source = _file(good[0], b"", b"{not json", good[1], b"[1, 2]", no_id, good[2], good[3])
    err = io.StringIO()
    summary = import_events(source, api, batch_events=2, err=err)
    assert (summary.lines, summary.accepted, summary.duplicates) == (8, 4, 0)
    assert [n for n, _ in summary.rejected] == [3, 5, 6]
    messages = err.getvalue().splitlines()
    assert messages[0].startswith("line 3: not valid JSON")
    assert messages[1] == "line 5: must be a JSON object (one v1 event)"
    assert messages[2].startswith("line 6: event_id")
    assert _stored(db_engine, "old-job") == 4
    # Run again (an interrupted import is simply re-run): every event is a duplicate.
    again = import_events(_file(*good), api, err=io.StringIO())
    assert (again.accepted, again.duplicates, again.rejected) == (0, 4, [])
    assert _stored(db_engine, "old-job") == 4


def test_a_batch_whose_answer_was_lost_is_retried_and_stored_once(api, db_engine,
                                                                  monkeypatch) -> None:
    monkeypatch.setattr("service.cli.history.time.sleep", lambda _s: None)
    real, lost = api._transport.handle_request, []

    def loses_the_first_answer(request: httpx.Request) -> httpx.Response:
        response = real(request)  # the app has stored the events
        if not lost:
            lost.append(response.read())
            raise httpx.ReadError("connection reset", request=request)
        return response

    monkeypatch.setattr(api._transport, "handle_request", loses_the_first_answer)
    start = datetime.now(UTC) - timedelta(days=20)
    events = [_event("retried", start + timedelta(minutes=i), "heartbeat") for i in range(5)]
    err = io.StringIO()
    summary = import_events(_file(*events), api, err=err)
    assert orjson.loads(lost[0])["accepted"] == 5 and "ReadError" in err.getvalue()
    assert (summary.accepted, summary.duplicates, summary.rejected) == (0, 5, [])
    assert _stored(db_engine, "retried") == 5


def test_a_token_the_service_refuses_stops_the_import(api) -> None:
    api.headers["Authorization"] = "Bearer not-a-token"
    event = _event("refused", datetime.now(UTC) - timedelta(days=9), "heartbeat")
    with pytest.raises(ImportRefused, match="HTTP 401"):
        import_events(_file(event), api, err=io.StringIO())


def test_without_a_url_or_token_the_command_says_what_to_give(tmp_path) -> None:
    (tmp_path / "events.ndjson").write_text("{}\n")
    line = one_line_error(ett("import", "events.ndjson", cwd=tmp_path))
    assert line.startswith("ett import: give the service's URL (--url or ETT_URL)")
