"""A function imports only what must wait: an optional extra (torch, ray, ONNX Runtime,
matplotlib, the server's or training's code in the client), a module that would slow a
light entry point (`envad --help`) or one that imports this module back (a cycle), each
with a comment saying why; everything else is imported at the top of its module."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: folders whose modules follow the rule
FOLDERS = ("client", "server", "training")


def unexplained_imports(source: str) -> list[int]:
    """Lines of the imports inside functions of `source` that carry no comment: on the
    line itself, or on the line just above the block of imports it belongs to."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, (ast.Import, ast.ImportFrom)) and not _explained(
                    lines, inner.lineno - 1, inner.end_lineno or inner.lineno):
                found.append(inner.lineno)
    return sorted(set(found))


def _explained(lines: list[str], first: int, end: int) -> bool:
    if any("#" in line for line in lines[first:end]):
        return True
    above = first - 1
    while above >= 0 and lines[above].strip().startswith(("import ", "from ")):
        above -= 1           # the block of imports this one belongs to
    return above >= 0 and lines[above].strip().startswith("#")


def test_a_comment_on_the_line_or_above_the_block_explains_an_import() -> None:
    source = ("def f():\n"
              "    import ray  # Ray: an extra\n"
              "    # the server's code: an extra\n"
              "    import lance\n"
              "    from envad.server import store\n"
              "\n"
              "    import json\n")
    assert unexplained_imports(source) == [7]


def test_functions_import_only_optional_extras_and_say_why() -> None:
    found = []
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            lines = unexplained_imports(path.read_text(encoding="utf-8"))
            found += [f"{name}:{line}" for line in lines]
    assert not found, ("imports inside functions without a reason (move them to the top "
                       "of the module, or say which extra they wait for):\n"
                       + "\n".join(found))
