"""Shared fixtures: a tiny real ONNX encoder and a real `envad serve` process on loopback."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.client.server_process import LocalServer
from tiny_encoder import build_tiny_encoder

SERVICE = "envad.v1.AnomalyService"


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> Path:
    """A small encoder file in the documented model format (32 px input, 16-d output)."""
    return build_tiny_encoder(tmp_path_factory.mktemp("models") / "tiny-test.onnx")


def wait_for_health(address: str, service: str = SERVICE, timeout: float = 60.0,
                    process: subprocess.Popen | None = None) -> int:
    """Poll grpc.health.v1 until `service` reports SERVING; returns the final status."""
    deadline = time.monotonic() + timeout
    status = health_pb2.HealthCheckResponse.UNKNOWN
    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"server exited with code {process.returncode}")
            try:
                status = stub.Check(health_pb2.HealthCheckRequest(service=service),
                                    timeout=2).status
                if status == health_pb2.HealthCheckResponse.SERVING:
                    return status
            except grpc.RpcError:
                pass
            time.sleep(0.1)
    return status


class ServerHandle(LocalServer):
    """A real `envad serve` subprocess on 127.0.0.1; restartable on the same dirs and port."""

    def __init__(self, data_dir: Path, models_dir: Path, extra_env: dict | None = None):
        super().__init__(data_dir, models_dir,
                         env={"ENVAD_REFRESH_SECONDS": "0.3", **(extra_env or {})})

    def restart(self) -> "ServerHandle":
        self.stop()
        return self.start()

    def channel(self) -> grpc.Channel:
        limit = 256 * 1024 * 1024
        return grpc.insecure_channel(self.address, options=[
            ("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)])


@pytest.fixture
def envad_server(tmp_path, tiny_model_path) -> ServerHandle:
    """A started server with the tiny model in its models dir and an empty store."""
    models_dir = tmp_path / "models"
    models_dir.mkdir()
    (models_dir / tiny_model_path.name).write_bytes(tiny_model_path.read_bytes())
    handle = ServerHandle(tmp_path / "data", models_dir)
    handle.start()
    yield handle
    handle.stop()


@pytest.fixture
def unused_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def fitted_server(envad_server) -> ServerHandle:
    """`envad_server` holding 120 normal training rows and a fitted bundle."""
    from envad.v1 import envad_pb2 as pb
    from envad.v1 import envad_pb2_grpc as pb_grpc
    from tiny_encoder import synthetic_images

    stub = pb_grpc.AnomalyServiceStub(envad_server.channel())
    images = synthetic_images("normal", 120, seed=1)
    envs = ("cam-a", "cam-b")
    batches = [pb.IngestRequest(items=[
        pb.IngestItem(image=pb.Image(data=d, env=envs[(i + j) % 2]), split="train")
        for j, d in enumerate(images[i:i + 20])]) for i in range(0, len(images), 20)]
    summary = stub.Ingest(iter(batches), timeout=60)
    assert summary.inserted == len(images), summary
    stub.Fit(pb.FitRequest(seed=0), timeout=120)
    return envad_server
