"""The job-level alert on stalls: EttJobStalled (docs/alerts.md), rendered with the SLO rules.

Not a service level: one job whose steps stopped advancing for longer than its threshold
(docs/model.md section 24) is worth a page by itself, because it burns its GPUs until
someone kills or unblocks it. The threshold is already in the series (`ett_stalled_jobs`
counts a job only once its gap is past it), so the rule needs no `for`.
"""

from __future__ import annotations

from typing import Any

from ett_core.taxonomy import DEFAULT_MAPPING

STALL_ALERT = "EttJobStalled"
STALL_RULES_FILE = "job-stalls.rules.yaml"
STALLED_JOBS = "ett_stalled_jobs"
DEFAULT_STALL_OWNER: str | None = DEFAULT_MAPPING["stall_owner"]


def stall_rule_file(runbook_base_url: str, owner: str | None = DEFAULT_STALL_OWNER
                    ) -> dict[str, Any]:
    """The rule file of EttJobStalled: pages `owner` (None: the model's own team), with the
    model's team kept as `model_team` and the model as `model`."""
    # The series' team is the model's; keep it as model_team before `team` is the owner.
    expr = (f'label_replace(max by (model, team) ({STALLED_JOBS}), "model_team", "$1",'
            f' "team", "(.*)") > 0')
    labels = {"severity": "page", "category": "job"}
    if owner is not None:
        labels = {"team": owner, **labels}
    rule = {
        "alert": STALL_ALERT,
        "expr": expr,
        "labels": labels,
        "annotations": {
            "summary": "{{ $value }} job(s) of model {{ $labels.model }} (team"
                       " {{ $labels.model_team }}) stalled",
            "description": ("Steps of a running job of {{ $labels.model }} have not advanced for"
                            " longer than the job's stall threshold while it holds its GPUs:"
                            " a hung collective, a dead data loader or a deadlocked save. The"
                            " time is counted as stalled, not training, until it moves again."),
            "runbook_url": f"{runbook_base_url}/{STALL_ALERT}.md",
        },
    }
    return {"groups": [{"name": "ett-job-stalls", "rules": [rule]}]}
