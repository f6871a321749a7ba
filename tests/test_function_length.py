"""Functions in client/, server/ and training/ stay short enough to read top-down."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("client", "server", "training")
MAX_LINES = 60


def long_functions(source: str, max_lines: int = MAX_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length in lines) of each function in `source` longer than
    `max_lines`, its decorators left out and its docstring counted."""
    return [(node.name, node.lineno, node.end_lineno - node.lineno + 1)
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None
            and node.end_lineno - node.lineno + 1 > max_lines]


def test_the_walk_finds_a_long_function_nested_or_not() -> None:
    body = "".join(f"        x{i} = {i}\n" for i in range(60))
    source = f"def short():\n    return 1\n\n\nclass C:\n    def long(self):\n{body}"
    assert long_functions(source) == [("long", 6, 61)]
    assert long_functions(source, max_lines=61) == []


def test_no_function_is_longer_than_sixty_lines() -> None:
    found = [f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
             for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))
             for name, line, length in long_functions(path.read_text(encoding="utf-8"))]
    assert not found, (f"functions over {MAX_LINES} lines (split them into named steps):\n"
                       + "\n".join(found))
