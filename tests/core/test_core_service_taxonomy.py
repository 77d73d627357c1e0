"""service.taxonomy.load_taxonomy: the shipped file, and errors that name file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ett_core import Taxonomy
from service.taxonomy import DEFAULT_TAXONOMY_PATH, TaxonomyError, load_taxonomy

SHIPPED = DEFAULT_TAXONOMY_PATH.read_text()


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "taxonomy.yaml"
    path.write_text(text)
    return path


def line_of(text: str, needle: str, occurrence: int = 1) -> int:
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if needle in line]
    return lines[occurrence - 1]


def test_the_shipped_file_equals_the_default_in_code():
    assert load_taxonomy(DEFAULT_TAXONOMY_PATH) == Taxonomy.default()


def test_a_phase_mapped_twice_is_reported_at_its_second_line(tmp_path):
    text = SHIPPED.replace("      - pre_train\n", "      - pre_train\n      - compilation\n")
    path = write(tmp_path, text)
    with pytest.raises(TaxonomyError) as caught:
        load_taxonomy(path)
    # The list under `initialization` now names it first; the second mention is the error.
    expected_line = line_of(text, "phases: [compilation]")
    problem = "phase 'compilation' is mapped twice (already under 'initialization')"
    assert str(caught.value) == f"{path}:{expected_line}: {problem}"


def test_an_unknown_component_is_reported_at_its_line(tmp_path):
    text = SHIPPED.replace("  unattributed:\n", "  gpu_idle:\n    owner: x\n  unattributed:\n")
    path = write(tmp_path, text)
    with pytest.raises(TaxonomyError) as caught:
        load_taxonomy(path)
    assert caught.value.line == line_of(text, "gpu_idle:")
    assert "unknown component 'gpu_idle'" in str(caught.value)
    assert str(path) in str(caught.value)


def test_a_wrong_type_is_reported_at_its_line(tmp_path):
    text = SHIPPED.replace("owner: compiler", "owner: [compiler]")
    with pytest.raises(TaxonomyError) as caught:
        load_taxonomy(write(tmp_path, text))
    assert caught.value.line == line_of(text, "owner: [compiler]")
    assert "wrong type" in caught.value.problem


def test_a_yaml_boolean_phase_name_is_a_wrong_type(tmp_path):
    text = SHIPPED.replace("phases: [compilation]", "phases: [compilation, no]")
    with pytest.raises(TaxonomyError) as caught:
        load_taxonomy(write(tmp_path, text))
    assert "wrong type" in caught.value.problem


def test_a_duplicate_key_is_refused_instead_of_silently_overriding(tmp_path):
    text = SHIPPED.replace("  compilation:\n", "  shutdown:\n    owner: x\n  compilation:\n", 1)
    with pytest.raises(TaxonomyError) as caught:
        load_taxonomy(write(tmp_path, text))
    assert "'shutdown' appears twice" in caught.value.problem
    assert caught.value.line == line_of(text, "  shutdown:", 2)


def test_broken_yaml_and_missing_files_are_taxonomy_errors(tmp_path):
    with pytest.raises(TaxonomyError, match="not valid YAML"):
        load_taxonomy(write(tmp_path, "components: [unclosed\n"))
    with pytest.raises(TaxonomyError, match="cannot read"):
        load_taxonomy(tmp_path / "absent.yaml")
    with pytest.raises(TaxonomyError, match="empty"):
        load_taxonomy(write(tmp_path, ""))
