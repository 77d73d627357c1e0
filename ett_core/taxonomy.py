"""The taxonomy: phase -> component, component -> owner, overrides, model -> team.

It is configuration (docs/model.md section 2): re-running aggregation with another taxonomy
re-attributes history. This module validates a plain mapping; reading YAML (and turning
error paths into file lines) is the service's job.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ett_core.events import FAILURE_CAUSES

COMPONENTS = (
    "scheduling",
    "initialization",
    "compilation",
    "effective_training",
    "wasted_training",
    "shutdown",
    "unattributed",
)
EFFECTIVE = "effective_training"
WASTED = "wasted_training"
UNATTRIBUTED = "unattributed"
# Why an attempt ended early: a failure event's cause, or `lost` (silence past the timeout).
CAUSES = (*FAILURE_CAUSES, "lost")
LOST_PROGRESS = "lost_progress"
CHECKPOINT_SAVE = "checkpoint_save"
STALLED = "stalled"
UNASSIGNED_TEAM = "unassigned"
# Derived phase names the core writes itself; a trainer reporting them would make
# reported and derived time indistinguishable.
# The scheduler's silent tail (ett_core.scheduler) is one too.
UNREPORTED = "unreported"
RESERVED_PHASES = (LOST_PROGRESS, UNATTRIBUTED, STALLED, UNREPORTED)

# docs/model.md section 2, as data. An owner of None means "the model's own team".
DEFAULT_MAPPING: Mapping[str, Any] = {
    "components": {
        "scheduling": {"owner": "scheduler", "phases": ["scheduling"]},
        "initialization": {
            "owner": "trainer-platform",
            "phases": [
                "hardware_setup",
                "launcher_init",
                "device_init",
                "process_group_init",
                "preproc_creation",
                "train_module_creation",
                "init_plugins",
                "pre_train",
                "checkpoint_load",
                "get_first_batch_data",
            ],
        },
        "compilation": {"owner": "compiler", "phases": ["compilation"]},
        "effective_training": {"owner": None, "phases": ["training"]},
        "wasted_training": {"owner": "checkpointing", "phases": ["checkpoint_save", "data_stall"]},
        "shutdown": {
            "owner": "publishing",
            "phases": ["shutdown", "final_checkpoint", "model_publish", "teardown"],
        },
        "unattributed": {"owner": "telemetry", "phases": []},
    },
    "phase_owners": {"data_stall": "data-platform"},
    # Causes not listed here (user) are owned by the model's own team.
    "lost_progress_owners": {
        "infra": "reliability",
        "lost": "reliability",
        "preemption": "scheduler",
    },
    "models": {},
    # Stalls (ett_core.stalls): threshold max(stall_floor seconds, stall_factor x median step
    # interval); `stall_owner` owns stalled time (null: the model's team).
    "stall_floor": 300,
    "stall_factor": 5,
    "stall_owner": "reliability",
}
_STALL_KEYS = ("stall_floor", "stall_factor", "stall_owner")

Path = tuple[str | int, ...]


class TaxonomyError(ValueError):
    """A taxonomy that cannot be used; `path` locates the offending entry."""

    def __init__(self, problem: str, path: Path = ()) -> None:
        self.problem = problem
        self.path = path
        where = _format_path(path)
        super().__init__(f"{where}: {problem}" if where else problem)


def _format_path(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


@dataclass(frozen=True)
class Taxonomy:
    phase_component: Mapping[str, str]
    component_owner: Mapping[str, str | None]
    phase_owner: Mapping[str, str | None]
    lost_progress_owner: Mapping[str, str | None]
    model_team: Mapping[str, str]
    stall_floor_us: int = 300_000_000
    stall_factor: float = 5.0
    stall_owner: str | None = "reliability"

    @classmethod
    def default(cls) -> Taxonomy:
        return cls.from_mapping(DEFAULT_MAPPING)

    @classmethod
    def from_mapping(cls, data: object) -> Taxonomy:
        """Validate plain data (as parsed from YAML) into a Taxonomy."""
        return _parse(data)

    def component_of(self, phase: str) -> str | None:
        """The component of a reported phase, None when the taxonomy does not know it."""
        return self.phase_component.get(phase)

    def owner_of(self, phase: str, component: str, model_team: str) -> str:
        """Owner of time in a reported phase: override, else the component's owner."""
        if phase in self.phase_owner:
            owner = self.phase_owner[phase]
        else:
            owner = self.component_owner[component]
        return model_team if owner is None else owner

    def lost_progress_owner_of(self, cause: str, model_team: str) -> str:
        owner = self.lost_progress_owner.get(cause)
        return model_team if owner is None else owner

    def team_of_model(self, model: str) -> str | None:
        return self.model_team.get(model)

    def stall_owner_of(self, model_team: str) -> str:
        return model_team if self.stall_owner is None else self.stall_owner


