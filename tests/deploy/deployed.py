"""What deploy/ asks `envad serve` to run: the servers of compose.yaml and of the
Kubernetes manifests, each as the command line and environment its container gets, and
the settings the real `envad serve` parser and loader make of them.

A module of its own (not conftest.py): tests/deploy/test_manifests.py imports it by name.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from envad.server import app, cli, ports
from envad.server.config import ServerConfig, describe

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
#: every environment variable `envad serve` reads a setting from
SETTINGS_VARIABLES = frozenset(variable for _, variable, _ in describe())
#: what a Kubernetes container gets for a variable taken from a Secret
FROM_SECRET = "value-from-secret"
#: what a Kubernetes container gets for a variable taken from its pod's fields
POD_FIELDS = {"status.podIP": "10.1.2.3", "metadata.name": "envad-pod-0"}


@dataclass
class Server:
    """One `envad serve` container: where it is declared, its arguments after the image's
    entrypoint (`envad`), its environment (the image's ENV, then its own)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    spec: dict[str, Any] = field(repr=False)    # the compose service or Kubernetes container


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def kubernetes() -> list[tuple[str, dict[str, Any]]]:
    """(file name, document) of every manifest under deploy/kubernetes/."""
    return [(path.name, doc) for path in sorted((DEPLOY / "kubernetes").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text()) if doc]


def image_env() -> dict[str, str]:
    """The ENV of the Dockerfile's final stage: what every container starts with."""
    final = (ROOT / "Dockerfile").read_text().rsplit("\nFROM ", 1)[1]
    joined = re.sub(r"\\\n\s*", " ", final)
    env: dict[str, str] = {}
    for line in joined.splitlines():
        if line.startswith("ENV "):
            for pair in shlex.split(line[4:]):
                name, value = pair.split("=", 1)
                env[name] = value
    return env


def compose_servers() -> list[Server]:
    """The compose services built from the repository's Dockerfile."""
    servers = []
    for name, service in compose()["services"].items():
        if "build" not in service:
            continue
        command = service["command"]
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        servers.append(Server(name, argv, {**image_env(), **env}, service))
    return servers


def kubernetes_servers() -> list[tuple[dict[str, Any], Server]]:
    """(workload, its envad container) for every Deployment and StatefulSet."""
    docs = [doc for _, doc in kubernetes()]
    config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs
                   if d["kind"] == "ConfigMap"}
    found = []
    for workload in docs:
        if workload["kind"] not in ("Deployment", "StatefulSet"):
            continue
        for container in workload["spec"]["template"]["spec"]["containers"]:
            env = dict(image_env())
            for source in container.get("envFrom", []):
                env.update(config_maps[source["configMapRef"]["name"]])
            for variable in container.get("env", []):
                env[variable["name"]] = env_value(variable, env)
            argv = list(container.get("command", [])[1:]) + list(container.get("args", []))
            name = f"{workload['metadata']['name']}/{container['name']}"
            found.append((workload, Server(name, argv, env, container)))
    return found


def env_value(variable: dict[str, Any], defined: dict[str, str]) -> str:
    """A container's `env` entry as the kubelet sets it: a Secret's or a pod field's
    value, or `value` with `$(NAME)` replaced by the variables defined before it."""
    source = variable.get("valueFrom", {})
    if "secretKeyRef" in source:
        return FROM_SECRET
    if "fieldRef" in source:
        return POD_FIELDS[source["fieldRef"]["fieldPath"]]
    return re.sub(r"\$\((\w+)\)", lambda m: defined.get(m[1], m[0]), str(variable["value"]))


def serve_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """(`envad`, its `serve` subcommand), built by the server's own `register`."""
    root = argparse.ArgumentParser(prog="envad")
    subparsers = root.add_subparsers(dest="command")
    cli.register(subparsers)
    return root, subparsers.choices["serve"]


def unknown_flags(argv: list[str]) -> list[str]:
    """The `--flags` of `argv` that `envad serve` does not have."""
    _, serve = serve_parser()
    return [word for word in argv
            if word.startswith("--") and word.split("=", 1)[0] not in serve._option_string_actions]


def served_config(server: Server, monkeypatch: pytest.MonkeyPatch) -> ServerConfig:
    """The settings `envad serve` starts with from `server`'s arguments and environment:
    its own parser and `run` (flags > ENVAD_* > defaults, and every check of
    load_config), stopped before it touches the network or starts serving."""
    assert server.argv[:1] == ["serve"], f"{server.name}: not `envad serve`: {server.argv}"
    assert not unknown_flags(server.argv), (
        f"{server.name}: `envad serve` has no {unknown_flags(server.argv)}")
    for variable in [v for v in os.environ if v.startswith("ENVAD_")]:
        monkeypatch.delenv(variable)
    for variable, value in server.env.items():
        monkeypatch.setenv(variable, value)
    started: list[ServerConfig] = []
    monkeypatch.setattr(ports, "refuse_port_in_use", lambda host, port: None)
    monkeypatch.setattr(cli, "check_storage", lambda config: None)

    def serve(config: ServerConfig) -> int:
        started.append(config)
        return 0

    monkeypatch.setattr(app, "serve", serve)
    root, _ = serve_parser()
    try:
        args = root.parse_args(server.argv)
    except SystemExit:
        pytest.fail(f"{server.name}: `envad {shlex.join(server.argv)}` does not parse")
    assert args.func(args) == 0
    (config,) = started
    return config
