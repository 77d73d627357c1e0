"""promtool / amtool fixtures for the alerting tests: skip only when the binary is missing."""

from __future__ import annotations

import shutil

import pytest


def _binary(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not installed (apt-get install -y {package}); CI installs it")
    return path


@pytest.fixture(scope="session")
def promtool() -> str:
    return _binary("promtool", "prometheus")


@pytest.fixture(scope="session")
def amtool() -> str:
    return _binary("amtool", "prometheus-alertmanager")
