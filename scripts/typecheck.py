"""Type-check the tree with mypy, as the installed `envad` package sees it.

Usage: python scripts/typecheck.py [MYPY ARGS...]   (run by `make lint`)

The distribution maps its packages onto folders (pyproject's package-dir: envad ->
proto/envad, envad.server -> server/, envad.training -> training/, envad.client ->
client/), which mypy cannot follow, and the editable install resolves them with an import
hook that mypy does not run. So this links the same layout as build/typecheck/envad/,
links the tests' helper modules (tests/**/*.py that are neither test_*.py nor
conftest.py) beside it as top-level modules, because pytest puts each test's folder on
sys.path and the tests import them that way (`from server_handle import ...`), runs mypy
with pyproject's [tool.mypy] settings (which check that tree, benchmarks/, scripts/ and
tests/) and reports every error against the real file.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / "build" / "typecheck"
# package folder inside the link tree -> the folder it comes from (pyproject's package-dir)
SUBPACKAGES = {"server": "server", "training": "training", "client": "client"}


def test_helpers() -> list[Path]:
    """The modules under tests/ that tests import as top-level modules."""
    return sorted(path for path in (ROOT / "tests").rglob("*.py")
                  if not path.name.startswith("test_") and path.name != "conftest.py")


def link_tree() -> dict[str, str]:
    """Recreate build/typecheck/; return {link tree prefix: real prefix}."""
    shutil.rmtree(TREE, ignore_errors=True)
    package = TREE / "envad"
    package.mkdir(parents=True)
    prefixes = {}
    for entry in sorted((ROOT / "proto" / "envad").iterdir()):
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
            prefixes[f"build/typecheck/envad/{entry.name}"] = f"proto/envad/{entry.name}"
    for name, folder in SUBPACKAGES.items():
        (package / name).symlink_to(ROOT / folder, target_is_directory=True)
        prefixes[f"build/typecheck/envad/{name}/"] = f"{folder}/"
    for helper in test_helpers():
        (TREE / helper.name).symlink_to(helper)
        prefixes[f"build/typecheck/{helper.name}"] = str(helper.relative_to(ROOT))
    return prefixes


def real_paths(text: str, prefixes: dict[str, str]) -> str:
    """Point each reported path in mypy's output at the real file."""
    lines = []
    for line in text.splitlines(keepends=True):
        for link, real in prefixes.items():
            if line.startswith(link):
                line = real + line[len(link):]
                break
        lines.append(line)
    return "".join(lines)


def main(argv: list[str]) -> int:
    prefixes = link_tree()
    stdout, stderr, status = api.run(["--config-file", str(ROOT / "pyproject.toml"), *argv])
    sys.stdout.write(real_paths(stdout, prefixes))
    sys.stderr.write(real_paths(stderr, prefixes))
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
