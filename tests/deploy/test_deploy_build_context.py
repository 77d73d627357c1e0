"""The image's build context, made the way Docker and Podman make it: the files
.dockerignore lets through (Docker's own rules, from the `docker` SDK), copied into a fresh
directory; every COPY/ADD source of the Dockerfile (read by the `dockerfile` package, which
wraps BuildKit's parser) must match something there, or the build stops with
"no items matching glob"."""

from __future__ import annotations

import shutil
from pathlib import Path

import dockerfile
import pytest
from docker.utils.build import exclude_paths

REPO = Path(__file__).resolve().parents[2]


def _context(into: Path) -> Path:
    patterns = (REPO / ".dockerignore").read_text().splitlines()
    for rel in exclude_paths(str(REPO), patterns, dockerfile="Dockerfile"):
        src = REPO / rel
        if src.is_file():
            dest = into / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)
    return into


def _context_sources() -> list[str]:
    """Sources of every COPY/ADD read from the build context (not from another stage)."""
    sources = []
    for cmd in dockerfile.parse_file(str(REPO / "Dockerfile")):
        if cmd.cmd.upper() not in ("COPY", "ADD"):
            continue
        if any(flag.lower().startswith("--from=") for flag in cmd.flags):
            continue
        sources.extend(cmd.value[:-1])
    return sources


@pytest.fixture(scope="module")
def context(tmp_path_factory) -> Path:
    return _context(tmp_path_factory.mktemp("context"))


def test_the_dockerfile_copies_from_the_context() -> None:
    # A parse that found nothing would make the next test vacuous.
    assert {"pyproject.toml", "service", "migrations", "deploy/slo.yaml"} <= set(
        _context_sources())


@pytest.mark.parametrize("source", _context_sources())
def test_every_copy_source_is_in_the_filtered_context(context: Path, source: str) -> None:
    matches = list(context.glob(source.lstrip("/")))
    assert matches, (f"COPY {source}: nothing in the build context matches it; "
                     f".dockerignore filters it out (add `!{source}` there)")


def test_the_context_holds_no_tests_docs_or_local_state(context: Path) -> None:
    top = {p.name for p in context.iterdir()}
    assert not top & {"tests", "docs", ".venv", ".ett-data", ".git", "bench", "client"}
    assert not list(context.rglob("__pycache__"))
