"""Encoder files that do not match what the store holds: the server refuses them with a
reason, keeps (or starts) serving a consistent state, and never exits."""

from __future__ import annotations

import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import SERVICE, ServerHandle
from tiny_encoder import build_tiny_encoder, synthetic_images

IMAGE = synthetic_images("normal", 1, seed=4)[0]


@pytest.fixture
def fitted(fitted_server) -> ServerHandle:
    return fitted_server


def health_of(server: ServerHandle) -> int:
    with grpc.insecure_channel(server.address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=5).status


def restart_with(server: ServerHandle, **encoder) -> pb_grpc.AnomalyServiceStub:
    server.stop()
    build_tiny_encoder(server.models_dir / "tiny-test.onnx", model_id="tiny-test", **encoder)
    server.start(wait_service=False)
    return pb_grpc.AnomalyServiceStub(server.channel())


def test_encoder_of_another_dimension_starts_not_serving_with_both_dimensions(fitted):
    """Item 3: a same-id file embedding 8-d vectors over a 16-d table: the server starts,
    health says NOT_SERVING, every RPC answers FAILED_PRECONDITION naming both sizes."""
    stub = restart_with(fitted, dim=8)
    assert health_of(fitted) == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.RpcError) as caught:
        stub.Score(pb.ScoreRequest(images=[pb.Image(data=IMAGE)]), timeout=30)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "16-d" in caught.value.details() and "8-d" in caught.value.details()
    hint = stub.GetInfo(pb.GetInfoRequest(), timeout=10).hint
    assert "16-d" in hint and "8-d" in hint
    with pytest.raises(grpc.RpcError) as caught:
        stub.ActivateModel(pb.ActivateModelRequest(model_id="tiny-test"), timeout=30)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_same_id_new_weights_are_refused_not_mixed_with_the_old_bundle(fitted):
    """Item 4: new weights under the same model id never serve with the bundle and table
    built from the old ones: at restart the model is refused with both hashes named."""
    stub = pb_grpc.AnomalyServiceStub(fitted.channel())
    old = stub.Score(pb.ScoreRequest(images=[pb.Image(data=IMAGE)]), timeout=30).provenance
    stub = restart_with(fitted, seed=9)
    assert health_of(fitted) == health_pb2.HealthCheckResponse.NOT_SERVING
    with pytest.raises(grpc.RpcError) as caught:
        stub.Score(pb.ScoreRequest(images=[pb.Image(data=IMAGE)]), timeout=30)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert old.model_sha256[:12] in caught.value.details()


def test_weights_replaced_while_serving_keep_answers_consistent(fitted):
    """Item 4, live: the file is overwritten with other weights while the server runs;
    every answer still pairs the weights it was embedded with and their own bundle."""
    stub = pb_grpc.AnomalyServiceStub(fitted.channel())
    request = pb.ScoreRequest(images=[pb.Image(data=IMAGE)])
    before = stub.Score(request, timeout=30)
    build_tiny_encoder(fitted.models_dir / "tiny-test.onnx", model_id="tiny-test", seed=9)
    deadline = time.monotonic() + 3.0           # several refresh periods (0.3 s)
    while time.monotonic() < deadline:
        answer = stub.Score(request, timeout=30)
        assert answer.provenance.model_sha256 == before.provenance.model_sha256
        assert answer.provenance.bundle_id == before.provenance.bundle_id
        assert answer.results[0].ensemble == pytest.approx(before.results[0].ensemble)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Embed(pb.EmbedRequest(images=[pb.Image(data=IMAGE)], model_id="tiny-test"),
                   timeout=30)
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    # ListModels names the weights that serve: the replaced file is listed as it is, not
    # active, and the serving weights (the old file's) are the active entry
    listed = stub.ListModels(pb.ListModelsRequest(), timeout=10).models
    active = [m for m in listed if m.active]
    assert [m.sha256 for m in active] == [before.provenance.model_sha256]
    replaced = [m for m in listed if m.model_id == "tiny-test" and not m.active]
    assert replaced and replaced[0].sha256 != before.provenance.model_sha256
