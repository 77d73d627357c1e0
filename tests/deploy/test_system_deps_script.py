"""scripts/install-system-deps.sh blocks daemons with a policy-rc.d while apt installs, and
puts back the policy-rc.d it found (container images ship one) instead of deleting it.

apt-get is replaced by a recorder on PATH (the point is the script's file handling, not
Debian's packages), and POLICY_RC_D points at a file in the test's folder.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "scripts" / "install-system-deps.sh"


def run_with_recording_apt(tmp_path, policy) -> tuple[int, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "mktemp", "cp", "rm", "chmod", "id", "cat"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    seen = tmp_path / "policy-during-install"
    apt = bin_dir / "apt-get"
    apt.write_text(f'#!{shutil.which("bash")}\n[ "$1" = install ] && cat "{policy}" > "{seen}"\n'
                   "exit 0\n")
    apt.chmod(0o755)
    result = subprocess.run([shutil.which("bash"), str(SCRIPT)], text=True,
                            capture_output=True, timeout=60,
                            env={"PATH": str(bin_dir), "POLICY_RC_D": str(policy)})
    return result.returncode, seen.read_text() if seen.exists() else ""


@pytest.mark.skipif(os.geteuid() != 0, reason="the script installs only as root")
def test_an_existing_policy_rc_d_is_put_back(tmp_path) -> None:
    policy = tmp_path / "policy-rc.d"
    policy.write_text("#!/bin/sh\n# the image's own policy\nexit 0\n")
    policy.chmod(0o750)
    rc, during = run_with_recording_apt(tmp_path, policy)
    assert rc == 0
    assert during == "#!/bin/sh\nexit 101\n"  # daemons blocked while installing
    assert policy.read_text() == "#!/bin/sh\n# the image's own policy\nexit 0\n"
    assert policy.stat().st_mode & 0o777 == 0o750


@pytest.mark.skipif(os.geteuid() != 0, reason="the script installs only as root")
def test_a_policy_rc_d_it_made_is_removed(tmp_path) -> None:
    policy = tmp_path / "policy-rc.d"
    rc, during = run_with_recording_apt(tmp_path, policy)
    assert rc == 0 and during == "#!/bin/sh\nexit 101\n"
    assert not policy.exists()
