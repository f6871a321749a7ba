"""Server process behaviour: no-model start, auth, metrics, TLS, graceful shutdown."""

from __future__ import annotations

import shutil
import threading
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import ServerHandle, free_port, self_signed_certificate, wait_for_health
from tiny_encoder import synthetic_images


def health_status(channel, service="envad.v1.AnomalyService"):
    return health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=service), timeout=5).status


def test_fresh_server_without_model_starts_and_picks_up_a_model(tmp_path, tiny_model_path):
    handle = ServerHandle(tmp_path / "data", tmp_path / "models").start(wait_service=False)
    try:
        channel = handle.channel()
        assert health_status(channel, "") == health_pb2.HealthCheckResponse.SERVING
        assert health_status(channel) == health_pb2.HealthCheckResponse.NOT_SERVING
        stub = pb_grpc.AnomalyServiceStub(channel)
        info = stub.GetInfo(pb.GetInfoRequest(), timeout=5)
        assert not info.HasField("active_model") and str(tmp_path / "models") in info.hint
        assert list(stub.ListModels(pb.ListModelsRequest(), timeout=5).models) == []
        with pytest.raises(grpc.RpcError) as err:
            stub.Embed(pb.EmbedRequest(images=[pb.Image(data=b"x")]), timeout=5)
        assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        shutil.copy(tiny_model_path, tmp_path / "models" / "tiny.onnx")
        assert wait_for_health(handle.address, timeout=20) == \
            health_pb2.HealthCheckResponse.SERVING
        assert stub.GetInfo(pb.GetInfoRequest(), timeout=5).active_model.model_id == "tiny-test"
    finally:
        handle.stop()


def _server_with(tmp_path, tiny_model_path, **env) -> ServerHandle:
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_model_path, models / "tiny.onnx")
    return ServerHandle(tmp_path / "data", models, extra_env=env)


#: the guarded server's bearer token
TOKEN = "s3cret"


@pytest.fixture(scope="module")
def guarded(tmp_path_factory, tiny_model_path):
    """One `envad serve` behind every guard a deployment turns on (TLS, a bearer token, a
    metrics port), shared by the tests of each guard: (handle, certificate, metrics
    port), once the scoring service is SERVING over TLS."""
    folder = tmp_path_factory.mktemp("guarded")
    key, cert = self_signed_certificate(folder, "DNS:localhost,IP:127.0.0.1")
    port = free_port()
    handle = _server_with(folder, tiny_model_path, ENVAD_AUTH_TOKEN=TOKEN,
                          ENVAD_METRICS_PORT=str(port), ENVAD_TLS_CERT_FILE=str(cert),
                          ENVAD_TLS_KEY_FILE=str(key)).start(wait_service=False)
    try:
        with _secure(handle, cert) as channel:        # health needs no token
            deadline = time.monotonic() + 60
            while health_status(channel) != health_pb2.HealthCheckResponse.SERVING:
                assert time.monotonic() < deadline, "the guarded server never served"
                time.sleep(0.2)
        yield handle, cert, port
    finally:
        handle.stop()


def _secure(handle: ServerHandle, cert) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
    return grpc.secure_channel(handle.address, credentials)


def test_bearer_token_is_required_except_for_health(guarded):
    handle, cert, _ = guarded
    with _secure(handle, cert) as channel:
        assert health_status(channel) == health_pb2.HealthCheckResponse.SERVING
        stub = pb_grpc.AnomalyServiceStub(channel)
        with pytest.raises(grpc.RpcError) as err:
            stub.GetInfo(pb.GetInfoRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError):
            stub.GetInfo(pb.GetInfoRequest(), timeout=5,
                         metadata=[("authorization", "Bearer wrong")])
        info = stub.GetInfo(pb.GetInfoRequest(), timeout=5,
                            metadata=[("authorization", f"Bearer {TOKEN}")])
        assert info.active_model.model_id == "tiny-test"


def test_metrics_endpoint_counts_requests(guarded):
    """Counts of Embed and ActivateModel, which the other tests of the shared server
    never call."""
    handle, cert, port = guarded
    token = [("authorization", f"Bearer {TOKEN}")]
    with _secure(handle, cert) as channel:
        stub = pb_grpc.AnomalyServiceStub(channel)
        images = synthetic_images("normal", 3)
        stub.Embed(pb.EmbedRequest(images=[pb.Image(data=d) for d in images]), timeout=10,
                   metadata=token)
        with pytest.raises(grpc.RpcError):
            stub.ActivateModel(pb.ActivateModelRequest(model_id="missing"), timeout=5,
                               metadata=token)
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'envad_requests_total{code="OK",method="Embed"} 1.0' in text
    assert 'envad_requests_total{code="NOT_FOUND",method="ActivateModel"} 1.0' in text
    assert "envad_request_seconds_bucket" in text and "envad_batch_images_count" in text


