"""What the console tests share: reading figures back out of a page, a demo fleet that
ends now, and signing in."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser
from typing import Any

from service.demo.fleet import FleetSpec, fleet_events
from tests.conftest import ADMIN_TOKEN


class Figures(HTMLParser):
    """Every element's attributes, in document order (the pages write raw figures into
    data-value attributes beside the rounded text)."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def field(self, name: str, key: str | None = None) -> str:
        hits = [a["data-value"] for _, a in self.elements
                if a.get("data-field") == name and (key is None or a.get("data-key") == key)]
        assert hits, f"no data-field={name!r} key={key!r} in the page"
        return hits[0]  # type: ignore[return-value]

    def rows(self, table_class: str) -> list[dict[str, str | None]]:
        """The <tr> elements with data-key after the table of that class (one level)."""
        out, inside = [], False
        for tag, attrs in self.elements:
            if tag == "table":
                inside = table_class in (attrs.get("class") or "").split()
            elif inside and tag == "tr" and "data-key" in attrs:
                out.append(attrs)
        return out

    def cells(self, table_class: str, field: str) -> dict[str, str]:
        """data-key of each row -> the data-value of its cell with data-field."""
        out, inside, key = {}, False, None
        for tag, attrs in self.elements:
            if tag == "table":
                inside = table_class in (attrs.get("class") or "").split()
            elif inside and tag == "tr":
                key = attrs.get("data-key")
            elif inside and key is not None and attrs.get("data-field") == field:
                out[key] = attrs["data-value"]
        return out

    def window(self) -> tuple[str, str]:
        span = next(a for _, a in self.elements if "data-start" in a)
        return span["data-start"], span["data-end"]  # type: ignore[return-value]


def as_number(text: str) -> float | None:
    return None if text == "None" else float(text)


def fleet_until_now(models: int = 6, hours: float = 30, seed: int = 5,
                    now: datetime | None = None,
                    failure_rate_per_hour: float | None = None) -> list[dict[str, Any]]:
    """The simulated fleet over the last `hours`, up to now (so the default windows hold it)."""
    now = now or datetime.now(UTC)
    start = now - timedelta(hours=hours)
    cut = (now - timedelta(minutes=1)).timestamp()
    spec = FleetSpec(models=models, seed=seed)
    if failure_rate_per_hour is not None:  # more interruptions: enough for checkpoint advice
        spec = FleetSpec(models=models, seed=seed, failure_rate_per_hour=failure_rate_per_hour)
    return [ev for _, ev in itertools.takewhile(lambda x: x[0] < cut, fleet_events(spec, start))]


def post_all(client: Any, events: list[dict[str, Any]], headers: dict | None = None,
             size: int = 2000) -> None:
    for i in range(0, len(events), size):
        r = client.post("/v1/events", json={"events": events[i:i + size]},
                        headers=headers or {})
        assert r.status_code == 202 and not r.json()["rejected"], r.text


def first_job(job_id: str, base: datetime, minute: float) -> list[dict[str, Any]]:
    """The README snippet's job, its phases `minute` long units apart: compilation 0-40,
    training 40-140, released at 150 (with minute = 1 ms: a 150 ms job)."""
    from tests.factories import event

    def e(kind: str, at: float, **kw: Any) -> dict[str, Any]:
        return event(kind, at * minute, job_id=job_id, model="my_model", base=base, **kw)

    return [e("allocated", 0, gpus=8, team="my-team"),
            e("phase_start", 0, phase="compilation"), e("phase_end", 40, phase="compilation"),
            e("phase_start", 40, phase="training"), e("phase_end", 140, phase="training"),
            e("released", 150, attrs={"reason": "completed"})]


def sign_in(client: Any, token: str = ADMIN_TOKEN) -> Any:
    """Post the sign-in form with `token`: a 303 to the console when it is accepted."""
    return client.post("/ui/login", data={"token": token, "next": "/ui/"},
                       follow_redirects=False)
