"""pyproject.toml's extras as pip installs them, for the tests that check them: an
extra's requirements together with those of the envad extras it names (`envad[x]`)."""

from __future__ import annotations

from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def project() -> dict:
    return pyproject()["project"]


def requirements(*extras: str) -> dict[str, Requirement]:
    """Every requirement that `pip install 'envad[extras]'` installs beside the base
    dependencies, by distribution name (extras named inside extras followed)."""
    declared = project()["optional-dependencies"]
    found: dict[str, Requirement] = {}
    pending, seen = list(extras), set()
    while pending:
        extra = pending.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for text in declared[extra]:
            requirement = Requirement(text)
            if requirement.name == "envad":
                pending.extend(requirement.extras)
            else:
                found[requirement.name.lower()] = requirement
    return found
