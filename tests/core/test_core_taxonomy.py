"""Taxonomy: the default table (docs/model.md section 2), and validation of configured ones."""

from __future__ import annotations

import copy

import pytest

from ett_core import Taxonomy, TaxonomyError
from ett_core.taxonomy import COMPONENTS, DEFAULT_MAPPING


def mapping(**changes):
    data = copy.deepcopy(DEFAULT_MAPPING)
    data.update(changes)
    return data


def test_the_default_is_the_spec_table():
    taxonomy = Taxonomy.default()
    assert taxonomy.component_of("init_plugins") == "initialization"
    assert taxonomy.component_of("data_stall") == "wasted_training"
    assert taxonomy.component_of("mystery") is None
    assert taxonomy.owner_of("data_stall", "wasted_training", "llm") == "data-platform"
    assert taxonomy.owner_of("checkpoint_save", "wasted_training", "llm") == "checkpointing"
    assert taxonomy.owner_of("training", "effective_training", "llm") == "llm"
    assert taxonomy.owner_of("mystery", "unattributed", "llm") == "telemetry"
    owners = {
        c: taxonomy.lost_progress_owner_of(c, "llm")
        for c in ("infra", "lost", "preemption", "user")
    }
    assert owners == {
        "infra": "reliability",
        "lost": "reliability",
        "preemption": "scheduler",
        "user": "llm",
    }


@pytest.mark.parametrize(
    ("data", "problem", "path"),
    [
        ([], "expected a mapping", ()),
        ({"components": {}, "colour": 1}, "unknown key 'colour'", ("colour",)),
        (
            mapping(
                components={
                    **DEFAULT_MAPPING["components"],
                    "gpu_idle": {"owner": "x", "phases": []},
                }
            ),
            "unknown component 'gpu_idle'",
            ("components", "gpu_idle"),
        ),
        (
            mapping(
                components={
                    k: v for k, v in DEFAULT_MAPPING["components"].items() if k != "shutdown"
                }
            ),
            "component 'shutdown' is missing",
            ("components",),
        ),
        (
            mapping(
                components={
                    **DEFAULT_MAPPING["components"],
                    "compilation": {"owner": "compiler", "phases": ["compilation", "training"]},
                }
            ),
            "phase 'training' is mapped twice (already under 'compilation')",
            ("components", "effective_training", "phases", 0),
        ),
        (
            mapping(
                components={
                    **DEFAULT_MAPPING["components"],
                    "compilation": {"owner": 3, "phases": []},
                }
            ),
            "wrong type",
            ("components", "compilation", "owner"),
        ),
        (
            mapping(
                components={
                    **DEFAULT_MAPPING["components"],
                    "compilation": {"owner": "c", "phases": "compilation"},
                }
            ),
            "must be a list",
            ("components", "compilation", "phases"),
        ),
        (
            mapping(
                components={
                    **DEFAULT_MAPPING["components"],
                    "unattributed": {"owner": "t", "phases": ["lost_progress"]},
                }
            ),
            "derived by the engine",
            ("components", "unattributed", "phases", 0),
        ),
        (mapping(phase_owners={"nope": "x"}), "unknown phase 'nope'", ("phase_owners", "nope")),
        (
            mapping(lost_progress_owners={"cosmic_ray": "x"}),
            "unknown cause",
            ("lost_progress_owners", "cosmic_ray"),
        ),
        (mapping(models={"llama": None}), "wrong type", ("models", "llama")),
    ],
)
def test_an_invalid_taxonomy_is_refused_with_the_path_of_the_problem(data, problem, path):
    with pytest.raises(TaxonomyError) as caught:
        Taxonomy.from_mapping(data)
    assert problem in caught.value.problem
    assert caught.value.path == path


def test_a_configured_taxonomy_re_attributes_phases():
    data = mapping(models={"llama": "llm-team"})
    data["components"]["compilation"]["phases"].append("warmup")
    taxonomy = Taxonomy.from_mapping(data)
    assert taxonomy.component_of("warmup") == "compilation"
    assert taxonomy.team_of_model("llama") == "llm-team"
    assert set(taxonomy.component_owner) == set(COMPONENTS)
