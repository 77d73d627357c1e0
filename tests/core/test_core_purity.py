"""The core is pure: standard library only, and it never reads the clock."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import ett_core

PACKAGE = Path(ett_core.__file__).resolve().parent
MODULES = sorted(PACKAGE.rglob("*.py"))
CLOCK_READS = {"now", "utcnow", "today", "time", "time_ns", "monotonic", "perf_counter"}


def imported_roots(tree: ast.AST) -> set[str]:
    roots = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_core_has_modules_to_check():
    assert len(MODULES) >= 10


def test_the_core_imports_only_the_standard_library_and_itself():
    allowed = set(sys.stdlib_module_names) | {"ett_core", "__future__"}
    offenders = {
        path.name: sorted(imported_roots(ast.parse(path.read_text())) - allowed) for path in MODULES
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_core_never_reads_the_clock():
    calls = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in CLOCK_READS:
                    calls.append(f"{path.name}:{node.lineno} {name}()")
    assert calls == []
