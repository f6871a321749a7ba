"""Every RPC of envad.v1.AnomalyService against a real `envad serve` on 127.0.0.1."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap
import time

import grpc
import numpy as np
import pyarrow as pa
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from envad.pipeline import DEFAULT_PIPELINE
from envad.server.detectors import registry
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import InProcessServer, models_dir_in
from tiny_encoder import synthetic_images

NORMAL_ENVS = ("cam-a", "cam-b")


def stub_for(server) -> pb_grpc.AnomalyServiceStub:
    return pb_grpc.AnomalyServiceStub(server.channel())


def ingest(stub, images, *, env_cycle=NORMAL_ENVS, split="train", label="normal", chunk=16,
           ids=None):
    def requests():
        for start in range(0, len(images), chunk):
            items = []
            for i in range(start, min(start + chunk, len(images))):
                image = pb.Image(data=images[i], env=env_cycle[i % len(env_cycle)],
                                 uri=f"file:///img/{i}.png", id=ids[i] if ids else "")
                items.append(pb.IngestItem(image=image, split=split, label=label))
            yield pb.IngestRequest(items=items)
    return stub.Ingest(requests(), timeout=60)


def _fitted(server):
    """(server, stub, fit) of `server` given 120 normal training rows and a fitted bundle
    of the paper's eight detectors in the paper's setting (raw embeddings: how the
    default space step changes scores is tested in test_space_service)."""
    stub = stub_for(server)
    summary = ingest(stub, synthetic_images("normal", 120, seed=1))
    assert summary.inserted == 120 and summary.failed == 0
    fit = stub.Fit(pb.FitRequest(seed=0, detectors=registry.PAPER_DETECTORS, space="raw"),
                   timeout=120)
    assert fit.activated and fit.n_samples == 120
    return server, stub, fit


@pytest.fixture
def fitted(envad_server):
    """`_fitted` on a server of the test's own: for tests that store rows or restart it."""
    return _fitted(envad_server)


@pytest.fixture(scope="module")
def scored(tmp_path_factory, tiny_model_path):
    """`_fitted` once for this module's tests that only score: a Score call changes
    nothing that another call reads (docs/api.md; tests/server/test_scoring.py)."""
    root = tmp_path_factory.mktemp("scored")
    handle = InProcessServer(root / "data", models_dir_in(root, tiny_model_path))
    handle.start()
    yield _fitted(handle)
    handle.stop()


def test_a_fit_naming_no_detector_fits_the_default_pipelines_set(envad_server):
    stub = stub_for(envad_server)
    ingest(stub, synthetic_images("normal", 120, seed=1))
    fit = stub.Fit(pb.FitRequest(seed=0), timeout=120)
    assert [s.detector for s in fit.stats] == list(DEFAULT_PIPELINE.detectors) == ["KNN"]
    bundle = stub.GetInfo(pb.GetInfoRequest(), timeout=10).bundle
    assert list(bundle.detectors) == ["KNN"] and bundle.calibration == "interpolated"
    result = stub.Score(pb.ScoreRequest(images=[pb.Image(data=synthetic_images("odd", 1,
                                                                                seed=9)[0])]),
                        timeout=60).results[0]
    assert [d.detector for d in result.detectors] == ["KNN"]
    assert result.ensemble == pytest.approx(result.detectors[0].calibrated)


def test_health_serving_and_reflection_lists_service(envad_server):
    channel = envad_server.channel()
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "envad.v1.AnomalyService"):
        status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = reflect.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5)
    names = {s.name for r in responses for s in r.list_services_response.service}
    assert "envad.v1.AnomalyService" in names and "grpc.health.v1.Health" in names


def test_list_models_info_and_activate(envad_server):
    stub = stub_for(envad_server)
    listed = stub.ListModels(pb.ListModelsRequest(), timeout=10)
    assert [m.model_id for m in listed.models] == ["tiny-test"]
    model = listed.models[0]
    assert model.active and model.input_size == 32 and model.embedding_dim == 16
    assert list(model.training_envs) == ["cam-a", "cam-b"] and len(model.sha256) == 64
    activated = stub.ActivateModel(pb.ActivateModelRequest(model_id="tiny-test"), timeout=10)
    assert activated.model.active and activated.provenance.model_id == "tiny-test"
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    assert info.active_model.model_id == "tiny-test" and not info.HasField("bundle")
    assert "Fit" in info.hint


