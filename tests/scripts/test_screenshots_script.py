"""The README's screenshots come from scripts/screenshots.py: every image the README shows
is one the script writes, and every one it writes is in the README and committed."""

from __future__ import annotations

import re
import runpy

from tests.conftest import REPO


def test_the_script_writes_exactly_the_readmes_images() -> None:
    shots = runpy.run_path(str(REPO / "scripts" / "screenshots.py"))["SHOTS"]
    shown = set(re.findall(r"\(docs/images/([\w.-]+\.png)\)", (REPO / "README.md").read_text()))
    assert shown == set(shots)
    for name in shots:
        assert (REPO / "docs" / "images" / name).stat().st_size > 10_000, name
    assert "scripts/screenshots.py" in (REPO / "README.md").read_text()
