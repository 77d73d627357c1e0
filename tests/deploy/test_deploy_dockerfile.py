"""The Dockerfile, read as a linter would (no Docker engine runs in CI)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINES = [ln.strip() for ln in (REPO / "Dockerfile").read_text().splitlines()]
INSTRUCTIONS = [ln for ln in LINES if ln and not ln.startswith("#")]


def _all(keyword: str) -> list[str]:
    return [ln for ln in INSTRUCTIONS if ln.upper().startswith(keyword + " ")]


def test_it_is_multi_stage_on_a_slim_python_base() -> None:
    froms = _all("FROM")
    assert len(froms) >= 2
    assert any(re.search(r"python:3\.1[1-9][\w.-]*-slim", ln) for ln in _all("ARG"))
    assert any("--from=build" in ln for ln in _all("COPY"))


def test_the_final_stage_runs_as_a_numeric_non_root_user() -> None:
    final = INSTRUCTIONS[max(i for i, ln in enumerate(INSTRUCTIONS) if ln.startswith("FROM")):]
    users = [ln.split()[1] for ln in final if ln.startswith("USER ")]
    assert users, "the runtime stage sets no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0


def test_the_image_runs_the_ett_command_and_keeps_migrations_beside_the_code() -> None:
    assert _all("ENTRYPOINT") == ['ENTRYPOINT ["ett"]']
    copies = " ".join(_all("COPY"))
    for path in ("migrations", "service", "ett_core", "alembic.ini"):
        assert path in copies


def test_dockerignore_keeps_the_context_small() -> None:
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*")] == "*"  # deny by default, then allow-list
    for path in ("!service/", "!ett_core/", "!migrations/", "!pyproject.toml"):
        assert path in ignore
