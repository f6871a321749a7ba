"""The distribution maps every folder with an __init__.py under the envad namespace."""

from __future__ import annotations

from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _setuptools_config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_folder_is_listed() -> None:
    config = _setuptools_config()
    listed_dirs = {Path(d).resolve() for d in config["package-dir"].values()}
    for part in ("proto", "server", "training", "client"):
        for init in (ROOT / part).rglob("__init__.py"):
            assert init.parent.resolve() in listed_dirs, f"{init.parent} not in package-dir"
    assert set(config["packages"]) == set(config["package-dir"])


def test_no_forbidden_top_level_names() -> None:
    for name in _setuptools_config()["packages"]:
        assert name == "envad" or name.startswith("envad."), name


def test_server_app_does_not_import_torch() -> None:
    import subprocess
    import sys

    code = "import envad.server.app, sys; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
