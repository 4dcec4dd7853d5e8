"""Layers point one way: no import circle between modules of ``src/keysplit`` and ``spark_replay``, nor between
their packages, and the Storm components import nothing the topology jar does not hold.

Every ``import`` counts, at module level, inside a function (a lazy import still ties two modules together) or
under ``if TYPE_CHECKING:`` (a reader following an annotation walks the circle all the same).
``from package import name`` depends on the submodule when ``name`` is one, else on the package.
"""

from __future__ import annotations

import ast
import fnmatch
from pathlib import Path

from keysplit.local.submission import JAR_CONTENTS

ROOT = Path(__file__).resolve().parents[2]


def modules() -> dict[str, Path]:
    found = {}
    for base, package in ((ROOT / "src", "keysplit"), (ROOT, "spark_replay")):
        for path in (base / package).rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        deps: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_package else name.split(".")[:-1]
                    base = base[: len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    deps.add(sub if sub in mods else target)
        graph[name] = {d for d in deps if d in mods and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def package_of(module: str) -> str:
    """A sub-package (``keysplit.storm``), a top-level module of keysplit (``keysplit.stream``), or
    ``spark_replay``."""
    parts = module.split(".")
    if parts[0] == "spark_replay":
        return "spark_replay"
    return ".".join(parts[:2])


def test_the_walk_sees_the_project():
    graph = import_graph()
    assert "keysplit.storm.router" in graph and "spark_replay.job" in graph
    assert "keysplit.groupings.hosting" in graph["keysplit.storm.router"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others():
    assert cycles(import_graph()) == []


def test_no_package_imports_itself_through_others():
    packages: dict[str, set[str]] = {}
    for module, deps in import_graph().items():
        packages.setdefault(package_of(module), set()).update(
            package_of(d) for d in deps if package_of(d) != package_of(module))
    assert cycles(packages) == []


def test_the_storm_components_import_only_what_the_jar_holds():
    graph = import_graph()
    seen: set[str] = set()
    todo = [m for m in graph if m.startswith(("keysplit.storm", "keysplit.groupings", "keysplit.sketches"))]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    paths = modules()
    outside = []
    for module in sorted(seen):
        relative = paths[module].relative_to(ROOT / "src" / "keysplit").as_posix()
        if not any(fnmatch.fnmatch(relative, pattern) for pattern in JAR_CONTENTS):
            outside.append(module)
    assert outside == [], "imported by a component but not in the jar"


def test_the_simulator_is_imported_only_by_the_commands_that_simulate():
    users = sorted(m for m, deps in import_graph().items() if not m.startswith("keysplit.simulator")
                   and any(d.startswith("keysplit.simulator") for d in deps))
    assert not any(m.startswith(("keysplit.storm", "keysplit.groupings", "keysplit.runs", "keysplit.local"))
                   for m in users), users


#: Where a module is sized: by purpose, one concern a module (docs/design/index.md), never to meet a line count.
#: Past this many lines a file is more likely two purposes than one, so it says which one it serves (a sentence
#: beginning "Over 600 lines" in its docstring); below it, length decides nothing, and the report only shows it.
LARGE = 600


def module_sizes() -> list[tuple[int, str]]:
    """``(lines, path)`` of every Python file of the project, largest first."""
    sizes = []
    for folder in ("src", "spark_replay", "tests", "benchmarks", "topologies"):
        for path in (ROOT / folder).rglob("*.py"):
            sizes.append((path.read_text(encoding="utf-8").count("\n"), path.relative_to(ROOT).as_posix()))
    return sorted(sizes, reverse=True)


def test_module_sizes_are_a_report_not_a_budget():
    """Prints the largest modules (``pytest -s``, or ``python tests/codebase/test_layers.py``); fails only for a file
    over :data:`LARGE` lines that does not say what single purpose keeps it whole."""
    sizes = module_sizes()
    print("\n".join(f"{lines:6d}  {path}" for lines, path in sizes[:12]))
    unexplained = [path for lines, path in sizes if lines > LARGE
                   and "Over 600 lines" not in (ast.get_docstring(ast.parse((ROOT / path).read_text("utf-8"))) or "")]
    assert unexplained == []


if __name__ == "__main__":
    for lines, path in module_sizes()[:25]:
        print(f"{lines:6d}  {path}")
