"""EnvadClient against a small scripted gRPC server started in the test (not envad's
server): retries and backoff, deadlines, error translation, bearer token, message
packing. The real server is exercised in test_library_server.py."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import grpc
import pytest

from envad.client import EnvadClient, RetryPolicy
from envad.client.errors import DeadlineExceeded
from envad.client.results import ImageInput, IngestInput
from envad.errors import FailedPrecondition, InvalidInput, NotFound, ResourceExhausted, Unavailable
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc

FAST = RetryPolicy(max_attempts=4, initial_backoff=0.01, max_backoff=0.05)


class ScriptedServicer(pb_grpc.AnomalyServiceServicer):
    """Fails each method with the scripted status codes first, then answers."""

    def __init__(self) -> None:
        self.script: dict[str, list[grpc.StatusCode]] = {}
        self.calls: dict[str, int] = {}
        self.metadata: list[dict] = []
        self.ingest_messages: list[int] = []
        self.lock = threading.Lock()

    def _enter(self, name, context):
        with self.lock:
            self.calls[name] = self.calls.get(name, 0) + 1
            self.metadata.append(dict(context.invocation_metadata()))
            pending = self.script.get(name) or []
            code = pending.pop(0) if pending else None
        if code is not None:
            context.abort(code, f"scripted {code.name}")

    def GetInfo(self, request, context):
        self._enter("GetInfo", context)
        return pb.GetInfoResponse(server_version="9.9", total_rows=3,
                                  env_counts=[pb.EnvCount(env="cam0", rows=3)])

    def ListModels(self, request, context):
        self._enter("ListModels", context)
        return pb.ListModelsResponse(models=[pb.ModelInfo(model_id="m", active=True,
                                                          training_envs=["a"])],
                                     models_dir="/models")

    def Fit(self, request, context):
        self._enter("Fit", context)
        time.sleep(1.0)
        return pb.FitResponse(bundle_id="b")

    def Ingest(self, request_iterator, context):
        self._enter("Ingest", context)
        received = 0
        for request in request_iterator:
            self.ingest_messages.append(len(request.items))
            received += len(request.items)
        return pb.IngestSummary(received=received, inserted=received)

    def Score(self, request, context):
        self._enter("Score", context)
        results = [pb.ImageScore(index=i, id=img.id or "x", env=img.env, ensemble=0.5,
                                 detectors=[pb.DetectorScore(detector="KNN", raw=1.0,
                                                             calibrated=0.5)])
                   for i, img in enumerate(request.images)]
        results[-1].error.CopyFrom(pb.ItemError(index=len(results) - 1, code="INVALID_ARGUMENT",
                                                message="cannot decode"))
        return pb.ScoreResponse(results=results, provenance=pb.Provenance(model_id="m"))


@pytest.fixture
def scripted():
    servicer = ScriptedServicer()
    server = grpc.server(futures.ThreadPoolExecutor(4))
    pb_grpc.add_AnomalyServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, f"127.0.0.1:{port}"
    server.stop(None)


def test_transient_failures_are_retried(scripted) -> None:
    servicer, address = scripted
    servicer.script["GetInfo"] = [grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED]
    with EnvadClient(address, retry=FAST) as client:
        info = client.info()
    assert servicer.calls["GetInfo"] == 3
    assert info.server_version == "9.9" and info.env_counts == {"cam0": 3}
    assert info.active_model is None and info.bundle is None


def test_retries_give_up_with_the_last_error(scripted) -> None:
    servicer, address = scripted
    servicer.script["ListModels"] = [grpc.StatusCode.RESOURCE_EXHAUSTED] * 10
    with EnvadClient(address, retry=FAST) as client, pytest.raises(ResourceExhausted):
        client.list_models()
    assert servicer.calls["ListModels"] == FAST.max_attempts


def test_reads_are_retried_by_grpc_at_most_five_times_writes_by_the_loop(scripted) -> None:
    """gRPC caps its attempts at 5 (gRFC A6); the client's loop, which the writes go
    through, makes as many as the policy says (envad.client.retry)."""
    servicer, address = scripted
    patient = RetryPolicy(max_attempts=8, initial_backoff=0.01, max_backoff=0.05)
    servicer.script["GetInfo"] = [grpc.StatusCode.UNAVAILABLE] * 10
    servicer.script["Ingest"] = [grpc.StatusCode.UNAVAILABLE] * 6
    with EnvadClient(address, retry=patient) as client:
        with pytest.raises(Unavailable):
            client.info()
        summary = client.ingest([IngestInput(ImageInput(data=b"x", id="a"))])
    assert servicer.calls["GetInfo"] == 5
    assert servicer.calls["Ingest"] == 7 and summary.inserted == 1


def test_writes_need_a_writer_when_several_servers_are_listed(scripted) -> None:
    servicer, address = scripted
    with EnvadClient(f"{address},{address}") as client:
        assert client.info().server_version == "9.9"        # reads are served
        for write in (lambda: client.ingest([IngestInput(ImageInput(data=b"x"))]),
                      lambda: client.fit(), lambda: client.set_label(["a"], "normal"),
                      lambda: client.activate_model("m"), lambda: client.reset_camera_stats(),
                      lambda: client.score([b"x"], store=True)):
            with pytest.raises(FailedPrecondition, match="lists 2 addresses: name the one "
                                                         "writer with --writer HOST:PORT"):
                write()
    assert "Ingest" not in servicer.calls and "Fit" not in servicer.calls
    with EnvadClient(f"{address},{address}", writer=address) as client:
        assert client.ingest([IngestInput(ImageInput(data=b"x"))]).inserted == 1


def test_permanent_errors_are_not_retried(scripted) -> None:
    servicer, address = scripted
    servicer.script["GetInfo"] = [grpc.StatusCode.NOT_FOUND]
    with EnvadClient(address, retry=FAST) as client, pytest.raises(NotFound, match="scripted"):
        client.info()
    assert servicer.calls["GetInfo"] == 1


def test_deadline(scripted) -> None:
    servicer, address = scripted
    with EnvadClient(address, retry=FAST) as client, pytest.raises(DeadlineExceeded):
        client.fit(timeout=0.2)


def test_unreachable_server_is_unavailable() -> None:
    with EnvadClient("127.0.0.1:9", retry=FAST, timeout=2) as client:
        with pytest.raises(Unavailable):
            client.info()


def test_bearer_token_is_sent(scripted, monkeypatch) -> None:
    servicer, address = scripted
    with EnvadClient(address, token="s3cret") as client:
        client.info()
    assert servicer.metadata[-1]["authorization"] == "Bearer s3cret"
    monkeypatch.setenv("ENVAD_TOKEN", "from-env")
    with EnvadClient(address) as client:
        client.list_models()
    assert servicer.metadata[-1]["authorization"] == "Bearer from-env"


def test_ingest_packs_messages_and_retries_whole_stream(scripted) -> None:
    servicer, address = scripted
    servicer.script["Ingest"] = [grpc.StatusCode.UNAVAILABLE]
    items = [IngestInput(ImageInput(data=bytes(400), id=f"i{n}")) for n in range(10)]
    with EnvadClient(address, retry=FAST, max_message_bytes=1500) as client:
        summary = client.ingest(items)
    assert summary.received == summary.inserted == 10
    assert servicer.calls["Ingest"] == 2
    # the successful stream: 10 items of ~656 bytes packed two per message
    assert servicer.ingest_messages[-5:] == [2, 2, 2, 2, 2]


def test_score_results_are_typed(scripted, tmp_path) -> None:
    servicer, address = scripted
    path = tmp_path / "img.png"
    path.write_bytes(b"\x89PNG fake")
    with EnvadClient(address) as client:
        result = client.score([ImageInput(b"abc", id="a", env="cam"), b"raw", path])
    first, _, last = result.results
    assert first.ok and first.id == "a" and first.env == "cam"
    assert first.detector_scores() == {"KNN": 1.0}
    assert first.detector_scores(calibrated=True) == {"KNN": 0.5}
    assert not last.ok and last.error.code == "INVALID_ARGUMENT"
    assert result.provenance.model_id == "m"


def test_bad_arguments_fail_before_the_wire(scripted) -> None:
    _, address = scripted
    with EnvadClient(address) as client:
        with pytest.raises(InvalidInput, match="exactly one"):
            client.search(image=b"x", id="y")
        with pytest.raises(InvalidInput, match="cannot use"):
            client.score([42])
    with pytest.raises(InvalidInput, match="client certificate"):
        EnvadClient(address, tls=True, client_certificate=b"x")
