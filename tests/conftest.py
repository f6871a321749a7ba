"""Shared fixtures: a tiny real ONNX encoder and a real `envad serve` process on loopback."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

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


@dataclass
class ServerHandle:
    """A real `envad serve` subprocess; restartable on the same data and models dirs."""

    data_dir: Path
    models_dir: Path
    extra_env: dict = field(default_factory=dict)
    process: subprocess.Popen | None = None
    port: int = 0
    log: deque = field(default_factory=lambda: deque(maxlen=400))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, *, wait_service: bool = True) -> "ServerHandle":
        env = dict(os.environ, ENVAD_REFRESH_SECONDS="0.3", ENVAD_LOG_FORMAT="text",
                   **self.extra_env)
        cmd = [sys.executable, "-m", "envad.client.cli", "serve", "--port", str(self.port),
               "--data-dir", str(self.data_dir), "--models-dir", str(self.models_dir)]
        self.process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True, env=env)
        deadline = time.monotonic() + 60
        for line in self.process.stdout:
            self.log.append(line)
            if line.startswith("envad serving on "):
                self.port = int(line.rsplit(":", 1)[1])
                break
            if time.monotonic() > deadline:
                break
        else:
            raise RuntimeError("server did not start:\n" + "".join(self.log))
        threading.Thread(target=self._pump, daemon=True).start()
        if wait_service:
            status = wait_for_health(self.address, process=self.process)
            assert status == health_pb2.HealthCheckResponse.SERVING, "".join(self.log)
        return self

    def _pump(self) -> None:
        for line in self.process.stdout:
            self.log.append(line)

    def stop(self, timeout: float = 30) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.terminate()
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

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
