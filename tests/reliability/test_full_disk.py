"""A data directory that fills up under a running server: Score keeps answering, Ingest
fails once per call with a clear code and no server path, nothing acknowledged is lost,
and writes resume by themselves once the disk takes them again.

The data directory is a small tmpfs mounted for the test (root can mount one; the
project's machines and CI run as root). A read-only data directory is told apart by
the same classification (tests/server/test_writer.py): a mounted file system with the
server's files open for writing cannot be remounted read-only under it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import SERVICE, ServerHandle, fit_normal_rows, models_dir_in
from tiny_encoder import synthetic_images


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 64 MB tmpfs at tmp_path/disk, unmounted afterwards."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs",
                           str(mount_point)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): run as root")
    yield mount_point
    subprocess.run(["umount", "-l", str(mount_point)], check=False)


def _fill(disk: Path) -> Path:
    """Take every free byte of `disk` with one file."""
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        try:
            while True:
                handle.write(b"\0" * (1 << 20))
                handle.flush()
        except OSError:
            pass
    return filler


def _batch(seed: int, env: str = "cam-a"):
    return [pb.IngestRequest(items=[pb.IngestItem(image=pb.Image(data=d, env=env))
                                    for d in synthetic_images("normal", 20, seed=seed)])]


def _log_lines(path: Path) -> int:
    return len(path.read_text(errors="replace").splitlines())


def test_a_full_data_directory(small_disk, tmp_path, tiny_model_path):
    server = ServerHandle(small_disk / "data", models_dir_in(tmp_path, tiny_model_path))
    server.log_path = tmp_path / "server.log"
    server.start()
    try:
        stub = pb_grpc.AnomalyServiceStub(server.channel())
        fit_normal_rows(stub)
        probe = pb.ScoreRequest(images=[pb.Image(data=synthetic_images("odd", 1, seed=3)[0],
                                                 env="cam-a")])
        before = stub.Score(probe, timeout=60)

        filler = _fill(small_disk)
        lines = _log_lines(server.log_path)
        with pytest.raises(grpc.RpcError) as full:
            stub.Ingest(iter(_batch(seed=50)), timeout=60)
        assert full.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "data directory full" in full.value.details()
        assert str(small_disk) not in full.value.details()
        assert _log_lines(server.log_path) - lines <= 3      # one line per call, not per row
        # reads go on: Score with the same answer, health serving
        assert stub.Score(probe, timeout=60).results == before.results
        stored = stub.Score(pb.ScoreRequest(images=probe.images, store=True), timeout=60)
        assert stored.results[0].stored is False and stored.results[0].ensemble > 0
        health = health_pb2_grpc.HealthStub(server.channel()).Check(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING

        filler.unlink()                                      # space returns: writes resume
        assert stub.Ingest(iter(_batch(seed=50)), timeout=60).inserted == 20

        info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
        assert info.total_rows == 80 + 20                     # nothing acknowledged lost
    finally:
        server.stop()
