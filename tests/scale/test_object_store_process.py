"""`envad serve` processes on a URI data dir (moto's S3 server on loopback): start-up
errors are one line, and a kill -9 loses at most one refresh interval of the camera
statistics."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np
import pytest
from moto import settings as moto_settings
from s3_emulator import SECRET, UriServer, in_process, listed, local_models, statistics_uploaded

from envad.server.remote_dir import RemoteDir
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import fit_normal_rows
from tiny_encoder import synthetic_images


def _serve(uri: str, options: dict[str, str], tmp_path, *flags: str
           ) -> subprocess.CompletedProcess:
    env = {**os.environ, "ENVAD_STORAGE_OPTIONS": listed(options)}
    return subprocess.run(
        [sys.executable, "-m", "envad.client.cli", "serve", "--port", "0", "--data-dir", uri,
         "--cache-dir", str(tmp_path / "cache"), *flags],
        capture_output=True, text=True, env=env, timeout=120)


def test_a_second_writer_on_one_store_is_one_line_naming_the_first(
        s3_options, s3_uri, tmp_path, tiny_model_path):
    models = local_models(tmp_path, tiny_model_path)
    first = in_process(s3_uri, models, tmp_path / "cache-1", s3_options, role="writer").start()
    try:
        done = _serve(s3_uri, s3_options, tmp_path, "--role", "writer", "--models-dir",
                      str(models))
    finally:
        first.stop()
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0, done.stderr
    assert len(lines) == 1, done.stderr
    assert f":{first.port}" in lines[0] and "--role reader" in lines[0]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("fault", ["missing bucket", "bad endpoint", "wrong credentials"])
def test_storage_that_cannot_be_reached_stops_the_start(fault, s3_options, s3_uri, tmp_path,
                                                        monkeypatch, unused_port):
    """One line on stderr naming the URI and what to check, no secret, no traceback."""
    options, uri, check = dict(s3_options), s3_uri, "bucket"
    if fault == "missing bucket":
        uri = "s3://envad-no-such-bucket/p"
    elif fault == "bad endpoint":
        options["aws_endpoint"] = f"http://127.0.0.1:{unused_port}"
        check = "endpoint"
    else:
        # the S3 server now checks every request's key: the test's key is unknown to it
        monkeypatch.setattr(moto_settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
        check = "credentials"
    done = _serve(uri, options, tmp_path)
    lines = done.stderr.strip().splitlines()
    assert done.returncode != 0, done.stderr
    assert len(lines) == 1, done.stderr
    assert uri in lines[0] and check in lines[0]
    assert SECRET not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_a_kill_loses_at_most_one_refresh_of_camera_statistics(s3_options, s3_uri, tmp_path,
                                                               tiny_model_path):
    """The statistics are uploaded at the refresh after they change: after a kill -9, a
    server on an empty cache finds them in the bucket and scores the same."""
    models = local_models(tmp_path, tiny_model_path)
    probe = synthetic_images("normal", 3, seed=9) + synthetic_images("odd", 3, seed=9)
    request = pb.ScoreRequest(images=[pb.Image(data=d, env="cam-a") for d in probe])
    first = UriServer(s3_uri, models, tmp_path / "cache-1", s3_options).start()
    try:
        stub = pb_grpc.AnomalyServiceStub(first.channel())
        fit_normal_rows(stub, count=60)
        reply = stub.Score(request, timeout=60)
        before = [r.ensemble for r in reply.results]
        adapts = reply.provenance.score_adaptation not in ("", "none")
        remote = RemoteDir(s3_uri, s3_options).child("camera_stats")
        assert statistics_uploaded(remote, 60, adapts, time.monotonic() + 60)
    finally:
        assert first.process is not None
        first.process.kill()
        first.process.wait()
    # a reader: the killed writer's lease is still fresh
    second = in_process(s3_uri, models, tmp_path / "cache-2", s3_options,
                        role="reader").start()
    try:
        stub = pb_grpc.AnomalyServiceStub(second.channel())
        after = [r.ensemble for r in stub.Score(request, timeout=60).results]
    finally:
        second.stop()
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-7)

