"""A fitted server shared by a module's reliability tests: each test sends hostile or
faulty input to a real `envad serve` on loopback and checks what every client gets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import ServerHandle, fit_normal_rows, models_dir_in


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory, tiny_model_path) -> Iterator[ServerHandle]:
    """One fitted server for the whole module (tests add rows under their own ids)."""
    root = tmp_path_factory.mktemp("reliability")
    handle = ServerHandle(root / "data", models_dir_in(root, tiny_model_path))
    handle.log_path = root / "server.log"
    handle.start()
    fit_normal_rows(pb_grpc.AnomalyServiceStub(handle.channel()))
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def stub(shared_server) -> pb_grpc.AnomalyServiceStub:
    return pb_grpc.AnomalyServiceStub(shared_server.channel())
