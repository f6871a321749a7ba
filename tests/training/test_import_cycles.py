"""training/ has no import cycles: no module imports, at the top or inside a function,
a module that imports it back (directly or through others).

A cycle hidden by a function-level import still ties two modules into one idea and
breaks as soon as someone moves the import to the top; shared names go into their own
modules (`protocol.py`, `run_files.py`) instead.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "envad.training"


def modules() -> dict[str, Path]:
    """Every module of envad.training by its import name (packages by their __init__)."""
    found = {}
    for path in sorted((ROOT / "training").rglob("*.py")):
        parts = list(path.relative_to(ROOT / "training").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join([PACKAGE, *parts])] = path
    return found


def runtime_nodes(tree: ast.AST):
    """Every node of `tree` except those under `if TYPE_CHECKING:` (never executed)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for branch in node.orelse:
                yield branch
                yield from runtime_nodes(branch)
            continue
        yield node
        yield from runtime_nodes(node)


def imports_of(path: Path, known: dict[str, Path]) -> set[str]:
    """The envad.training modules that `path` imports anywhere in its body (at run time)."""
    targets: set[str] = set()
    for node in runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import sub` imports the submodule when there is one
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known
                     else node.module for alias in node.names]
        else:
            continue
        targets.update(name for name in names if name in known)
    return targets


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path that returns to its start, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_find_cycle_finds_one_and_type_checking_imports_do_not_count(tmp_path) -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
    known = {"envad.training.x": tmp_path / "x.py", "envad.training.y": tmp_path / "y.py"}
    known["envad.training.x"].write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from envad.training.y import Y\n"
        "def f():\n    from envad.training import y\n")
    assert imports_of(known["envad.training.x"], known) == {"envad.training.y"}
    known["envad.training.x"].write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from envad.training.y import Y\n")
    assert imports_of(known["envad.training.x"], known) == set()


def test_training_has_no_import_cycles() -> None:
    known = modules()
    graph = {name: imports_of(path, known) - {name} for name, path in known.items()}
    assert len(graph) > 20 and graph["envad.training.run"]  # the walk sees imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])
