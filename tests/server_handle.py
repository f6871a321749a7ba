"""Test helpers for a real envad server: restartable handles and a health poll.

`ServerHandle` runs `envad serve` as a subprocess (for tests of the process itself: its
exit code, its signals, its log, a kill -9). `InProcessServer` runs the same server
(server/app.py's `start`, the code `envad serve` runs after parsing its flags) in the test
process, so a test that only talks gRPC to it does not pay a Python start-up and the
server stack's import per server.

A module of its own (not conftest.py) so that test modules can import it by name whatever
other conftest files pytest has loaded.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.client.server_process import LocalServer
from envad.records import MIN_FIT_ROWS
from envad.server.app import WRITES_NAME, RunningServer, start
from envad.server.config import load_config
from envad.v1 import envad_pb2 as pb
from tiny_encoder import synthetic_images

SERVICE = "envad.v1.AnomalyService"
NORMAL_ENVS = ("cam-a", "cam-b")
#: how often a test server picks up external writes and model files (the default is 2 s)
TEST_SETTINGS = {"ENVAD_REFRESH_SECONDS": "0.3"}
#: gRPC message limit of the test channels
CHANNEL_LIMIT = 256 * 1024 * 1024


def open_channel(address: str) -> grpc.Channel:
    return grpc.insecure_channel(address, options=[
        ("grpc.max_send_message_length", CHANNEL_LIMIT),
        ("grpc.max_receive_message_length", CHANNEL_LIMIT)])


def models_dir_in(root: Path, tiny_model_path: Path) -> Path:
    """`root/models` holding the tiny encoder file (created when missing)."""
    models = root / "models"
    models.mkdir(parents=True, exist_ok=True)
    (models / tiny_model_path.name).write_bytes(tiny_model_path.read_bytes())
    return models


def fit_normal_rows(stub, count: int = 80) -> None:
    """Ingest `count` normal training rows of NORMAL_ENVS in turn, and Fit the default
    detectors on them."""
    images = synthetic_images("normal", count, seed=1)
    items = [pb.IngestItem(image=pb.Image(data=d, env=NORMAL_ENVS[i % 2]), split="train")
             for i, d in enumerate(images)]
    summary = stub.Ingest(iter([pb.IngestRequest(items=items[i:i + 20])
                                for i in range(0, len(items), 20)]), timeout=60)
    assert summary.inserted == count, summary
    stub.Fit(pb.FitRequest(seed=0, allow_few_rows=count < MIN_FIT_ROWS), timeout=120)


def ingest_commit(stub, prefix: str, seed: int, count: int = 8) -> int:
    """One Ingest call (one commit) of `count` normal images of camera cam-a with ids
    PREFIX-0, PREFIX-1, ...; the number inserted."""
    images = synthetic_images("normal", count, seed=seed)
    items = [pb.IngestItem(image=pb.Image(data=d, id=f"{prefix}-{i}", env="cam-a"),
                           split="train") for i, d in enumerate(images)]
    return stub.Ingest(iter([pb.IngestRequest(items=items)]), timeout=60).inserted


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def self_signed_certificate(folder: Path, alt_names: str) -> tuple[Path, Path]:
    """(key, certificate) PEM files in `folder` made by openssl: CN localhost, the
    subjectAltName `alt_names` (e.g. "DNS:localhost,IP:127.0.0.1"), valid one day."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
                    "-addext", f"subjectAltName={alt_names}"],
                   check=True, capture_output=True)
    return key, cert


def score_calls(server: InProcessServer) -> float:
    """Score calls the in-process `server` answered with OK (its envad_requests metric)."""
    assert server.running is not None
    registry = server.running.engine.metrics.registry
    return registry.get_sample_value("envad_requests_total",
                                     {"method": "Score", "code": "OK"}) or 0.0


def writes_health(handle) -> int:
    """The health status of the service's writes on the server `handle`."""
    return health_pb2_grpc.HealthStub(handle.channel()).Check(
        health_pb2.HealthCheckRequest(service=WRITES_NAME), timeout=10).status


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
        super().__init__(data_dir, models_dir, env={**TEST_SETTINGS, **(extra_env or {})})

    def restart(self) -> ServerHandle:
        self.stop()
        self.start()
        return self

    def channel(self) -> grpc.Channel:
        return open_channel(self.address)


class InProcessServer:
    """The envad server in this process on 127.0.0.1, with the settings `ServerHandle`
    gives its subprocess; restartable on the same directories and port. `stop` drains and
    closes as SIGTERM does in `envad serve` (returns 0, the exit code it would give)."""

    def __init__(self, data_dir: Path | str, models_dir: Path | str,
                 extra_env: dict | None = None):
        # a URI on object storage (s3://...) stays as it is
        self.data_dir = data_dir if "://" in str(data_dir) else Path(data_dir)
        self.models_dir = models_dir if "://" in str(models_dir) else Path(models_dir)
        self.host = "127.0.0.1"
        self.port = 0
        self.env = {**TEST_SETTINGS, **(extra_env or {})}
        self.running: RunningServer | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 120.0, wait_service: bool = True) -> InProcessServer:
        """Start; return once it listens and, by default, once the scoring service
        reports SERVING (as `ServerHandle.start`)."""
        config = load_config(env={**os.environ, **self.env}, overrides={
            "host": self.host, "port": self.port, "data_dir": self.data_dir,
            "models_dir": self.models_dir})
        self.running = start(config)
        self.port = self.running.port
        if not wait_service:
            return self
        status = wait_for_health(self.address, timeout=timeout)
        if status != health_pb2.HealthCheckResponse.SERVING:
            self.stop()
            raise RuntimeError(f"in-process server on {self.address} not serving: {status}")
        return self

    def stop(self) -> int:
        if self.running is not None:
            running, self.running = self.running, None
            running.stop(running.engine.config.grace_seconds)
        return 0

    def restart(self) -> InProcessServer:
        self.stop()
        return self.start()

    def channel(self) -> grpc.Channel:
        return open_channel(self.address)