def test_unknown_model_is_not_found(envad_server):
    with pytest.raises(grpc.RpcError) as err:
        stub_for(envad_server).ActivateModel(pb.ActivateModelRequest(model_id="nope"), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "tiny-test" in err.value.details()


def test_score_without_bundle_is_failed_precondition(envad_server):
    image = synthetic_images("normal", 1)[0]
    with pytest.raises(grpc.RpcError) as err:
        stub_for(envad_server).Score(pb.ScoreRequest(images=[pb.Image(data=image)]), timeout=10)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "Fit" in err.value.details() and "backfill" in err.value.details()


def test_ingest_is_idempotent_and_reports_bad_items(envad_server):
    stub = stub_for(envad_server)
    images = synthetic_images("normal", 30, seed=2)
    first = ingest(stub, images, chunk=7)
    assert (first.received, first.inserted, first.duplicates, first.failed) == (30, 30, 0, 0)
    with_bad = images[:10] + [b"not an image"] + images[10:]
    second = ingest(stub, with_bad, chunk=4)
    assert (second.received, second.inserted, second.duplicates, second.failed) == (31, 0, 30, 1)
    assert second.failures[0].index == 10
    assert second.failures[0].code == "INVALID_ARGUMENT"
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    assert info.total_rows == 30 and info.index_rows == 30
    assert {e.env: e.rows for e in info.env_counts} == {"cam-a": 15, "cam-b": 15}


def test_ingest_same_id_twice_in_one_stream_stores_once(envad_server):
    stub = stub_for(envad_server)
    images = synthetic_images("normal", 4, seed=3)
    summary = ingest(stub, images + images, chunk=3)
    assert (summary.inserted, summary.duplicates) == (4, 4)
    assert stub.GetInfo(pb.GetInfoRequest(), timeout=10).total_rows == 4


@pytest.mark.parametrize("detector", registry.PAPER_DETECTORS)
def test_out_of_distribution_scores_higher_for_every_detector(scored, detector):
    _, stub, _ = scored
    held_out = synthetic_images("normal", 12, seed=50)
    odd = synthetic_images("odd", 12, seed=51)
    response = stub.Score(pb.ScoreRequest(images=[pb.Image(data=d) for d in held_out + odd]),
                          timeout=60)

    def raw(result):
        return {d.detector: d.raw for d in result.detectors}[detector]

    normal_scores = [raw(r) for r in response.results[:12]]
    odd_scores = [raw(r) for r in response.results[12:]]
    assert min(odd_scores) > np.median(normal_scores)
    assert np.mean(odd_scores) > np.mean(normal_scores)


def test_scores_calibrated_thresholded_with_neighbours_and_provenance(scored):
    _, stub, fit = scored
    images = synthetic_images("normal", 5, seed=60) + synthetic_images("odd", 5, seed=61)
    response = stub.Score(pb.ScoreRequest(images=[pb.Image(data=d, env="cam-new")
                                                  for d in images], top_k=3), timeout=60)
    assert len(response.results) == 10
    for result in response.results:
        assert {d.detector for d in result.detectors} == set(registry.PAPER_DETECTORS)
        assert all(0.0 <= d.calibrated <= 1.0 for d in result.detectors)
        assert 0.0 <= result.ensemble <= 1.0
        assert result.ensemble == pytest.approx(np.mean([d.calibrated for d in result.detectors]))
        assert result.threshold == pytest.approx(fit.threshold)
        assert len(result.neighbors) == 3
        assert all(n.split == "train" and n.env in NORMAL_ENVS for n in result.neighbors)
        assert [n.distance for n in result.neighbors] == sorted(n.distance for n in
                                                                result.neighbors)
    assert all(r.is_anomaly for r in response.results[5:])
    assert sum(r.is_anomaly for r in response.results[:5]) <= 1
    prov = response.provenance
    assert prov.model_id == "tiny-test" and len(prov.model_sha256) == 64
    assert prov.bundle_id == fit.bundle_id and prov.table_version > 0


def test_per_request_threshold_overrides_bundle(scored):
    _, stub, _ = scored
    image = synthetic_images("normal", 1, seed=70)
    strict = stub.Score(pb.ScoreRequest(images=[pb.Image(data=image[0])], threshold=1e-6),
                        timeout=30)
    assert strict.results[0].is_anomaly and strict.results[0].threshold == pytest.approx(1e-6)
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(pb.ScoreRequest(images=[pb.Image(data=image[0])], threshold=1.5), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_bad_image_answers_invalid_argument_naming_the_item(scored):
    _, stub, _ = scored
    with pytest.raises(grpc.RpcError) as err:
        stub.Score(pb.ScoreRequest(images=[pb.Image(data=b"\x89PNG broken", id="cam7/0042")]),
                   timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cam7/0042" in err.value.details()
    good = synthetic_images("normal", 1, seed=71)[0]
    mixed = stub.Score(pb.ScoreRequest(images=[pb.Image(data=good),
                                               pb.Image(data=b"junk", id="bad-1")]), timeout=30)
    assert not mixed.results[0].HasField("error") and mixed.results[0].detectors
    assert mixed.results[1].error.code == "INVALID_ARGUMENT" and "bad-1" in \
        mixed.results[1].error.message


def test_score_stream_answers_each_request_in_order(scored):
    _, stub, _ = scored
    normal = synthetic_images("normal", 3, seed=80)
    odd = synthetic_images("odd", 3, seed=81)
    requests = [pb.ScoreRequest(images=[pb.Image(data=d, id=f"req-{i}")])
                for i, d in enumerate(normal + [b"garbage"] + odd)]
    responses = list(stub.ScoreStream(iter(requests), timeout=60))
    assert [r.results[0].id for r in responses] == [f"req-{i}" for i in range(7)]
    assert responses[3].results[0].error.code == "INVALID_ARGUMENT"
    assert all(r.results[0].is_anomaly for r in responses[4:])


def test_score_with_store_indexes_images(fitted):
    _, stub, _ = fitted
    image = synthetic_images("odd", 1, seed=90)[0]
    response = stub.Score(pb.ScoreRequest(images=[pb.Image(data=image, env="cam-z")],
                                          store=True, split="scored"), timeout=30)
    assert response.results[0].stored
    found = stub.Search(pb.SearchRequest(image=image, k=1), timeout=30)
    assert found.neighbors[0].id == response.results[0].id
    assert found.neighbors[0].split == "scored" and found.neighbors[0].distance < 1e-3


def test_embed_matches_dimension_and_reports_bad_items(envad_server):
    stub = stub_for(envad_server)
    images = synthetic_images("normal", 2, seed=5)
    response = stub.Embed(pb.EmbedRequest(images=[pb.Image(data=images[0]),
                                                  pb.Image(data=b"x", id="broken"),
                                                  pb.Image(data=images[1])]), timeout=30)
    assert response.dim == 16
    assert [len(e.vector) for e in response.embeddings] == [16, 0, 16]
    assert response.embeddings[1].error.code == "INVALID_ARGUMENT"


def test_search_by_image_vector_and_id_with_filters(envad_server):
    stub = stub_for(envad_server)
    images = synthetic_images("normal", 20, seed=6)
    ingest(stub, images, ids=[f"img-{i}" for i in range(20)])
    by_id = stub.Search(pb.SearchRequest(id="img-3", k=4), timeout=30)
    assert by_id.neighbors[0].id == "img-3" and len(by_id.neighbors) == 4
    only_b = stub.Search(pb.SearchRequest(id="img-3", k=5, filter=pb.Filter(envs=["cam-b"])),
                         timeout=30)
    assert {n.env for n in only_b.neighbors} == {"cam-b"} and len(only_b.neighbors) == 5
    vector = stub.Embed(pb.EmbedRequest(images=[pb.Image(data=images[7])]), timeout=30)
    by_vector = stub.Search(pb.SearchRequest(vector=pb.Vector(values=vector.embeddings[0].vector),
                                             k=1), timeout=30)
    assert by_vector.neighbors[0].id == "img-7"
    by_image = stub.Search(pb.SearchRequest(image=images[9], k=1), timeout=30)
    assert by_image.neighbors[0].id == "img-9"
    injection = stub.Search(pb.SearchRequest(id="img-3", k=5, filter=pb.Filter(
        envs=["cam-a' OR '1'='1"])), timeout=30)
    assert len(injection.neighbors) == 0
    with pytest.raises(grpc.RpcError) as err:
        stub.Search(pb.SearchRequest(id="missing", k=1), timeout=30)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as err:
        stub.Search(pb.SearchRequest(vector=pb.Vector(values=[1.0, 2.0]), k=1), timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_export_arrow_and_rows(envad_server):
    stub = stub_for(envad_server)
    ingest(stub, synthetic_images("normal", 10, seed=7))
    chunks = list(stub.Export(pb.ExportRequest(batch_size=4), timeout=30))
    tables = [pa.ipc.open_stream(io.BytesIO(c.arrow_ipc)).read_all() for c in chunks]
    table = pa.concat_tables(tables)
    assert [t.num_rows for t in tables] == [4, 4, 2] and table.num_rows == 10
    assert table.schema.field("vector").type.list_size == 16
    rows = list(stub.Export(pb.ExportRequest(format=pb.EXPORT_FORMAT_ROWS,
                                             filter=pb.Filter(envs=["cam-a"])), timeout=30))
    flat = [r for chunk in rows for r in chunk.rows.rows]
    assert len(flat) == 5 and all(r.env == "cam-a" and len(r.vector) == 16 for r in flat)
    assert all(r.ingested_at.seconds > 0 for r in flat)
    meta_only = list(stub.Export(pb.ExportRequest(without_vectors=True), timeout=30))
    assert "vector" not in pa.ipc.open_stream(io.BytesIO(meta_only[0].arrow_ipc)).schema.names


def test_restart_restores_rows_index_and_bundle(fitted):
    server, stub, fit = fitted
    probe = synthetic_images("odd", 1, seed=100)[0]
    before = stub.Score(pb.ScoreRequest(images=[pb.Image(data=probe)]), timeout=30).results[0]
    assert server.stop() == 0
    server.start()
    stub = stub_for(server)
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    assert info.total_rows == 120 and info.index_rows == 120
    assert info.bundle.bundle_id == fit.bundle_id
    after = stub.Score(pb.ScoreRequest(images=[pb.Image(data=probe)]), timeout=30).results[0]
    assert after.ensemble == pytest.approx(before.ensemble)
    assert [n.id for n in after.neighbors] == [n.id for n in before.neighbors]


def test_rows_written_by_another_process_become_searchable(envad_server):
    stub = stub_for(envad_server)
    ingest(stub, synthetic_images("normal", 5, seed=8))
    script = textwrap.dedent(f"""
        import numpy as np
        from pathlib import Path
        from envad.server.store import EmbeddingStore, Row
        store = EmbeddingStore(Path({str(envad_server.data_dir / 'lancedb')!r}), "tiny-test", 16)
        rows = [Row(id=f"external-{{i}}", vector=np.full(16, 50.0 + i, np.float32),
                    env="cam-ext", split="archive") for i in range(3)]
        print(store.insert(rows).inserted)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "3"
    deadline = time.monotonic() + 20
    hits = []
    while time.monotonic() < deadline:
        hits = stub.Search(pb.SearchRequest(vector=pb.Vector(values=[51.0] * 16), k=1,
                                            filter=pb.Filter(envs=["cam-ext"])), timeout=10)
        if hits.neighbors:
            break
        time.sleep(0.2)
    assert hits.neighbors[0].id == "external-1"
    assert stub.GetInfo(pb.GetInfoRequest(), timeout=10).index_rows == 8


def test_camera_resolution_jpeg_above_grpc_default_limit(envad_server):
    rng = np.random.default_rng(0)
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (2448, 3264, 3), dtype=np.uint8)).save(
        buffer, format="JPEG", quality=95)
    data = buffer.getvalue()
    assert len(data) > 4 * 1024 * 1024
    response = stub_for(envad_server).Embed(pb.EmbedRequest(images=[pb.Image(data=data)]),
                                            timeout=60)
    assert len(response.embeddings[0].vector) == 16


def test_activating_another_model_does_not_drop_requests(envad_server):
    from tiny_encoder import build_tiny_encoder

    build_tiny_encoder(envad_server.models_dir / "other.onnx", model_id="other", dim=8, seed=5)
    stub = stub_for(envad_server)
    images = [pb.Image(data=d) for d in synthetic_images("normal", 4, seed=11)]
    errors, dims = [], []
    stop = time.monotonic() + 3

    def embed_loop():
        while time.monotonic() < stop:
            try:
                dims.append(stub.Embed(pb.EmbedRequest(images=images), timeout=30).dim)
            except grpc.RpcError as exc:  # any failure here is a dropped request
                errors.append(exc)

    import threading

    workers = [threading.Thread(target=embed_loop) for _ in range(3)]
    for worker in workers:
        worker.start()
    for model_id in ("other", "tiny-test", "other"):
        time.sleep(0.5)
        stub.ActivateModel(pb.ActivateModelRequest(model_id=model_id), timeout=30)
    for worker in workers:
        worker.join()
    assert not errors
    assert set(dims) == {8, 16}
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    assert info.active_model.model_id == "other" and info.active_model.embedding_dim == 8


def test_events_are_stored_exported_and_leave_a_burst_out_of_its_own_scores(envad_server):
    """Image.event: stored by Ingest (a hostile one fails its item alone), exported in
    both formats, and Fit takes frames that share one as one event, timestamps or not:
    a burst of 10 odd frames scored as fit rows stands out only with its event left out."""
    stub = stub_for(envad_server)
    normal = synthetic_images("normal", 110, seed=1)
    burst = synthetic_images("odd", 10, seed=2)
    items = [pb.IngestItem(image=pb.Image(data=d, id=f"n-{i:02d}", env=NORMAL_ENVS[i % 2]),
                           split="train") for i, d in enumerate(normal)]
    items += [pb.IngestItem(image=pb.Image(data=d, id=f"b-{i:02d}", env="cam-a",
                                           event="burst-1"), split="train")
              for i, d in enumerate(burst)]
    items.append(pb.IngestItem(image=pb.Image(data=normal[0], id="hostile", event="e\n1"),
                               split="train"))
    summary = stub.Ingest(iter([pb.IngestRequest(items=items)]), timeout=60)
    assert (summary.inserted, summary.failed) == (120, 1)
    assert "event" in summary.failures[0].message
    rows = [r for c in stub.Export(pb.ExportRequest(format=pb.EXPORT_FORMAT_ROWS,
                                                    without_vectors=True), timeout=30)
            for r in c.rows.rows]
    events = {r.id: r.event for r in rows}
    assert {events[f"b-{i:02d}"] for i in range(10)} == {"burst-1"}
    assert {events[f"n-{i:02d}"] for i in range(110)} == {""}
    arrow = pa.concat_tables([pa.ipc.open_stream(io.BytesIO(c.arrow_ipc)).read_all()
                              for c in stub.Export(pb.ExportRequest(), timeout=30)])
    assert dict(zip(arrow.column("id").to_pylist(), arrow.column("event").to_pylist(),
                    strict=True)) == events
    knn = {}
    for gap in (0.0, -1.0):       # the default gap (60 s), then every row its own event
        fit = stub.Fit(pb.FitRequest(detectors=["KNN"], space="l2", event_gap_s=gap),
                       timeout=120)
        assert ("largest 10" in fit.fit_groups) == (gap == 0.0), fit.fit_groups
        scored = stub.Score(pb.ScoreRequest(
            images=[pb.Image(data=d, id=f"n-{i:02d}") for i, d in enumerate(normal[:20])]
            + [pb.Image(data=d, id=f"b-{i:02d}") for i, d in enumerate(burst)],
            reuse_stored=True), timeout=60)
        knn[gap] = np.array([r.detectors[0].raw for r in scored.results])
    grouped, alone = knn[0.0], knn[-1.0]
    assert grouped[20:].min() > grouped[:20].max()
    assert np.median(alone[20:]) < np.median(grouped[20:]) / 2
