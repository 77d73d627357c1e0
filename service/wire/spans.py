"""Spans -> v1 events: what `POST /v1/traces` stores, through the same validation as
`POST /v1/events`.

Each event id is a UUID derived from the span's trace id, span id, the event's role in it,
its job and its attempt, so an exporter that re-sends a span (OTLP exporters retry whole
batches) produces the same ids, and the store counts them as duplicates; while a trainer
whose seeded `random` repeats its trace and span ids on a restart (OpenTelemetry's default
id generator draws from it) gives its new attempt new ids. The same ids at another instant
in one attempt are kept too: the store's key holds the instant.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ett_core.instants import us_to_dt

from .otlp import SpanRecord
from .span_mapping import SpanMapping

# Fixed for ever: changing it would make re-sent spans look new.
_NAMESPACE = uuid.UUID("6d1f0f5e-3c1b-5b7e-9a51-0e7d2f1c9a20")


@dataclass
class SpanEvents:
    # (index of the span in the request, event in wire form), in span order.
    events: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    # (index of the span, error) for spans refused before any event was made.
    rejected: list[tuple[int, str]] = field(default_factory=list)
    # Spans no rule maps (a trace may hold much more than training phases).
    ignored: int = 0


def event_id(trace_id: str, span_id: str, role: str, job_id: Any, attempt: Any) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{trace_id}:{span_id}:{role}:{job_id}:{attempt}"))


def rfc3339(unix_ns: int) -> str:
    # Whole microseconds: the wire's (and the core's) resolution.
    return us_to_dt(unix_ns // 1000).isoformat()


def _int_attr(value: Any) -> Any:
    """OTLP attributes are often strings (resource attributes from the environment)."""
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value


def _span_label(span: SpanRecord) -> str:
    return f"span {span.name!r} ({span.span_id or 'no span id'})"


def events_of(spans: Iterable[SpanRecord], mapping: SpanMapping) -> SpanEvents:
    """The events each mapped span stands for (validation of their fields comes after)."""
    out = SpanEvents()
    for index, span in enumerate(spans):
        rule = mapping.rule_for(span.name, mapping.value(span.attributes, "phase"))
        if rule is None:
            out.ignored += 1
            continue
        attrs = span.attributes
        job_id, model = mapping.value(attrs, "job_id"), mapping.value(attrs, "model")
        missing = [f"{name} (attribute {' or '.join(mapping.attributes[name])})"
                   for name, value in (("job_id", job_id), ("model", model)) if value is None]
        if missing:
            out.rejected.append((index, f"{_span_label(span)}: no {', no '.join(missing)}"))
            continue
        if not span.trace_id or not span.span_id:
            out.rejected.append((index, f"{_span_label(span)}: traceId and spanId are required"))
            continue
        if span.end_ns < span.start_ns or span.start_ns == 0:
            out.rejected.append((index, f"{_span_label(span)}: endTimeUnixNano must not be before"
                                        " startTimeUnixNano, and both must be set"))
            continue
        attempt = _int_attr(mapping.value(attrs, "attempt"))
        base: dict[str, Any] = {
            "job_id": job_id, "model": model,
            "attempt": mapping.default_attempt if attempt is None else attempt,
        }
        for name in ("team", "rank"):
            value = mapping.value(attrs, name)
            if value is not None:
                base[name] = _int_attr(value) if name == "rank" else value
        start, end = rfc3339(span.start_ns), rfc3339(span.end_ns)

        def add(role: str, ts: str, etype: str, extra: dict[str, Any] | None = None,
                index: int = index, span: SpanRecord = span, base: dict[str, Any] = base
                ) -> None:
            out.events.append((index, {"event_id": event_id(span.trace_id, span.span_id, role,
                                                            base["job_id"], base["attempt"]),
                                       "ts": ts, "type": etype, **base, **(extra or {})}))

        # The optimizer step the span ended at (docs/model.md section 24): on its end event.
        step = _int_attr(mapping.value(attrs, "step"))
        step_at_end = {} if step is None else {"attrs": {"step": step}}
        failure = {"cause": mapping.value(attrs, "cause") or "infra"}
        if span.status_message:
            failure["reason"] = span.status_message[:500]
        if rule.attempt:
            gpus = _int_attr(mapping.value(attrs, "gpus"))
            add("allocated", start, "allocated", {} if gpus is None else {"gpus": gpus})
            if span.error:
                add("failure", end, "failure", {"attrs": failure})
            add("released", end, "released",
                {"attrs": {"reason": "failed" if span.error else "completed",
                           **step_at_end.get("attrs", {})}})
            continue
        add("start", start, "phase_start",
            {"phase": rule.phase, **({"attrs": {"background": True}} if rule.background else {})})
        add("end", end, "phase_end", {"phase": rule.phase, **step_at_end})
        if rule.checkpoint and not span.error:
            add("checkpoint", end, "checkpoint", {"attrs": {"snapshot_ts": start}})
        if span.error:
            add("failure", end, "failure", {"attrs": failure})
    return out