def _expect_mapping(value: object, path: Path) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise TaxonomyError(f"wrong type: expected a mapping, got {_type_name(value)}", path)
    for key in value:
        if not isinstance(key, str):
            raise TaxonomyError(f"wrong type: keys must be strings, got {key!r}", path)
    return value


def _optional_mapping(top: Mapping[str, Any], key: str) -> Mapping[Any, Any]:
    value = top.get(key)
    return {} if value is None else _expect_mapping(value, (key,))


def _expect_name(value: object, path: Path, *, nullable: bool = False) -> str | None:
    if value is None and nullable:
        return None
    if not isinstance(value, str) or not value.strip():
        expected = "a non-empty string or null" if nullable else "a non-empty string"
        raise TaxonomyError(f"wrong type: expected {expected}, got {value!r}", path)
    return value


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _check_keys(data: Mapping[str, Any], allowed: tuple[str, ...], path: Path) -> None:
    for key in data:
        if key not in allowed:
            raise TaxonomyError(
                f"unknown key {key!r} (expected one of: {', '.join(allowed)})", (*path, key)
            )


def _parse(data: object) -> Taxonomy:
    top = _expect_mapping(data, ())
    _check_keys(
        top, ("components", "phase_owners", "lost_progress_owners", "models", *_STALL_KEYS), ()
    )
    if "components" not in top:
        raise TaxonomyError("missing key 'components'", ())
    components = _expect_mapping(top["components"], ("components",))

    phase_component: dict[str, str] = {}
    component_owner: dict[str, str | None] = {}
    for name, body in components.items():
        path: Path = ("components", name)
        if name not in COMPONENTS:
            raise TaxonomyError(
                f"unknown component {name!r} (components are: {', '.join(COMPONENTS)})", path
            )
        body = _expect_mapping(body, path)
        _check_keys(body, ("owner", "phases"), path)
        if "owner" not in body:
            raise TaxonomyError(f"component {name!r} has no 'owner' (null: the model's team)", path)
        component_owner[name] = _expect_name(body["owner"], (*path, "owner"), nullable=True)
        phases = body.get("phases", [])
        if not isinstance(phases, list):
            raise TaxonomyError(
                f"wrong type: 'phases' must be a list, got {_type_name(phases)}", (*path, "phases")
            )
        for index, phase in enumerate(phases):
            phase_path: Path = (*path, "phases", index)
            phase = _expect_name(phase, phase_path)
            if phase in RESERVED_PHASES:
                raise TaxonomyError(
                    f"phase {phase!r} is derived by the engine, not reportable", phase_path
                )
            if phase in phase_component:
                raise TaxonomyError(
                    f"phase {phase!r} is mapped twice (already under {phase_component[phase]!r})",
                    phase_path,
                )
            phase_component[phase] = name
    for name in COMPONENTS:
        if name not in component_owner:
            raise TaxonomyError(f"component {name!r} is missing", ("components",))

    phase_owner: dict[str, str | None] = {}
    overrides = _optional_mapping(top, "phase_owners")
    for phase, owner in overrides.items():
        if phase not in phase_component:
            raise TaxonomyError(f"owner given for unknown phase {phase!r}", ("phase_owners", phase))
        phase_owner[phase] = _expect_name(owner, ("phase_owners", phase), nullable=True)

    lost_owner: dict[str, str | None] = {}
    causes = _optional_mapping(top, "lost_progress_owners")
    for cause, owner in causes.items():
        if cause not in CAUSES:
            raise TaxonomyError(
                f"unknown cause {cause!r} (causes are: {', '.join(CAUSES)})",
                ("lost_progress_owners", cause),
            )
        lost_owner[cause] = _expect_name(owner, ("lost_progress_owners", cause), nullable=True)

    model_team: dict[str, str] = {}
    models = _optional_mapping(top, "models")
    for model, team in models.items():
        model_team[model] = _expect_name(team, ("models", model))  # type: ignore[assignment]

    return Taxonomy(
        phase_component=MappingProxyType(phase_component),
        component_owner=MappingProxyType(component_owner),
        phase_owner=MappingProxyType(phase_owner),
        lost_progress_owner=MappingProxyType(lost_owner),
        model_team=MappingProxyType(model_team),
        **_stall_settings(top),
    )


def _positive_number(value: object, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise TaxonomyError(f"wrong type: expected a positive number, got {value!r}", (key,))
    if value == float("inf"):
        raise TaxonomyError(f"expected a finite number, got {value!r}", (key,))
    return float(value)


def _stall_settings(top: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if top.get("stall_floor") is not None:
        out["stall_floor_us"] = round(_positive_number(top["stall_floor"], "stall_floor") * 1e6)
    if top.get("stall_factor") is not None:
        out["stall_factor"] = _positive_number(top["stall_factor"], "stall_factor")
    if "stall_owner" in top:
        out["stall_owner"] = _expect_name(top["stall_owner"], ("stall_owner",), nullable=True)
    return out
