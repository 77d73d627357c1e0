"""Reading the taxonomy file (ETT_TAXONOMY, default deploy/taxonomy.yaml).

Validation lives in the pure core (`Taxonomy.from_mapping`); this module reads YAML and
turns the core's error path into a file and line, so an operator sees
`taxonomy.yaml:14: phase 'training' is mapped twice` instead of a traceback.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from ett_core.taxonomy import Taxonomy
from ett_core.taxonomy import TaxonomyError as InvalidTaxonomy
from service.errors import ConfigError
from service.settings import Settings

DEFAULT_TAXONOMY_PATH = Path(__file__).resolve().parent.parent / "deploy" / "taxonomy.yaml"


class TaxonomyError(ConfigError):
    """A taxonomy file that cannot be used; the message names file, line and problem."""

    def __init__(self, path: str | Path, line: int | None, problem: str) -> None:
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


def load_taxonomy(path: str | Path = DEFAULT_TAXONOMY_PATH) -> Taxonomy:
    """Read and validate a taxonomy YAML file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaxonomyError(path, None, f"cannot read the file: {exc}") from exc
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise TaxonomyError(path, line, f"not valid YAML: {problem}") from exc
    if root is None:
        raise TaxonomyError(path, None, "the file is empty")
    _reject_duplicate_keys(root, path)
    data = yaml.safe_load(text)
    try:
        return Taxonomy.from_mapping(data)
    except InvalidTaxonomy as exc:
        raise TaxonomyError(path, _line_of(root, exc.path), exc.problem) from exc


def taxonomy_from(settings: Settings) -> Taxonomy:
    """The configured taxonomy (ETT_TAXONOMY), else the default table."""
    return load_taxonomy(settings.taxonomy) if settings.taxonomy else Taxonomy.default()


def _reject_duplicate_keys(node: yaml.Node, path: str | Path) -> None:
    # PyYAML keeps the last of two equal keys without a word; in a taxonomy that would
    # silently drop a component's phases.
    if isinstance(node, yaml.MappingNode):
        seen: set[object] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    raise TaxonomyError(
                        path, key.start_mark.line + 1, f"key {key.value!r} appears twice"
                    )
                seen.add(key.value)
            _reject_duplicate_keys(value, path)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _reject_duplicate_keys(item, path)


def _line_of(root: yaml.Node, error_path: tuple[str | int, ...]) -> int:
    """The 1-based line of the node a core error path points at (closest found)."""
    node = root
    line = root.start_mark.line + 1
    for part in error_path:
        found = None
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value == part:
                    line = key.start_mark.line + 1
                    found = value
                    break
        elif (
            isinstance(node, yaml.SequenceNode)
            and isinstance(part, int)
            and 0 <= part < len(node.value)
        ):
            found = node.value[part]
            line = found.start_mark.line + 1
        if found is None:
            break
        node = found
    return line
