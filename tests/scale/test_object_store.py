"""A server whose data dir is a URI on object storage (moto's S3 server on loopback):
the state lives in the bucket, and a server started on an empty local cache serves the
same answers."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from envad.errors import FailedPrecondition
from envad.server.config import load_config
from envad.server.remote_dir import RemoteDir
from envad.server.store import EmbeddingStore
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import InProcessServer, fit_normal_rows
from tiny_encoder import synthetic_images

moto_server = pytest.importorskip("moto.server")
pafs = pytest.importorskip("pyarrow.fs")

BUCKET = "envad-test-store"
SECRET = "envad-secret-value-7f3a"


@pytest.fixture(scope="session")
def s3_options() -> Iterator[dict[str, str]]:
    """Storage options of a bucket on an S3 server on 127.0.0.1 (moto)."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)     # one line per request
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    options = {"aws_endpoint": f"http://{host}:{port}", "allow_http": "true",
               "aws_region": "us-east-1", "aws_access_key_id": "envad-test",
               "aws_secret_access_key": SECRET}
    pafs.S3FileSystem(endpoint_override=f"{host}:{port}", scheme="http", region="us-east-1",
                      access_key="envad-test", secret_key=SECRET,
                      allow_bucket_creation=True).create_dir(BUCKET)
    yield options
    server.stop()


@pytest.fixture
def s3_uri() -> str:
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


def _models_dir(tmp_path: Path, tiny_model_path: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    (models / tiny_model_path.name).write_bytes(tiny_model_path.read_bytes())
    return models


def _server(uri: str, models: Path, cache: Path, options: dict[str, str]) -> InProcessServer:
    listed = ",".join(f"{k}={v}" for k, v in options.items())
    return InProcessServer(uri, models, extra_env={"ENVAD_STORAGE_OPTIONS": listed,
                                                   "ENVAD_CACHE_DIR": str(cache)})


def _scores(handle: InProcessServer, images: list[bytes]) -> tuple[np.ndarray, list[str]]:
    stub = pb_grpc.AnomalyServiceStub(handle.channel())
    reply = stub.Score(pb.ScoreRequest(images=[pb.Image(data=d, env="cam-a")
                                               for d in images]), timeout=60)
    ensemble = np.array([r.ensemble for r in reply.results], dtype=np.float32)
    return ensemble, [reply.provenance.bundle_id]


def test_state_lives_in_the_bucket(s3_options, s3_uri, tmp_path, tiny_model_path, caplog):
    """Ingest, Fit, Score on s3://...; a restart on an empty cache folder (a new machine)
    finds the rows, the bundle and the active model in the bucket and scores the same."""
    models = _models_dir(tmp_path, tiny_model_path)
    probe = synthetic_images("normal", 3, seed=9) + synthetic_images("odd", 3, seed=9)
    first = _server(s3_uri, models, tmp_path / "cache-1", s3_options)
    with caplog.at_level(logging.DEBUG):
        first.start()
        try:
            fit_normal_rows(pb_grpc.AnomalyServiceStub(first.channel()), count=60)
            before, bundle_before = _scores(first, probe)
        finally:
            first.stop()
    assert SECRET not in caplog.text
    assert not (tmp_path / "cache-1" / "lancedb").exists()   # the table is in the bucket

    second = _server(s3_uri, models, tmp_path / "cache-2", s3_options).start()
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
