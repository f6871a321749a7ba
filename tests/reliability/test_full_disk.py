"""A data directory that fills up, or turns read-only, under a running server: Score
keeps answering, Ingest fails once per call with a clear code and no server path,
health reports reads SERVING and writes NOT_SERVING, nothing acknowledged is lost, and
writes resume by themselves (health's writes SERVING again before the next write) once
the disk takes them again.

The data directory is a small tmpfs mounted for the test (root can mount one; the
project's machines and CI run as root), filled with one file or remounted read-only
(the server holds no file open for writing between writes, so the remount is allowed)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from server_handle import SERVICE, ServerHandle, fit_normal_rows, models_dir_in, writes_health
from tiny_encoder import synthetic_images

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


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


def _remount(disk: Path, mode: str) -> None:
    done = subprocess.run(["mount", "-o", f"remount,{mode}", str(disk)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"remount {mode}: {done.stderr.strip()}"


def _writes_serving_within(server: ServerHandle, seconds: float) -> bool:
    """Whether health's writes report SERVING within `seconds` (no write is sent)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if writes_health(server) == SERVING:
            return True
        time.sleep(0.1)
    return False


def _fault_and_recovery(small_disk: Path, tmp_path: Path, tiny_model_path: Path,
                        break_disk: Callable[[], Callable[[], None]],
                        code: grpc.StatusCode, text: str) -> None:
    """A fitted server on `small_disk`; `break_disk()` fills it or makes it read-only and
    returns what undoes it. Checks every guarantee of a faulty data directory."""
    server = ServerHandle(small_disk / "data", models_dir_in(tmp_path, tiny_model_path))
    server.log_path = tmp_path / "server.log"
    server.start()
    try:
        stub = pb_grpc.AnomalyServiceStub(server.channel())
        fit_normal_rows(stub)
        probe = pb.ScoreRequest(images=[pb.Image(data=synthetic_images("odd", 1, seed=3)[0],
                                                 env="cam-a")])
        before = stub.Score(probe, timeout=60)
        assert writes_health(server) == SERVING

        restore = break_disk()
        lines = _log_lines(server.log_path)
        with pytest.raises(grpc.RpcError) as refused:
            stub.Ingest(iter(_batch(seed=50)), timeout=60)
        assert refused.value.code() == code
        details = refused.value.details() or ""
        assert text in details
        assert "/" not in details                             # no server path
        assert _log_lines(server.log_path) - lines <= 3      # one line per call, not per row
        # reads go on: Score with the same answer, health: reads serving, writes not
        assert stub.Score(probe, timeout=60).results == before.results
        stored = stub.Score(pb.ScoreRequest(images=probe.images, store=True), timeout=60)
        assert stored.results[0].stored is False and stored.results[0].ensemble > 0
        health = health_pb2_grpc.HealthStub(server.channel()).Check(
            health_pb2.HealthCheckRequest(service=SERVICE), timeout=10)
        assert health.status == SERVING
        time.sleep(1.0)                        # several refresh passes: the fault stands
        assert writes_health(server) == NOT_SERVING

        restore()                              # the disk takes writes again
        assert _writes_serving_within(server, 10), "writes health never came back"
        assert stub.Ingest(iter(_batch(seed=50)), timeout=60).inserted == 20
        info = stub.GetInfo(pb.GetInfoRequest(), timeout=10)
        assert info.total_rows == 80 + 20                     # nothing acknowledged lost
    finally:
        server.stop()


def test_a_full_data_directory(small_disk, tmp_path, tiny_model_path):
    def fill() -> Callable[[], None]:
        return _fill(small_disk).unlink
    _fault_and_recovery(small_disk, tmp_path, tiny_model_path, fill,
                        grpc.StatusCode.RESOURCE_EXHAUSTED, "data directory full")


def test_a_data_directory_made_read_only(small_disk, tmp_path, tiny_model_path):
    def read_only() -> Callable[[], None]:
        _remount(small_disk, "ro")
        return lambda: _remount(small_disk, "rw")
    _fault_and_recovery(small_disk, tmp_path, tiny_model_path, read_only,
                        grpc.StatusCode.FAILED_PRECONDITION, "read-only")
