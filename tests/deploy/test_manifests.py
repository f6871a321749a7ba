"""deploy/compose.yaml and deploy/kubernetes/ against `envad serve` itself: every flag
and ENVAD_* variable they use exists and loads, one writer and its readers share one
store, ports agree between containers, services and probes, and the health checks ask
the names the server registers (compose's are run against a real health service). No
container runtime here: a renamed flag or a drifted manifest fails these instead."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from deployed import (
    DEPLOY,
    FROM_SECRET,
    POD_FIELDS,
    ROOT,
    SETTINGS_VARIABLES,
    compose,
    compose_servers,
    kubernetes,
    kubernetes_servers,
    served_config,
)
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from envad.server.app import SERVICE_NAME, WRITES_NAME
from envad.server.storage_uri import parse_storage_options

#: the health name a server of each role must be ready on before it gets traffic
READY_ON = {"reader": SERVICE_NAME, "writer": WRITES_NAME}
SERVERS = compose_servers()
WORKLOADS = kubernetes_servers()
WORKLOAD_IDS = [server.name for _, server in WORKLOADS]


def roles(configs: list) -> list[str]:
    return sorted(config.role for config in configs)


# ------------------------------------------------------------------ compose.yaml


@pytest.mark.parametrize("server", SERVERS, ids=lambda s: s.name)
def test_compose_servers_are_envad_serve_from_the_dockerfile(server, monkeypatch) -> None:
    build = server.spec["build"]
    assert (DEPLOY / build["context"]).resolve() == ROOT
    assert (ROOT / build["dockerfile"]).is_file() and build["dockerfile"] == "Dockerfile"
    assert server.spec["image"] == "envad"
    assert not set(server.env) - SETTINGS_VARIABLES - {"AWS_ACCESS_KEY_ID",
                                                      "AWS_SECRET_ACCESS_KEY", "PYTHONUNBUFFERED"}
    served_config(server, monkeypatch)


def test_compose_runs_one_writer_and_readers_that_name_it(monkeypatch) -> None:
    configs = {server.name: served_config(server, monkeypatch) for server in SERVERS}
    assert roles(list(configs.values())).count("writer") == 1
    assert "reader" in roles(list(configs.values()))
    assert set(roles(list(configs.values()))) == {"writer", "reader"}
    (writer,) = [name for name, config in configs.items() if config.role == "writer"]
    assert "replicas" not in compose()["services"][writer].get("deploy", {})
    for config in configs.values():
        assert config.writer_address == f"{writer}:{configs[writer].port}"
        assert config.remote
    assert len({(str(c.data_dir), str(c.models_dir), tuple(sorted(c.storage_options.items())))
                for c in configs.values()}) == 1


def test_compose_store_is_the_bucket_it_creates(monkeypatch) -> None:
    services = compose()["services"]
    config = served_config(SERVERS[0], monkeypatch)
    bucket = str(config.data_dir).removeprefix("s3://").split("/")[0]
    assert str(config.models_dir).startswith(f"s3://{bucket}/")
    setup = " ".join(services["create-bucket"]["command"])
    assert f"mc mb --ignore-existing store/{bucket}" in setup
    assert f"store/{str(config.models_dir).removeprefix('s3://')}" in setup
    endpoint = re.fullmatch(r"http://([\w-]+):(\d+)", config.storage_options["aws_endpoint"])
    assert endpoint and endpoint[1] in services
    assert any(str(p).endswith(f":{endpoint[2]}") for p in services[endpoint[1]]["ports"])
    assert config.storage_options["allow_http"] == "true"
    # credentials come from the environment, never from the command line
    assert not {"aws_access_key_id", "aws_secret_access_key"} & set(config.storage_options)
    for server in SERVERS:
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(server.env)
        conditions = server.spec["depends_on"]
        assert conditions["create-bucket"]["condition"] == "service_completed_successfully"


@pytest.mark.parametrize("server", SERVERS, ids=lambda s: s.name)
def test_compose_ports_and_healthcheck_address_match_the_server(server, monkeypatch) -> None:
    config = served_config(server, monkeypatch)
    assert [str(p).rsplit(":", 1)[1] for p in server.spec["ports"]] == [str(config.port)]
    probe = " ".join(server.spec["healthcheck"]["test"])
    assert re.findall(r"127\.0\.0\.1:(\d+)", probe) == [str(config.port)]


def test_compose_host_ports_differ() -> None:
    published = [str(p).rsplit(":", 1)[0] for service in compose()["services"].values()
                 for p in service.get("ports", [])]
    assert len(published) == len(set(published))


def test_compose_readers_wait_for_a_healthy_writer(monkeypatch) -> None:
    for server in SERVERS:
        if served_config(server, monkeypatch).role == "reader":
            (writer,) = [s.name for s in SERVERS if s.name in server.spec["depends_on"]]
            assert server.spec["depends_on"][writer]["condition"] == "service_healthy"


@pytest.fixture(scope="module")
def health_service() -> Iterator[tuple[int, health.HealthServicer]]:
    """A gRPC health service on loopback, as `envad serve` registers it."""
    server = grpc.server(ThreadPoolExecutor(2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield port, servicer
    server.stop(None)


def run_healthcheck(test: list[str], port: int, config_port: int) -> int:
    """Exit code of a compose healthcheck `test` run here against `port`."""
    assert test[0] == "CMD"
    argv = [word.replace(f"127.0.0.1:{config_port}", f"127.0.0.1:{port}") for word in test[1:]]
    program = {"python": sys.executable, "envad": str(Path(sys.executable).with_name("envad"))}
    return subprocess.run([program[argv[0]], *argv[1:]], capture_output=True,
                          timeout=60).returncode


@pytest.mark.parametrize("role", sorted(READY_ON))
def test_compose_healthcheck_passes_exactly_when_its_health_name_serves(role, health_service,
                                                         monkeypatch) -> None:
    """Healthy exactly when the health name of the role is SERVING, whatever the others."""
    port, servicer = health_service
    (server, config) = next((s, c) for s in SERVERS
                            if (c := served_config(s, monkeypatch)).role == role)
    test = server.spec["healthcheck"]["test"]
    serving, not_serving = (health_pb2.HealthCheckResponse.SERVING,
                            health_pb2.HealthCheckResponse.NOT_SERVING)
    for wanted in (serving, not_serving):
        for name in ("", SERVICE_NAME, WRITES_NAME):
            servicer.set(name, wanted if name == READY_ON[role] else
                         not_serving if wanted == serving else serving)
        code = run_healthcheck(test, port, config.port)
        assert (code == 0) == (wanted == serving), (role, wanted, code)


# ------------------------------------------------------------------ Kubernetes


def test_kustomization_lists_every_manifest() -> None:
    (kustomization,) = [doc for _, doc in kubernetes() if doc["kind"] == "Kustomization"]
    files = {path.name for path in (DEPLOY / "kubernetes").glob("*.yaml")}
    assert sorted(kustomization["resources"]) == sorted(files - {"kustomization.yaml"})


def test_kubernetes_images_are_the_dockerfile_build() -> None:
    (kustomization,) = [doc for _, doc in kubernetes() if doc["kind"] == "Kustomization"]
    assert [image["name"] for image in kustomization["images"]] == ["envad"]
    assert {server.spec["image"] for _, server in WORKLOADS} == {"envad"}
    assert {server.spec["image"] for server in SERVERS} == {"envad"}


@pytest.mark.parametrize("workload,server", WORKLOADS, ids=WORKLOAD_IDS)
def test_kubernetes_settings_load_in_envad_serve(workload, server, monkeypatch) -> None:
    named = {v for v in server.env if v.startswith("ENVAD_")}
    assert named <= SETTINGS_VARIABLES, named - SETTINGS_VARIABLES
    config = served_config(server, monkeypatch)
    assert config.remote and config.role in READY_ON
    secrets = {v["name"]: v["valueFrom"]["secretKeyRef"] for v in server.spec["env"]
               if "secretKeyRef" in v.get("valueFrom", {})}
    assert set(secrets) == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    assert all(ref["key"] == name and ref["name"] == "envad-s3" for name, ref in secrets.items())
    assert not {"aws_access_key_id", "aws_secret_access_key"} & set(
        parse_storage_options(server.env.get("ENVAD_STORAGE_OPTIONS", "")))
    assert FROM_SECRET not in [v for k, v in server.env.items() if k.startswith("ENVAD_")]
    # the image's user, and the cache volume writable by it
    uid = re.search(r"useradd --uid (\d+)", (ROOT / "Dockerfile").read_text())
    pod = workload["spec"]["template"]["spec"]["securityContext"]
    assert uid and pod["runAsUser"] == pod["fsGroup"] == int(uid[1])
    (mount,) = server.spec["volumeMounts"]
    assert config.cache_dir and config.cache_dir.is_relative_to(mount["mountPath"])


def test_kubernetes_one_writer_replaced_with_recreate(monkeypatch) -> None:
    writers = [w for w, s in WORKLOADS if served_config(s, monkeypatch).role == "writer"]
    assert len(writers) == 1, [w["metadata"]["name"] for w in writers]
    (writer,) = writers
    assert writer["spec"]["replicas"] == 1
    if writer["kind"] == "Deployment":
        assert writer["spec"]["strategy"]["type"] == "Recreate"
    scaled = [d["spec"]["scaleTargetRef"]["name"] for _, d in kubernetes()
              if d["kind"] == "HorizontalPodAutoscaler"]
    assert writer["metadata"]["name"] not in scaled
    assert "reader" in [served_config(s, monkeypatch).role for _, s in WORKLOADS]


@pytest.mark.parametrize("workload,server", WORKLOADS, ids=WORKLOAD_IDS)
def test_kubernetes_probes_ask_the_registered_health_names(workload, server,
                                                         monkeypatch) -> None:
    config = served_config(server, monkeypatch)
    spec = server.spec
    assert spec["readinessProbe"]["grpc"] == {"port": config.port,
                                              "service": READY_ON[config.role]}
    for probe in ("livenessProbe", "startupProbe"):
        assert spec[probe]["grpc"].get("service", "") == "", probe
        assert spec[probe]["grpc"]["port"] == config.port, probe
    container_ports = {p["name"]: p["containerPort"] for p in spec["ports"]}
    assert container_ports["grpc"] == config.port
    if config.metrics_port:
        assert container_ports["metrics"] == config.metrics_port
        assert config.metrics_host == "0.0.0.0"     # else only the pod itself can scrape it
    # the drain on SIGTERM fits in the pod's grace period
    assert workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > \
        config.grace_seconds
    # the thread budget is the CPU the pod asked for (os.cpu_count() sees the node's)
    assert config.threads == int(spec["resources"]["requests"]["cpu"])


def services_of(workload: dict) -> list[dict]:
    labels = workload["spec"]["template"]["metadata"]["labels"]
    return [d for _, d in kubernetes() if d["kind"] == "Service"
            and d["spec"]["selector"].items() <= labels.items()]


@pytest.mark.parametrize("workload,server", WORKLOADS, ids=WORKLOAD_IDS)
def test_kubernetes_each_role_has_its_service(workload, server, monkeypatch) -> None:
    config = served_config(server, monkeypatch)
    (service,) = services_of(workload)
    container_ports = {p["name"]: p["containerPort"] for p in server.spec["ports"]}
    (port,) = service["spec"]["ports"]
    assert container_ports.get(port["targetPort"], port["targetPort"]) == config.port
    # readers: DNS answers every ready pod, for the clients' round_robin
    assert (service["spec"].get("clusterIP") == "None") == (config.role == "reader")


def test_kubernetes_readers_name_the_writer_service_and_the_writer_itself(monkeypatch) -> None:
    """Readers name the writer's Service in their refusals; the writer's identity in the
    lease is its pod's own address, so that a second writer pod refuses to start."""
    configs = [(w, served_config(s, monkeypatch)) for w, s in WORKLOADS]
    (writer, config) = next((w, c) for w, c in configs if c.role == "writer")
    (service,) = services_of(writer)
    address = f"{service['metadata']['name']}:{service['spec']['ports'][0]['port']}"
    assert {c.writer_address for _, c in configs if c.role == "reader"} == {address}
    assert config.writer_address == f"{POD_FIELDS['status.podIP']}:{config.port}"


def test_kubernetes_readers_scale_on_cpu(monkeypatch) -> None:
    (autoscaler,) = [d for _, d in kubernetes() if d["kind"] == "HorizontalPodAutoscaler"]
    target = autoscaler["spec"]["scaleTargetRef"]
    (workload, server) = next((w, s) for w, s in WORKLOADS
                              if w["metadata"]["name"] == target["name"])
    assert target["kind"] == workload["kind"]
    assert served_config(server, monkeypatch).role == "reader"
    assert [m["resource"]["name"] for m in autoscaler["spec"]["metrics"]] == ["cpu"]
    assert "cpu" in server.spec["resources"]["requests"]
    assert autoscaler["spec"]["minReplicas"] >= 2
