"""A server whose data dir is a URI on object storage (moto's S3 server on loopback):
the state lives in the bucket, and a server started on an empty local cache serves the
same answers."""

from __future__ import annotations

import logging
import time

import numpy as np
import pytest
from s3_emulator import SECRET, in_process, local_models, statistics_uploaded

from envad.errors import FailedPrecondition
from envad.server.config import load_config
from envad.server.remote_dir import RemoteDir
from envad.server.store import EmbeddingStore
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import InProcessServer, fit_normal_rows
from tiny_encoder import synthetic_images


def _scores(handle: InProcessServer, images: list[bytes]) -> tuple[np.ndarray, list[str]]:
    stub = pb_grpc.AnomalyServiceStub(handle.channel())
    reply = stub.Score(pb.ScoreRequest(images=[pb.Image(data=d, env="cam-a")
                                               for d in images]), timeout=60)
    ensemble = np.array([r.ensemble for r in reply.results], dtype=np.float32)
    return ensemble, [reply.provenance.bundle_id]


def test_state_lives_in_the_bucket(s3_options, s3_uri, tmp_path, tiny_model_path, caplog):
    """Ingest, Fit, Score on s3://...; a restart on an empty cache folder (a new machine)
    finds the rows, the bundle and the active model in the bucket and scores the same."""
    models = local_models(tmp_path, tiny_model_path)
    probe = synthetic_images("normal", 3, seed=9) + synthetic_images("odd", 3, seed=9)
    first = in_process(s3_uri, models, tmp_path / "cache-1", s3_options)
    with caplog.at_level(logging.DEBUG):
        first.start()
        try:
            fit_normal_rows(pb_grpc.AnomalyServiceStub(first.channel()), count=60)
            before, bundle_before = _scores(first, probe)
        finally:
            first.stop()
    assert SECRET not in caplog.text
    assert not (tmp_path / "cache-1" / "lancedb").exists()   # the table is in the bucket

    second = in_process(s3_uri, models, tmp_path / "cache-2", s3_options).start()
    try:
        stub = pb_grpc.AnomalyServiceStub(second.channel())
        info = stub.GetInfo(pb.GetInfoRequest(), timeout=30)
        after, bundle_after = _scores(second, probe)
    finally:
        second.stop()
    assert info.data_dir == s3_uri
    assert info.total_rows == 60 and info.index_rows == 60
    assert bundle_after == bundle_before and bundle_before[0]
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-7)
    assert after[3:].mean() > after[:3].mean()   # the odd images still score higher


def test_a_missing_bucket_is_one_error_without_secrets(s3_options):
    with pytest.raises(FailedPrecondition) as caught:
        EmbeddingStore("s3://envad-no-such-bucket/p/lancedb", "m", 4, s3_options)
    assert "envad-no-such-bucket" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_remote_dir_reads_what_it_wrote(s3_options, s3_uri, tmp_path):
    remote = RemoteDir(s3_uri, s3_options).child("bundles")
    assert remote.read_bytes("active/m.json") is None
    (tmp_path / "b1").mkdir()
    (tmp_path / "b1" / "a.npy").write_bytes(b"a")
    (tmp_path / "b1" / "manifest.json").write_bytes(b"{}")
    remote.push_tree(tmp_path / "b1", "b1", last=["manifest.json"])
    assert remote.files() == ["b1/a.npy", "b1/manifest.json"]
    assert remote.pull_tree("b1", tmp_path / "copy" / "b1")
    assert (tmp_path / "copy" / "b1" / "a.npy").read_bytes() == b"a"
    assert not remote.pull_tree("b2", tmp_path / "copy" / "b2")


def test_a_model_file_replaced_by_one_of_the_same_size_is_downloaded_again(
        s3_options, s3_uri, tmp_path):
    remote = RemoteDir(f"{s3_uri}-models", s3_options)
    local = tmp_path / "models"
    remote.write_bytes("m.onnx", b"weights-1")
    assert remote.mirror(".onnx", local) == ["m.onnx"]
    assert remote.mirror(".onnx", local) == []              # unchanged: not downloaded
    time.sleep(1.1)                   # object times have a resolution of one second
    remote.write_bytes("m.onnx", b"weights-2")
    assert remote.mirror(".onnx", local) == ["m.onnx"]
    assert (local / "m.onnx").read_bytes() == b"weights-2"
    assert remote.mirror(".onnx", local) == []


