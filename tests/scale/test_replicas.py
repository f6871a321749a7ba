"""One writer and two readers on one store on object storage (moto's S3 server on
loopback): writes go to the writer only, the readers follow its rows, bundles, labels
and camera statistics, and give the same answers as the writer at the same version; a
second writer on the store refuses to start."""

from __future__ import annotations

import threading
import time

import grpc
import numpy as np
import pytest
from s3_emulator import in_process, local_models

from envad.client.library import EnvadClient
from envad.errors import EnvadError, FailedPrecondition
from envad.records import ImageInput, IngestInput
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import (
    TEST_SETTINGS,
    InProcessServer,
    fit_normal_rows,
    ingest_commit,
    score_calls,
    writes_health,
)
from tiny_encoder import synthetic_images

SERVING, NOT_SERVING = 1, 2
#: the test servers refresh every 0.3 s (server_handle.TEST_SETTINGS): a reader follows
#: a write within this much, with margin for a loaded machine
FOLLOW_SECONDS = 30.0


@pytest.fixture
def replicas(s3_options, s3_uri, tmp_path, tiny_model_path):
    """A writer and two readers on one URI, each with a cache of its own."""
    models = local_models(tmp_path, tiny_model_path)
    writer = in_process(s3_uri, models, tmp_path / "cache-w", s3_options, role="writer").start()
    readers = []
    try:
        for n in (1, 2):
            readers.append(in_process(s3_uri, models, tmp_path / f"cache-r{n}", s3_options,
                                      role="reader", writer_address=writer.address).start())
        yield writer, readers
    finally:
        for server in [*readers, writer]:
            server.stop()


def _stub(server: InProcessServer) -> pb_grpc.AnomalyServiceStub:
    return pb_grpc.AnomalyServiceStub(server.channel())


def _score(server: InProcessServer, images: list[bytes]) -> pb.ScoreResponse:
    return _stub(server).Score(pb.ScoreRequest(
        images=[pb.Image(data=d, env="cam-a") for d in images]), timeout=60)


def _until(check, what: str) -> None:
    deadline = time.monotonic() + FOLLOW_SECONDS
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"readers did not follow the writer within {FOLLOW_SECONDS} s: {what}")


def _same_answer(writer: InProcessServer, readers: list[InProcessServer],
                 probe: list[bytes]) -> bool:
    """Whether every reader scores `probe` as the writer does, at the writer's version
    and bundle (to float32 rounding)."""
    expected = _score(writer, probe)
    for reader in readers:
        try:
            got = _score(reader, probe)
        except grpc.RpcError as exc:     # no bundle yet: the reader has not followed
            assert exc.code() == grpc.StatusCode.FAILED_PRECONDITION, exc
            return False
        if (got.provenance.table_version != expected.provenance.table_version
                or got.provenance.bundle_id != expected.provenance.bundle_id):
            return False
        if not np.allclose([r.ensemble for r in got.results],
                           [r.ensemble for r in expected.results], rtol=1e-6, atol=1e-7):
            return False
    return True


def test_readers_refuse_writes_and_name_the_writer(replicas) -> None:
    writer, readers = replicas
    reader = readers[0]
    assert writes_health(reader) == NOT_SERVING and writes_health(writer) == SERVING
    with pytest.raises(grpc.RpcError) as refused:
        ingest_commit(_stub(reader), "to-reader", seed=3)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    details = str(refused.value.details())
    assert "reader" in details and writer.address in details
    with pytest.raises(grpc.RpcError) as refused:
        _stub(reader).Score(pb.ScoreRequest(images=[pb.Image(
            data=synthetic_images("normal", 1, seed=4)[0], env="cam-a")], store=True),
            timeout=30)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    for method in ("Fit", "SetLabel", "ResetCameraStats", "ActivateModel"):
        request = {"Fit": pb.FitRequest(), "SetLabel": pb.SetLabelRequest(ids=["x"], label="y"),
                   "ResetCameraStats": pb.ResetCameraStatsRequest(),
                   "ActivateModel": pb.ActivateModelRequest(model_id="tiny")}[method]
        with pytest.raises(grpc.RpcError) as refused:
            getattr(_stub(reader), method)(request, timeout=30)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION, method
    assert ingest_commit(_stub(writer), "to-writer", seed=3) == 8