def test_tls(guarded):
    handle, cert, _ = guarded
    with _secure(handle, cert) as channel:
        stub = pb_grpc.AnomalyServiceStub(channel)
        assert stub.GetInfo(pb.GetInfoRequest(), timeout=10,
                            metadata=[("authorization", f"Bearer {TOKEN}")]).server_version
    with grpc.insecure_channel(handle.address) as plain:
        with pytest.raises(grpc.RpcError):
            pb_grpc.AnomalyServiceStub(plain).GetInfo(pb.GetInfoRequest(), timeout=3)


def test_sigterm_drains_in_flight_requests(envad_process):
    stub = pb_grpc.AnomalyServiceStub(envad_process.channel())
    images = synthetic_images("normal", 400, seed=9)
    outcome = {}

    def slow_ingest():
        def requests():
            for i in range(0, len(images), 20):
                time.sleep(0.05)
                yield pb.IngestRequest(items=[pb.IngestItem(image=pb.Image(data=d), split="train")
                                              for d in images[i:i + 20]])
        outcome["summary"] = stub.Ingest(requests(), timeout=60)

    thread = threading.Thread(target=slow_ingest)
    thread.start()
    time.sleep(0.3)
    assert envad_process.stop() == 0
    thread.join(60)
    assert outcome["summary"].inserted == 400
    envad_process.start()
    info = pb_grpc.AnomalyServiceStub(envad_process.channel()).GetInfo(pb.GetInfoRequest(),
                                                                       timeout=5)
    assert info.total_rows == 400


def test_stop_closes_the_engine_only_after_the_last_refresh(tmp_path, tiny_model_path):
    """A refresh in progress when the server stops finishes before the engine closes (both
    save indexes); the in-process server is real, its refresh only slowed down."""
    from envad.server.app import start
    from envad.server.config import ServerConfig

    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_model_path, models / "tiny.onnx")
    running = start(ServerConfig(port=0, data_dir=tmp_path / "data", models_dir=models,
                                 refresh_seconds=0.01))
    events: list[str] = []
    refreshing = threading.Event()
    real_refresh, real_close = running.engine.refresh, running.engine.close

    def slow_refresh() -> None:
        events.append("refresh started")
        refreshing.set()
        time.sleep(0.5)
        real_refresh()
        events.append("refresh ended")

    def recorded_close() -> None:
        events.append("close")
        real_close()

    running.engine.refresh = slow_refresh
    running.engine.close = recorded_close
    assert refreshing.wait(10)
    running.stop(grace=0)
    assert events[-1] == "close"
    assert events[-2] == "refresh ended"
    assert running.refresher is not None and not running.refresher.is_alive()


def test_a_refresh_under_way_at_stop_leaves_the_service_not_serving(tmp_path, tiny_model_path):
    """`stop` sets NOT_SERVING first; a refresh pass that was under way then ends by
    setting the health from the engine, still ready: it must not set SERVING again for
    the rest of the drain (a real in-process server, its refresh only slowed down)."""
    from envad.server.app import SERVICE_NAME, start
    from envad.server.config import ServerConfig

    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_model_path, models / "tiny.onnx")
    running = start(ServerConfig(port=0, data_dir=tmp_path / "data", models_dir=models,
                                 refresh_seconds=0.01))
    refreshing = threading.Event()
    real_refresh, real_set = running.engine.refresh, running.health.set
    statuses: list[int] = []

    def slow_refresh() -> None:
        refreshing.set()
        time.sleep(0.5)
        real_refresh()

    def recorded_set(service: str, status) -> None:
        if service == SERVICE_NAME:
            statuses.append(status)
        real_set(service, status)

    running.engine.refresh = slow_refresh
    running.health.set = recorded_set
    assert refreshing.wait(10)
    running.stop(grace=0)
    assert statuses == [health_pb2.HealthCheckResponse.NOT_SERVING]


def test_stop_closes_the_engine_only_after_the_handlers_in_flight_return(
        tmp_path, tiny_model_path):
    """gRPC's stop does not wait for handlers still running; the server's does, so no
    handler uses the engine while it closes (a real server, one handler slowed down)."""
    from envad.server.app import start
    from envad.server.config import ServerConfig

    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_model_path, models / "tiny.onnx")
    running = start(ServerConfig(port=0, data_dir=tmp_path / "data", models_dir=models))
    events: list[str] = []
    in_handler = threading.Event()
    real_info, real_close = running.engine.info, running.engine.close

    def slow_info():
        in_handler.set()
        time.sleep(0.5)
        info = real_info()
        events.append("handler returned")
        return info

    def recorded_close() -> None:
        events.append("close")
        real_close()

    running.engine.info = slow_info
    running.engine.close = recorded_close
    channel = grpc.insecure_channel(f"127.0.0.1:{running.port}")
    caller = threading.Thread(target=lambda: _ignore_rpc_error(
        lambda: pb_grpc.AnomalyServiceStub(channel).GetInfo(pb.GetInfoRequest(), timeout=10)))
    caller.start()
    assert in_handler.wait(10)
    running.stop(grace=0)
    caller.join(10)
    channel.close()
    assert events == ["handler returned", "close"]


def _ignore_rpc_error(call) -> None:
    try:
        call()
    except grpc.RpcError:      # the stop cancels the call; the handler still runs to its end
        pass
