"""The client stands alone: importing it loads neither the server nor training nor their
dependencies, `envad score --help` needs only the base install, and a command whose
extra is missing names the extra (checked in fresh interpreters, where a missing
dependency is made missing by blocking its import)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement

from envad.client.cli import EXTRA_OF_MODULE
from pyproject_extras import project, requirements

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "torchvision", "onnxruntime", "onnx", "lancedb", "lance", "faiss", "pyod",
         "sklearn", "scipy", "ray", "matplotlib")

LOADED = f"""
import json, sys
HEAVY = {HEAVY!r}
def loaded():
    return {{"server": sorted(m for m in sys.modules if m.startswith("envad.server")),
             "training": sorted(m for m in sys.modules if m.startswith("envad.training")),
             "heavy": sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)}}
"""


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOADED + code, *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_importing_every_client_module_loads_no_server_and_no_training() -> None:
    result = run_python("""
import importlib, pkgutil
import envad.client
for module in pkgutil.walk_packages(envad.client.__path__, "envad.client."):
    importlib.import_module(module.name)
print(json.dumps(loaded()))
""")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {"server": [], "training": [], "heavy": []}


def test_score_help_loads_only_the_other_parts_command_registrations() -> None:
    result = run_python("""
from envad.client.cli import main
try:
    main(["score", "--help"])
except SystemExit as exc:
    assert exc.code == 0, exc.code
print(json.dumps(loaded()))
""")
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout.splitlines()[-1])
    assert "usage: envad score" in result.stdout
    assert modules["heavy"] == []
    # `envad serve` and the training commands are listed: their argument parsers (and the
    # server's settings table, with its data-dir URI parsing) load, nothing they run does
    assert set(modules["server"]) <= {"envad.server", "envad.server.cli", "envad.server.config",
                                      "envad.server.storage_uri"}
    assert set(modules["training"]) <= {"envad.training", "envad.training.cli",
                                         "envad.training.evaluate_cli"}


def envad_without(blocked: str, *argv: str) -> subprocess.CompletedProcess:
    """`envad ARGV` in a fresh interpreter where importing `blocked` fails as if it were
    not installed."""
    return run_python(f"""
sys.modules[{blocked!r}] = None      # import {blocked} -> ModuleNotFoundError
from envad.client.cli import main
sys.exit(main(sys.argv[1:]))
""", *argv)


def test_a_command_without_its_extra_names_the_extra(tmp_path, tiny_model_path) -> None:
    serve = envad_without("onnxruntime", "serve", "--port", "0", "--data-dir", str(tmp_path))
    assert serve.returncode == 1
    assert "`envad serve` needs the 'server' extra" in serve.stderr
    assert "pip install 'envad[server]'" in serve.stderr and "onnxruntime" in serve.stderr

    train = envad_without("torch", "train", "--data", str(tmp_path), "--algorithm", "erm",
                          "--out", str(tmp_path / "run"))
    assert train.returncode == 1
    assert "`envad train` needs the 'train' extra" in train.stderr
    # evaluate misses a server package first; [train] includes [server], so it names train
    evaluate = envad_without("sklearn", "evaluate", "--data", str(tmp_path),
                             "--out", str(tmp_path / "eval"))
    assert evaluate.returncode == 1
    assert "`envad evaluate` needs the 'train' extra" in evaluate.stderr
    (tmp_path / "cams" / "camA").mkdir(parents=True)     # a source with an image in it
    (tmp_path / "cams" / "camA" / "IMG_0001.JPG").write_bytes(b"\xff\xd8 a JPEG")
    backfill = ("backfill", str(tmp_path / "cams"), "--engine", "ray", "--data-dir",
                str(tmp_path), "--model-file", str(tiny_model_path))
    ray = envad_without("ray", *backfill)
    assert ray.returncode == 1
    assert "`envad backfill` needs the 'ray' extra" in ray.stderr
    # [ray] leaves ONNX Runtime's build to [server] or [gpu]
    no_onnxruntime = envad_without("onnxruntime", *backfill)
    assert no_onnxruntime.returncode == 1
    assert "`envad backfill` needs the 'server' extra" in no_onnxruntime.stderr


def test_extra_of_module_matches_pyproject() -> None:
    extras = project()["optional-dependencies"]

    def own(extra: str) -> set[str]:
        """What the extra lists itself (not through the envad extras it names)."""
        return {Requirement(r).name.lower() for r in extras[extra]
                if Requirement(r).name != "envad"}

    for module, (extra, distribution) in EXTRA_OF_MODULE.items():
        assert distribution in requirements(extra), (module, extra, distribution)
    # users install [server-base] through [server] (or [gpu]): the CLI names [server]
    for extra, named_as in (("server-base", "server"), ("server", "server"),
                            ("train", "train"), ("ray", "ray")):
        named = {d for e, d in EXTRA_OF_MODULE.values() if e == named_as}
        assert own(extra) <= named, f"[{extra}] holds packages the CLI cannot name"
    base = {Requirement(r).name.lower() for r in project()["dependencies"]}
    assert not base & {d for _, d in EXTRA_OF_MODULE.values()}
