"""EttTelemetrySilent: the scheduler holds a job's GPUs and its trainer has gone quiet.

Not a hang (a stalled job still sends heartbeats): an SDK, collector or network outage, or
a trainer dead without a word. Its input, `ett_telemetry_silent_jobs`, already waits out the
heartbeat timeout, so `for` only rides out a pass or two. It rides with the pipeline's
freshness SLO: the same owner (the telemetry team), the model's team in `model_team`.
"""

from __future__ import annotations

from typing import Any

from .model import Slo, SloSpec, format_duration

TELEMETRY_SILENT_ALERT = "EttTelemetrySilent"


def telemetry_silent_rule(slo: Slo, spec: SloSpec) -> dict[str, Any]:
    labels = {"team": spec.data_team, "severity": "ticket", "slo": slo.name,
              "category": slo.category}
    return {
        "alert": TELEMETRY_SILENT_ALERT,
        # The model's team becomes `model_team`: `team` routes to the telemetry team.
        "expr": ('label_replace(sum by (model, team) (ett_telemetry_silent_jobs),'
                 ' "model_team", "$1", "team", "(.*)") > 0'),
        "for": format_duration(min(spec.absent_for_s, 300)),
        "labels": labels,
        "annotations": {
            "summary": "{{ $value }} running jobs of model {{ $labels.model }} hold GPUs"
                       " with a silent trainer",
            "description": ("The scheduler says these jobs' attempts are held, and their"
                            " trainers have sent nothing for longer than the heartbeat"
                            " timeout: their time counts as `unreported`. Check the SDK's"
                            " spool and the path to the service before suspecting the job."),
            "runbook_url": f"{spec.runbook_base_url}/{TELEMETRY_SILENT_ALERT}.md",
        },
    }
