"""The tree is the architecture: rooms by flow, imports one way, no cycles, small modules.

The import graph is read from the source (every `import`, including those inside functions
and under `TYPE_CHECKING`), so a cycle hidden behind a lazy import still counts.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Top-level Python packages of the repository and where they live.
PACKAGES = {
    "service": REPO / "service",
    "ett_core": REPO / "ett_core",
    "ett_client": REPO / "client" / "ett_client",
    "dashboards": REPO / "dashboards",
    "bench": REPO / "bench",
    "tests": REPO / "tests",
}
# service/ from the top down: a module may import its own layer or a lower one, never a
# higher one. A flow's entry module (`service/ingest.py`) sits with the rooms it uses.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("service.cli",),
    ("service.api", "service.console"),
    ("service.ingest", "service.aggregate", "service.alerts", "service.aggregation",
     "service.metrics", "service.slo", "service.demo", "service.slurm"),
    ("service.access",),
    ("service.results",),
    ("service.wire",),
    # The SLO model is a definition, like the taxonomy: answers (results.slo_burn) read it.
    ("service.store", "service.settings", "service.errors", "service.taxonomy",
     "service.slo.model", "service"),
    ("ett_core",),
)
FORBIDDEN_NAME_PARTS = ("more", "parts", "misc", "util", "wiring")
MAX_MODULES_PER_ROOM = 12
MAX_MODULE_LINES = 500


def _module_name(package: str, root: Path, path: Path) -> str:
    parts = [package, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, root in PACKAGES.items():
        for path in sorted(root.rglob("*.py")):
            if "__pycache__" not in path.parts:
                found[_module_name(package, root, path)] = path
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if not is_package:
                    base = base[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                # `from pkg import mod` is an import of the submodule, not of pkg's face.
                sub = f"{target}.{alias.name}"
                yield sub if sub in known else target


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        deps = set()
        for target in _imports(name, path, known):
            # Resolve to the longest known module (an attribute import names its module).
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (cycle := visit(dep)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for index, rooms in enumerate(LAYERS):
        for room in rooms:
            if (module == room or module.startswith(room + ".")) and (
                    best is None or len(room) > best[0]):
                best = (len(room), index)
    return None if best is None else best[1]


def test_the_find_cycle_helper_finds_a_cycle_and_accepts_a_tree() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycles_anywhere_in_the_repository() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_service_imports_run_from_the_cli_and_the_app_down_to_the_store_and_the_engine() -> None:
    upward = []
    for module, deps in import_graph().items():
        source = layer_of(module)
        if source is None or not module.startswith("service"):
            continue
        for dep in deps:
            target = layer_of(dep)
            if target is not None and target < source:
                upward.append(f"{module} -> {dep}")
    assert upward == []


def test_every_service_module_belongs_to_a_layer() -> None:
    assert [m for m in modules() if m.startswith("service") and layer_of(m) is None] == []


def _room_modules(room: Path) -> list[Path]:
    return sorted(p for p in room.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))


@pytest.mark.parametrize("room", sorted(
    [PACKAGES["service"], *(p for p in PACKAGES["service"].iterdir()
                            if (p / "__init__.py").exists())]), ids=lambda p: p.name)
def test_each_room_of_service_holds_at_most_a_dozen_modules(room: Path) -> None:
    assert len(_room_modules(room)) <= MAX_MODULES_PER_ROOM, [p.name for p in _room_modules(room)]


def test_no_module_is_longer_than_500_lines() -> None:
    long = {str(path.relative_to(REPO)): n for name, path in modules().items()
            if not name.startswith("tests")
            and (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert long == {}


def test_no_module_is_named_for_its_shape_rather_than_its_content() -> None:
    vague = [name for name in modules() if name.startswith(("service", "ett_core", "ett_client"))
             and any(part in name.rpartition(".")[2] for part in FORBIDDEN_NAME_PARTS)]
    assert vague == []


def test_the_three_flow_entry_points_stay_at_the_top_of_service() -> None:
    for face in ("ingest", "aggregate", "alerts"):
        assert (PACKAGES["service"] / f"{face}.py").is_file()


# Where SQL may be written: the store, and the token store (the access boundary's own table).
SQL_ROOMS = ("service.store",)
SQL_MODULES = ("service.access.tokens",)
# (module, text the literal starts with): SQL still outside the store, each with its reason.
SQL_ALLOWED: set[tuple[str, str]] = set()
# Calls whose first argument is SQL (`text(...)`, `conn.execute(...)`, `exec_driver_sql(...)`).
SQL_CALLS = ("text", "execute", "exec_driver_sql")
# A literal that starts like a statement: a verb in capitals, or a verb with its clause in any case.
SQL_VERB = re.compile(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|SET|CREATE|ALTER|DROP|TRUNCATE|COPY"
                      r"|LOCK|VACUUM|ANALYZE)\b")
SQL_CLAUSE = re.compile(
    r"\s*(INSERT\s+INTO\b|UPDATE\s+[\w?.\"]+\s+SET\b|DELETE\s+FROM\b|SELECT\s.*\bFROM\b"
    r"|SET\s+(LOCAL\s+)?[\w.]+\s*(=|TO\b)|(CREATE|ALTER|DROP)\s+(TABLE|INDEX|VIEW)\b)",
    re.IGNORECASE | re.DOTALL)
SQL_WORD = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|FROM|WHERE|SET|VALUES|JOIN|GROUP BY"
                      r"|ORDER BY|RETURNING|LIMIT)\b")


def _literal_text(node: ast.AST) -> str | None:
    """The text of a string literal, an f-string (its placeholders as `?`) or a `+` of them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "?" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_text(node.left), _literal_text(node.right)
        if left is not None or right is not None:
            return (left or "?") + (right or "?")
    return None


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def sql_literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string literal in `source` that is SQL.

    A literal is SQL when it is the (first) argument of `text(...)`, `.execute(...)` or
    `.exec_driver_sql(...)` and holds a SQL word, or when it starts with a SQL verb wherever
    it stands (a module constant, a concatenation); docstrings are prose and never count.
    """
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: dict[int, str] = {}  # by line: an f-string's parts are literals of their own
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.id if isinstance(func, ast.Name) else (
                func.attr if isinstance(func, ast.Attribute) else "")
            if name in SQL_CALLS:
                for inner in ast.walk(node.args[0]):
                    sql = _literal_text(inner)
                    if sql is not None and (SQL_WORD.search(sql) or SQL_CLAUSE.match(sql)):
                        found.setdefault(inner.lineno, sql)
                        break
        if id(node) in docs:
            continue
        sql = _literal_text(node) if isinstance(node, (ast.Constant, ast.JoinedStr)) else None
        if sql is not None and (SQL_VERB.match(sql) or SQL_CLAUSE.match(sql)):
            found.setdefault(node.lineno, sql)
    return sorted(found.items())


def test_the_sql_finder_finds_statements_and_passes_prose() -> None:
    source = '''
"""Select the jobs from the store and update the cache."""
from sqlalchemy import text

LOCK = "SELECT pg_try_advisory_lock(:k)"
SETTINGS = "SET LOCAL work_mem = '64MB'"


def reads(conn, table):
    """Delete from the queue what was read; select the rest."""
    conn.execute(text("SELECT 1"))
    conn.execute(text(f"DELETE FROM {table} WHERE id = :i"), {"i": 1})
    conn.exec_driver_sql("""
        insert into jobs (job_id) values ('j')
    """)
    conn.execute(text("SELECT a " + "FROM b"))
    message = "Select a window with ?window="
    return f"update {table} set x = 1", message
'''
    found = [line for line, _ in sql_literals(source)]
    assert found == [5, 6, 11, 12, 13, 16, 18]


def test_sql_lives_in_the_store_and_the_token_store_only() -> None:
    outside = []
    for name, path in modules().items():
        if not name.startswith("service.") or name in SQL_MODULES or any(
                name == room or name.startswith(room + ".") for room in SQL_ROOMS):
            continue
        for line, sql in sql_literals(path.read_text(encoding="utf-8")):
            if not any(name == m and sql.lstrip().startswith(s) for m, s in SQL_ALLOWED):
                outside.append(f"{path.relative_to(REPO)}:{line}: {' '.join(sql.split())[:60]}")
    assert outside == []


def test_the_sql_allow_list_holds_exactly_what_is_still_there() -> None:
    held = {(name, start) for name, path in modules().items() for start in
            (s for m, s in SQL_ALLOWED if m == name)
            for _, sql in sql_literals(path.read_text(encoding="utf-8"))
            if sql.lstrip().startswith(start)}
    assert held == SQL_ALLOWED


# Rooms that render answers: they take them from `service.results`, never from the HTTP app.
RENDERING_ROOMS = ("service.console", "service.cli", "service.metrics")
# `ett serve` runs the app, so it is the one module outside the app that imports it.
APP_RUNNERS = ("service.cli.serve",)


def test_console_cli_and_metrics_take_answers_from_results_never_from_the_api() -> None:
    from_api = sorted(
        f"{module} -> {dep}" for module, deps in import_graph().items()
        if module.startswith(tuple(r + "." for r in RENDERING_ROOMS) + RENDERING_ROOMS)
        and module not in APP_RUNNERS
        for dep in deps if dep == "service.api" or dep.startswith("service.api."))
    assert from_api == []


def test_test_modules_sit_in_the_folder_of_the_room_they_test() -> None:
    # At the top of tests/ only what checks the whole repository.
    top = sorted(p.name for p in PACKAGES["tests"].glob("test_*.py"))
    assert top == ["test_docs_references.py", "test_layout.py"]
