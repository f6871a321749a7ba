"""The service image: small (no torch), non-root, health-checked, data and models as
volumes. No Docker engine here, so these check the Dockerfile's text and its inputs."""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

from packaging.requirements import Requirement

from pyproject_extras import project, requirements

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()
FINAL_STAGE = DOCKERFILE.rsplit("\nFROM ", 1)[1]


def instructions(text: str, name: str) -> list[str]:
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.split(None, 1)[1] for line in joined.splitlines()
            if line.startswith(name + " ")]


def test_final_stage_is_slim_and_non_root() -> None:
    assert FINAL_STAGE.startswith("python:3.11-slim")
    users = instructions(FINAL_STAGE, "USER")
    assert users and users[-1] not in ("root", "0")
    assert instructions(FINAL_STAGE, "ENTRYPOINT") == ['["envad"]']
    assert instructions(FINAL_STAGE, "CMD")[-1] == '["serve"]'


def test_volumes_port_and_settings() -> None:
    assert instructions(FINAL_STAGE, "VOLUME") == ['["/models", "/data"]']
    assert instructions(FINAL_STAGE, "EXPOSE") == ["50051"]
    env = " ".join(instructions(FINAL_STAGE, "ENV"))
    for setting in ("ENVAD_HOST=0.0.0.0", "ENVAD_DATA_DIR=/data", "ENVAD_MODELS_DIR=/models"):
        assert setting in env


def test_healthcheck_uses_the_grpc_health_probe() -> None:
    (check,) = instructions(FINAL_STAGE, "HEALTHCHECK")
    assert "envad health --live --server" in check and "${ENVAD_PORT}" in check


def test_the_image_installs_the_server_extra_and_no_torch() -> None:
    installed = set(requirements("server")) | {
        Requirement(dep).name.lower() for dep in project()["dependencies"]}
    assert not installed & {"torch", "torchvision"}
    runs = " ".join(instructions(FINAL_STAGE, "RUN"))
    assert re.search(r'pip install [^&]*/wheels/envad-\*\.whl\)\[server\]"', runs), runs
    assert "[train" not in runs and "torch" not in runs


def test_build_context_keeps_what_the_build_copies() -> None:
    ignored = [p.strip() for p in (ROOT / ".dockerignore").read_text().splitlines()
               if p.strip() and not p.startswith("#")]
    copied = []
    for args in instructions(DOCKERFILE, "COPY"):
        if args.startswith("--from"):
            continue
        copied += args.split()[:-1]
    assert {"pyproject.toml", "README.md", "proto", "server", "client", "training"} <= set(copied)
    for path in copied:
        assert (ROOT / path).exists(), path
        assert not any(fnmatch.fnmatch(path, pattern) for pattern in ignored), path
