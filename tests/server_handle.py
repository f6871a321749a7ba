"""Test helpers for a real `envad serve` process: a restartable handle and a health poll.

A module of its own (not conftest.py) so that test modules can import it by name whatever
other conftest files pytest has loaded.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.client.server_process import LocalServer
from envad.records import MIN_FIT_ROWS
from envad.v1 import envad_pb2 as pb
from tiny_encoder import synthetic_images

SERVICE = "envad.v1.AnomalyService"
NORMAL_ENVS = ("cam-a", "cam-b")


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

    def restart(self) -> ServerHandle:
        self.stop()
        self.start()
        return self

    def channel(self) -> grpc.Channel:
        limit = 256 * 1024 * 1024
        return grpc.insecure_channel(self.address, options=[
            ("grpc.max_send_message_length", limit), ("grpc.max_receive_message_length", limit)])