def test_readers_follow_rows_bundles_labels_and_statistics(replicas) -> None:
    writer, readers = replicas
    probe = synthetic_images("normal", 3, seed=9) + synthetic_images("odd", 3, seed=9)
    fit_normal_rows(_stub(writer), count=60)
    _until(lambda: _same_answer(writer, readers, probe), "rows and the first bundle")

    # a Fit while both readers score: none of their calls fails, both take the new bundle
    failures: list[Exception] = []
    stop = threading.Event()

    def score_loop(reader: InProcessServer) -> None:
        while not stop.is_set():
            try:
                _score(reader, probe[:2])
            except grpc.RpcError as exc:
                failures.append(exc)

    threads = [threading.Thread(target=score_loop, args=(r,)) for r in readers]
    for thread in threads:
        thread.start()
    try:
        refit = _stub(writer).Fit(pb.FitRequest(seed=1, allow_few_rows=True), timeout=120)
        new_bundle = refit.provenance.bundle_id
        _until(lambda: all(_score(r, probe[:1]).provenance.bundle_id == new_bundle
                           for r in readers), "the refit's bundle")
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert failures == []

    # new rows of cam-a move its statistics on the writer; the readers follow them
    assert ingest_commit(_stub(writer), "later", seed=5, count=16) == 16
    _until(lambda: _same_answer(writer, readers, probe), "new rows and camera statistics")
    found = _stub(readers[1]).Search(pb.SearchRequest(
        image=synthetic_images("normal", 16, seed=5)[3], k=1), timeout=30).neighbors
    assert found[0].id == "later-3"

    # a label set on the writer reaches the readers' evidence
    _stub(writer).SetLabel(pb.SetLabelRequest(ids=["later-3"], label="reviewed-normal"),
                           timeout=30)

    def labelled() -> bool:
        return all(_stub(r).Search(pb.SearchRequest(
            image=synthetic_images("normal", 16, seed=5)[3], k=1), timeout=30
        ).neighbors[0].label == "reviewed-normal" for r in readers)
    _until(labelled, "the writer's label")


def test_a_second_writer_refuses_to_start_and_names_the_first(
        s3_options, s3_uri, tmp_path, tiny_model_path) -> None:
    models = local_models(tmp_path, tiny_model_path)
    first = in_process(s3_uri, models, tmp_path / "cache-1", s3_options, role="writer").start()
    second = in_process(s3_uri, models, tmp_path / "cache-2", s3_options)   # role all writes
    try:
        with pytest.raises(FailedPrecondition) as refused:
            second.start()
        assert f":{first.port}" in str(refused.value) and "one writer" in str(refused.value)
    finally:
        first.stop()
    second.start()          # the first released its lease when it stopped
    try:
        assert ingest_commit(_stub(second), "after", seed=6) == 8
    finally:
        second.stop()


def test_readers_serve_a_scoring_load_while_the_writer_ingests_2000_images(replicas) -> None:
    """Two clients score through both readers (round robin) while a third ingests 2,000
    images through the writer: no Score fails, both readers answer, and every
    acknowledged row is in both readers' indexes within refresh_seconds + 5 s of the
    last acknowledgement."""
    writer, readers = replicas
    fit_normal_rows(_stub(writer), count=60)
    _until(lambda: all(_stub(r).GetInfo(pb.GetInfoRequest(), timeout=30).bundle.bundle_id
                       for r in readers), "the first bundle")
    probe = [ImageInput(d, env="cam-a") for d in synthetic_images("odd", 2, seed=3)]
    failures: list[Exception] = []
    stop = threading.Event()
    addresses = ",".join(r.address for r in readers)

    def scoring_client() -> None:
        with EnvadClient(addresses, timeout=60) as client:
            while not stop.is_set():
                try:
                    client.score(probe)
                except EnvadError as exc:
                    failures.append(exc)

    clients = [threading.Thread(target=scoring_client) for _ in range(2)]
    for thread in clients:
        thread.start()
    images = synthetic_images("normal", 2000, seed=21)
    try:
        with EnvadClient(writer.address, timeout=120) as ingesting:
            for start in range(0, len(images), 200):
                summary = ingesting.ingest([
                    IngestInput(ImageInput(d, id=f"load-{start + i}", env=f"cam-{i % 4}"))
                    for i, d in enumerate(images[start:start + 200])])
                assert summary.inserted == 200
        acknowledged = time.monotonic()
        expected = 60 + len(images)
        refresh = float(TEST_SETTINGS["ENVAD_REFRESH_SECONDS"])
        deadline = acknowledged + refresh + 5
        while time.monotonic() < deadline:
            infos = [_stub(r).GetInfo(pb.GetInfoRequest(), timeout=30) for r in readers]
            if all(i.index_rows == expected for i in infos):
                break
            time.sleep(0.05)
        assert [i.index_rows for i in infos] == [expected, expected]
    finally:
        stop.set()
        for thread in clients:
            thread.join(60)
    assert failures == []
    assert all(score_calls(r) > 0 for r in readers)
