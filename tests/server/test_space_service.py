"""The space step through a real `envad serve`: fitted by Fit, applied by Score, reported in
provenance, and per-camera adaptation that switches at N images and survives a restart."""

from __future__ import annotations

import numpy as np
import pytest

from envad.server.detectors.geometry import SPACES
from envad.server.detectors.persistence import BundleStore
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from tiny_encoder import synthetic_images


def _stub(server):
    return pb_grpc.AnomalyServiceStub(server.channel())


def _ingest_normals(stub, count=120):
    images = synthetic_images("normal", count, seed=1)
    envs = ("cam-a", "cam-b")
    summary = stub.Ingest(iter([pb.IngestRequest(items=[
        pb.IngestItem(image=pb.Image(data=d, env=envs[(i + j) % 2]), split="train",
                      label=("x", "y")[(i + j) // 2 % 2])
        for j, d in enumerate(images[i:i + 20])]) for i in range(0, count, 20)]), timeout=60)
    assert summary.inserted == count


def _score(stub, images, env="", store=False):
    """Score (and, with `store`, store: the camera's statistics learn from stored rows)."""
    return stub.Score(pb.ScoreRequest(images=[pb.Image(data=d, env=env) for d in images],
                                      store=store), timeout=60)


@pytest.mark.parametrize("space, described, adaptation", [
    ("l2", "l2", ""),
    ("pca_l2", "pca_l2", ""),
    ("white_l2", "white_l2(shrinkage=0.003)", ""),
    ("center_white_l2:0.01", "center_white_l2(shrinkage=0.01, min_camera_rows=32)", "global"),
])
def test_fit_applies_the_requested_space_and_reports_it(envad_server, space, described,
                                                         adaptation):
    stub = _stub(envad_server)
    _ingest_normals(stub)
    fit = stub.Fit(pb.FitRequest(seed=0, space=space, detectors=["KNN"]), timeout=120)
    assert fit.space == described
    queries = synthetic_images("odd", 3, seed=5)
    reply = _score(stub, queries, env="cam-z")
    assert reply.provenance.space == described
    assert [r.adaptation for r in reply.results] == [adaptation] * 3
    # the served scores are the persisted bundle's scores of the L2-normalised embedding
    bundle = BundleStore(envad_server.data_dir / "bundles").load(fit.bundle_id)
    vectors = np.array([e.vector for e in stub.Embed(pb.EmbedRequest(
        images=[pb.Image(data=d) for d in queries]), timeout=60).embeddings])
    expected = bundle.score(vectors, ["cam-z"] * len(vectors))
    for row, result in enumerate(reply.results):
        served = {d.detector: d.raw for d in result.detectors}
        for name in bundle.detectors:
            assert abs(served[name] - expected.raw[name][row]) <= 1e-6 * max(
                1.0, abs(expected.raw[name][row]))
        # KNN distances between unit vectors are at most 2
        assert 0.0 <= served["KNN"] <= 2.0
    raw_fit = stub.Fit(pb.FitRequest(seed=0, space="raw", detectors=["KNN"]), timeout=120)
    assert raw_fit.space == "raw"
    raw_reply = _score(stub, queries)
    assert raw_reply.provenance.space == "raw"
    assert {d.detector: d.raw for d in raw_reply.results[0].detectors}["KNN"] != \
        {d.detector: d.raw for d in reply.results[0].detectors}["KNN"]
    info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
    assert info.bundle.space == "raw"


def test_unseen_camera_adapts_after_n_images_and_survives_a_restart(envad_server):
    stub = _stub(envad_server)
    _ingest_normals(stub)
    fit = stub.Fit(pb.FitRequest(seed=0, space="center_l2", min_camera_rows=8), timeout=120)
    assert fit.space == "center_l2(min_camera_rows=8)"
    new = synthetic_images("normal", 13, seed=9)
    first = _score(stub, new[:5], env="cam-new", store=True)
    assert [r.adaptation for r in first.results] == ["global"] * 5
    # scored and not stored, however often: the camera learns nothing
    for _ in range(3):
        assert [r.adaptation for r in _score(stub, new[5:10], env="cam-new").results] == \
            ["global"] * 5
    second = _score(stub, new[5:10], env="cam-new", store=True)   # 5 stored before: < 8
    assert [r.adaptation for r in second.results] == ["global"] * 5
    third = _score(stub, new[10:11], env="cam-new")               # 10 >= 8 stored
    assert [r.adaptation for r in third.results] == ["camera"]
    assert [r.adaptation for r in _score(stub, new[:1], env="cam-a").results] == ["fit"]
    assert [r.adaptation for r in _score(stub, new[:1]).results] == ["global"]

    stub = _stub(envad_server.restart())
    assert [r.adaptation for r in _score(stub, new[11:12], env="cam-new").results] == \
        ["camera"]
    reset = stub.ResetCameraStats(pb.ResetCameraStatsRequest(envs=["cam-new", "nope"]),
                                  timeout=10)
    assert list(reset.reset) == ["cam-new"]
    assert [r.adaptation for r in _score(stub, new[12:13], env="cam-new").results] == \
        ["global"]


def test_auto_space_uses_labels_and_the_default_is_the_pipeline_space(envad_server):
    from envad.pipeline import DEFAULT_PIPELINE

    stub = _stub(envad_server)
    _ingest_normals(stub)
    default = stub.Fit(pb.FitRequest(seed=0), timeout=120).space
    assert default.split("(")[0] == DEFAULT_PIPELINE.space.split(":")[0]
    auto = stub.Fit(pb.FitRequest(seed=0, space="auto"), timeout=120)
    assert auto.space.split("(")[0] in SPACES


def test_scores_adapt_to_each_camera_durably_and_reset(envad_server):
    stub = _stub(envad_server)
    _ingest_normals(stub)
    fit = stub.Fit(pb.FitRequest(seed=0, space="l2", score_adaptation="camera:4"),
                   timeout=120)
    assert fit.score_adaptation == "camera(prior_rows=4)"
    assert stub.GetInfo(pb.GetInfoRequest(), timeout=10).bundle.score_adaptation == \
        "camera(prior_rows=4)"
    images = synthetic_images("odd", 12, seed=7)
    first = _score(stub, images[:4], env="cam-new", store=True)
    assert first.provenance.score_adaptation == "camera(prior_rows=4)"
    assert [r.camera_weight for r in first.results] == [0.0] * 4   # nothing stored before
    second = _score(stub, images[4:8], env="cam-new", store=True)
    assert [r.camera_weight for r in second.results] == pytest.approx([0.5] * 4)
    assert _score(stub, images[8:9], env="cam-new").results[0].camera_weight == \
        pytest.approx(8 / 12)
    # the served adapted score is the persisted bundle's, with the camera's statistics
    bundle = BundleStore(envad_server.data_dir / "bundles").load(fit.bundle_id)
    vectors = np.array([e.vector for e in stub.Embed(pb.EmbedRequest(
        images=[pb.Image(data=d) for d in images[:8]]), timeout=60).embeddings])
    stats = bundle.new_score_statistics()
    bundle.observe(vectors[:4], ["cam-new"] * 4, score_stats=stats)
    expected = bundle.score(vectors[4:], ["cam-new"] * 4, score_stats=stats)
    for row, result in enumerate(second.results):
        served = {d.detector: d for d in result.detectors}
        for name in bundle.detectors:
            assert served[name].adapted == pytest.approx(expected.adapted[name][row],
                                                         rel=1e-5, abs=1e-6)
            assert served[name].calibrated == pytest.approx(
                expected.calibrated[name][row], abs=1e-9)
    # a row without a camera is not adapted; its adapted score is its raw score
    anonymous = _score(stub, images[:1]).results[0]
    assert anonymous.camera_weight == 0.0
    assert all(d.adapted == d.raw for d in anonymous.detectors)

    stub = _stub(envad_server.restart())             # the statistics are durable
    after = _score(stub, images[8:9], env="cam-new").results[0]
    assert after.camera_weight == pytest.approx(8 / 12)
    reset = stub.ResetCameraStats(pb.ResetCameraStatsRequest(envs=["cam-new"]), timeout=10)
    assert list(reset.reset) == ["cam-new"]
    assert _score(stub, images[9:10], env="cam-new", store=True).results[0].camera_weight \
        == 0.0
    assert _score(stub, images[10:11], env="cam-new").results[0].camera_weight == \
        pytest.approx(1 / 5)
    # a new Fit starts every camera from its stored rows, on the new scores' scale
    stub.Fit(pb.FitRequest(seed=1, space="l2", score_adaptation="camera:4"), timeout=120)
    assert _score(stub, images[10:11], env="cam-new").results[0].camera_weight == \
        pytest.approx(9 / 13)
    off = stub.Fit(pb.FitRequest(seed=0, space="l2", score_adaptation="none"), timeout=120)
    assert off.score_adaptation == "none"
    plain = _score(stub, images[:2], env="cam-new")
    assert [r.camera_weight for r in plain.results] == [0.0, 0.0]
    assert all(d.adapted == d.raw for r in plain.results for d in r.detectors)


def test_a_fit_with_the_unseen_camera_prior_scores_a_new_cameras_first_images_with_it(
        envad_server):
    """Fit measures how a left-out camera scores and keeps it with the bundle; a camera
    with nothing stored is then adapted by that prior alone (weight 0), as the
    persisted bundle computes it."""
    stub = _stub(envad_server)
    _ingest_normals(stub, count=200)
    fit = stub.Fit(pb.FitRequest(seed=0, space="l2", score_adaptation="low:16:64+unseen"),
                   timeout=120)
    assert fit.score_adaptation == "low(prior_rows=16, rows=64, prior=unseen camera)"
    bundle = BundleStore(envad_server.data_dir / "bundles").load(fit.bundle_id)
    assert bundle.unseen_camera is not None
    assert bundle.unseen_camera.cameras == ("cam-a", "cam-b")
    images = synthetic_images("odd", 3, seed=8)
    new = _score(stub, images, env="cam-elsewhere")
    assert [r.camera_weight for r in new.results] == [0.0] * 3
    vectors = np.array([e.vector for e in stub.Embed(pb.EmbedRequest(
        images=[pb.Image(data=d) for d in images]), timeout=60).embeddings])
    expected = bundle.score(vectors, ["cam-elsewhere"] * 3,
                            score_stats=bundle.new_score_statistics())
    for row, result in enumerate(new.results):
        served = {d.detector: d for d in result.detectors}
        for name in bundle.detectors:
            assert served[name].adapted != served[name].raw
            assert served[name].adapted == pytest.approx(expected.adapted[name][row],
                                                         rel=1e-5, abs=1e-6)


def test_a_bad_score_adaptation_is_refused_by_name(envad_server):
    import grpc

    stub = _stub(envad_server)
    _ingest_normals(stub)
    with pytest.raises(grpc.RpcError) as caught:
        stub.Fit(pb.FitRequest(seed=0, score_adaptation="camera:0"), timeout=60)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "score adaptation" in caught.value.details()
