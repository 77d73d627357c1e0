"""The repository stands on its own: no file refers to a document it does not ship.

A user has only this repository, so a mention of the team's private contract or style
notes, or a link to a page that does not exist, is a dead end. The patterns are built from
pieces so this file does not match itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

OUTSIDE = re.compile(
    r"(?<![A-Za-z_])(?:" + "SP" + "EC" + "|" + "ST" + "YLE" + r")(?![A-Za-z_])"
    + r"|\.\./" + "shared" + r"|\bshared/(?:" + "SP" + "EC|" + "ST" + "YLE)"
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DOC_MENTION = re.compile(r"`((?:docs|client|deploy|examples)/[\w./-]+\.md)`")


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True)
    return [REPO / name for name in out.stdout.decode().split("\0") if name]


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
        return None


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = _text(path) or ""
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.MULTILINE)}


def test_no_file_refers_to_documents_outside_the_repository() -> None:
    hits = []
    for path in tracked_files():
        text = _text(path)
        if text is None or path == Path(__file__):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{n}: {line.strip()[:120]}")
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)


def test_every_link_in_the_docs_points_at_a_file_that_exists() -> None:
    broken = []
    for path in tracked_files():
        if path.suffix != ".md":
            continue
        text = _text(path) or ""
        for n, line in enumerate(text.splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                    continue
                file_part, _, fragment = target.partition("#")
                dest = (path.parent / file_part).resolve() if file_part else path
                where = f"{path.relative_to(REPO)}:{n}: {target}"
                if not dest.exists():
                    broken.append(f"{where} (no such file)")
                elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                    broken.append(f"{where} (no such heading)")
            for mention in DOC_MENTION.findall(line):
                if not (REPO / mention).exists():
                    broken.append(f"{path.relative_to(REPO)}:{n}: `{mention}` (no such file)")
    assert not broken, "dead links:\n" + "\n".join(broken)


@pytest.mark.parametrize("heading, expected", [
    ("5. The wire contract: events", "5-the-wire-contract-events"),
    ("`ett report`", "ett-report"),
])
def test_slug_follows_github(heading: str, expected: str) -> None:
    assert slug(heading) == expected
