"""A fitted server shared by a module's reliability tests: each test sends hostile or
faulty input to a real `envad serve` on loopback and checks what every client gets."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from envad.records import MIN_FIT_ROWS
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import ServerHandle
from tiny_encoder import synthetic_images

NORMAL_ENVS = ("cam-a", "cam-b")


def fit_normal_rows(stub: pb_grpc.AnomalyServiceStub, count: int = 80) -> None:
    """Ingest `count` normal training rows and fit the default detectors on them."""
    images = synthetic_images("normal", count, seed=1)
    items = [pb.IngestItem(image=pb.Image(data=d, env=NORMAL_ENVS[i % 2]), split="train")
             for i, d in enumerate(images)]
    summary = stub.Ingest(iter([pb.IngestRequest(items=items[i:i + 20])
                                for i in range(0, len(items), 20)]), timeout=60)
    assert summary.inserted == count, summary
    stub.Fit(pb.FitRequest(seed=0, allow_few_rows=count < MIN_FIT_ROWS), timeout=120)


@pytest.fixture(scope="module")
def shared_server(tmp_path_factory, tiny_model_path) -> Iterator[ServerHandle]:
    """One fitted server for the whole module (tests add rows under their own ids)."""
    root = tmp_path_factory.mktemp("reliability")
    models_dir = root / "models"
    models_dir.mkdir()
    (models_dir / tiny_model_path.name).write_bytes(tiny_model_path.read_bytes())
    handle = ServerHandle(root / "data", models_dir)
    handle.log_path = root / "server.log"
    handle.start()
    fit_normal_rows(pb_grpc.AnomalyServiceStub(handle.channel()))
    yield handle
    handle.stop()


@pytest.fixture(scope="module")
def stub(shared_server) -> pb_grpc.AnomalyServiceStub:
    return pb_grpc.AnomalyServiceStub(shared_server.channel())
