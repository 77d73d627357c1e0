"""docs/client.md's install command, exactly: `pip install ./client` in a fresh virtual
environment, run from the repository root, gives an importable SDK with no dependencies."""

from __future__ import annotations

import re
import subprocess
import venv

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow


def test_pip_install_of_the_local_path_gives_a_working_sdk(tmp_path) -> None:
    assert "pip install ./client " in (REPO / "docs" / "client.md").read_text()
    env_dir = tmp_path / "trainer-env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # -v shows the build backend's output, where setuptools prints its deprecation warnings.
    install = subprocess.run([str(python), "-m", "pip", "install", "-v", "./client"], cwd=REPO,
                             capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    warned = [line for line in (install.stdout + install.stderr).splitlines()
              if "Deprecat" in line]
    assert warned == [], warned
    check = subprocess.run(
        [str(python), "-c", "import ett_client, sys; from ett_client import Recorder; "
         "print(ett_client.__file__)"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
    # Installed into the fresh environment, not found through the repository's folders.
    assert check.stdout.strip().startswith(str(env_dir)), check.stdout
    freeze = subprocess.run([str(python), "-m", "pip", "freeze"], capture_output=True,
                            text=True, check=True).stdout.lower()
    # The core is standard library only: nothing but the SDK itself came with it.
    assert [re.split(r"[ =@]", line)[0] for line in freeze.splitlines() if line] == ["ett-client"]


def test_both_distributions_give_their_licence_as_an_spdx_string() -> None:
    """A `license = {text = ...}` table makes setuptools print a deprecation warning at every
    install, which buries `make run`'s banner."""
    import tomllib

    for path in (REPO / "pyproject.toml", REPO / "client" / "pyproject.toml"):
        project = tomllib.loads(path.read_text())["project"]
        assert project["license"] == "Apache-2.0", path
        assert not any(c.startswith("License ::") for c in project.get("classifiers", [])), path
