"""Hints on answers that are empty because nothing matched the filters.

A zero that comes from a misspelt model reads like a fleet that did nothing; the `note`
says which filter matched nothing and what the known values are. Answers that are empty
for a real reason (a quiet window) keep the contract's zeros and carry a note too.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Connection

from service.store import queries as q

MAX_LISTED = 20
RETENTION = timedelta(days=400)


def _listing(values: list[str]) -> str:
    shown = ", ".join(values[:MAX_LISTED])
    more = len(values) - MAX_LISTED
    return shown + (f" and {more} more" if more > 0 else "") if values else "none yet"


def ett_note(conn: Connection, model: str | None, team: str | None,
             start: datetime | None = None, end: datetime | None = None) -> str:
    """Why a /v1/ett answer held nothing: an unknown filter value, a team that owns phases
    but runs no models (its question is its bill), or a quiet window."""
    pairs = q.models_and_teams(conn)
    models = sorted({m for m, _ in pairs})
    teams = sorted({t for _, t in pairs})
    if model is not None and model not in models:
        return f"no jobs matched model={model}; known models: {_listing(models)}"
    if team is not None and team not in teams and start is not None and end is not None:
        owners = {row["owner"] for row in q.window_rows(conn, start - RETENTION,
                                                         end + RETENTION, ["owner"])}
        if team in owners:
            return (f"team {team} runs no models, so no jobs matched team={team}; it owns"
                    f" phases of other teams' jobs, and the time it costs them is its bill:"
                    f" `ett report --team {team} --bill` (GET /v1/teams/{team}/bill)")
    if team is not None and team not in teams:
        return (f"no jobs matched team={team}; known teams: {_listing(teams)} (a job posted"
                " without `team` is under `unassigned` unless the taxonomy's `models:` names"
                " its team)")
    if model is not None and team is not None and (model, team) not in pairs:
        return f"model {model} does not belong to team {team}"
    return ("nothing was held in this window by the jobs that matched (jobs posted since the"
            " last aggregation pass are not counted yet: `ett aggregate` runs one)")


def bill_note(conn: Connection, team: str, start: datetime, end: datetime) -> str:
    """Why a team's bill is empty: the team owns nothing anywhere, or not in this window."""
    # Owners over the retention horizon around the window, not only the window: a team that
    # owned time last month is known, and its empty week is a fact, not a typo.
    rows = q.window_rows(conn, start - RETENTION, end + RETENTION, ["owner"])
    owners = sorted({row["owner"] for row in rows})
    teams = sorted({t for _, t in q.models_and_teams(conn)} | set(owners))
    if team not in teams:
        return f"no time is owned by team {team}; known teams and owners: {_listing(teams)}"
    return f"team {team} owns no lost time in this window"