def test_settings_take_storage_options_in_every_form(tmp_path):
    toml = tmp_path / "envad.toml"
    toml.write_text('[server]\ndata_dir = "s3://bucket/prefix/"\n'
                    '[server.storage_options]\naws_region = "eu-west-1"\nallow_http = true\n')
    config = load_config(config_file=toml, env={})
    assert config.data_dir == "s3://bucket/prefix" and config.remote
    assert dict(config.storage_options) == {"aws_region": "eu-west-1", "allow_http": "true"}
    assert config.lancedb_dir == "s3://bucket/prefix/lancedb"
    env = load_config(env={"ENVAD_DATA_DIR": "s3://b/p",
                           "ENVAD_STORAGE_OPTIONS": f"aws_secret_access_key={SECRET},a=1"})
    assert env.storage_options == {"aws_secret_access_key": SECRET, "a": "1"}
    assert SECRET not in repr(env)
    flags = load_config(env={}, overrides={"storage_options": ["k=v", "k2=v=2"]})
    assert flags.storage_options == {"k": "v", "k2": "v=2"} and not flags.remote


def test_models_dir_on_the_bucket(s3_options, s3_uri, tmp_path, tiny_model_path):
    """A models dir that is a URI: its .onnx files are downloaded into the empty cache
    and the model serves."""
    models_uri = f"{s3_uri}-models"
    RemoteDir(models_uri, s3_options).write_bytes(tiny_model_path.name,
                                                  tiny_model_path.read_bytes())
    cache = tmp_path / "cache"
    handle = in_process(s3_uri, models_uri, cache, s3_options).start()
    try:
        stub = pb_grpc.AnomalyServiceStub(handle.channel())
        models = stub.ListModels(pb.ListModelsRequest(), timeout=30).models
        fit_normal_rows(stub, count=40)
        scores, _ = _scores(handle, synthetic_images("odd", 2, seed=3))
    finally:
        handle.stop()
    assert [m.file for m in models if m.active] == [tiny_model_path.name]
    assert (cache / "models" / tiny_model_path.name).read_bytes() == \
        tiny_model_path.read_bytes()
    assert np.isfinite(scores).all()


def _answers(handle: InProcessServer, probe: list[bytes]) -> tuple:
    """Score, Search and Export of one server, in a form two servers compare by, and
    whether its bundle adapts scores to cameras."""
    stub = pb_grpc.AnomalyServiceStub(handle.channel())
    reply = stub.Score(pb.ScoreRequest(images=[pb.Image(data=d, env="cam-a") for d in probe]),
                       timeout=60)
    scores = np.array([r.ensemble for r in reply.results], dtype=np.float32)
    found = stub.Search(pb.SearchRequest(image=probe[0], k=5), timeout=30).neighbors
    chunks = stub.Export(pb.ExportRequest(format=pb.EXPORT_FORMAT_ROWS), timeout=60)
    exported = sorted((r.id, r.env, r.split) for c in chunks for r in c.rows.rows)
    adapts = reply.provenance.score_adaptation not in ("", "none")
    return scores, [(n.id, round(n.distance, 5)) for n in found], exported, adapts


def test_a_second_server_on_another_empty_cache_answers_the_same(
        s3_options, s3_uri, tmp_path, tiny_model_path):
    """While the first server runs, a reader on the same URI and models URI with an
    empty cache of its own answers Score, Search and Export as the first does."""
    models_uri = f"{s3_uri}-models"
    RemoteDir(models_uri, s3_options).write_bytes(tiny_model_path.name,
                                                  tiny_model_path.read_bytes())
    probe = synthetic_images("normal", 3, seed=9) + synthetic_images("odd", 3, seed=9)
    first = in_process(s3_uri, models_uri, tmp_path / "cache-1", s3_options).start()
    try:
        fit_normal_rows(pb_grpc.AnomalyServiceStub(first.channel()), count=60)
        # the refresh after the ingest uploads the camera and score statistics
        expected = _answers(first, probe)
        assert statistics_uploaded(RemoteDir(s3_uri, s3_options).child("camera_stats"), 60,
                                   expected[3], time.monotonic() + 60)
        second = in_process(s3_uri, models_uri, tmp_path / "cache-2", s3_options,
                            role="reader").start()
        try:
            got = _answers(second, probe)
        finally:
            second.stop()
    finally:
        first.stop()
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-7)
    assert got[1] == expected[1] and len(got[1]) == 5
    assert got[2] == expected[2] and len(got[2]) == 60
