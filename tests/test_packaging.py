"""The distribution maps every folder with an __init__.py under the envad namespace."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyproject_extras import pyproject, requirements

ROOT = Path(__file__).resolve().parents[1]


def _setuptools_config() -> dict:
    return pyproject()["tool"]["setuptools"]


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


#: distributions that install the same module: one environment may hold one of each set
ONE_MODULE_BUILDS = ({"onnxruntime", "onnxruntime-gpu"},
                     {"faiss-cpu", "faiss-gpu", "faiss-gpu-cu12", "faiss-gpu-cuvs"})


@pytest.mark.parametrize("extras", [("server",), ("gpu",), ("train",), ("ray", "server"),
                                    ("ray", "gpu")], ids=",".join)
def test_no_documented_install_gets_two_builds_of_one_module(extras) -> None:
    """Two builds of one module overwrite each other's files: with ONNX Runtime's CPU and
    CUDA builds both installed, the CPU build's files win and CUDA is gone."""
    installed = set(requirements(*extras))
    for builds in ONE_MODULE_BUILDS:
        assert len(installed & builds) <= 1, (extras, installed & builds)
    assert installed & {"onnxruntime", "onnxruntime-gpu"}, extras   # one of them, always
