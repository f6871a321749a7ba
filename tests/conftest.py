"""Shared fixtures: a tiny real ONNX encoder and a real `envad serve` process on loopback."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

#: `make test` runs one pytest-xdist worker more than there are cores; each worker, and
#: every process it starts (servers, training workers, Ray), keeps its OpenMP/BLAS pools
#: (torch's included) to one thread, or the workers' pools fight over the cores: 2.5x
#: faster on the training tests on the 2-core build host. Set before torch or numpy's
#: BLAS is loaded; a value the caller set is kept.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _pool in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_pool, "1")

from server_handle import InProcessServer, ServerHandle, free_port, models_dir_in
from tiny_encoder import build_tiny_encoder


@pytest.fixture(scope="session", autouse=True)
def decoded_image_cache(tmp_path_factory) -> Iterator[Path]:
    """The decoded-image cache of every test and the processes it starts, in a folder
    of this session (never the user's ~/.cache)."""
    directory = tmp_path_factory.mktemp("envad-cache")
    before = os.environ.get("ENVAD_CACHE_DIR")
    os.environ["ENVAD_CACHE_DIR"] = str(directory)
    yield directory
    if before is None:
        os.environ.pop("ENVAD_CACHE_DIR", None)
    else:
        os.environ["ENVAD_CACHE_DIR"] = before


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory) -> Path:
    """A small encoder file in the documented model format (32 px input, 16-d output)."""
    return build_tiny_encoder(tmp_path_factory.mktemp("models") / "tiny-test.onnx")


@pytest.fixture
def envad_server(tmp_path, tiny_model_path) -> Iterator[InProcessServer]:
    """A started server (in this process) with the tiny model in its models dir and an
    empty store."""
    handle = InProcessServer(tmp_path / "data", models_dir_in(tmp_path, tiny_model_path))
    handle.start()
    yield handle
    handle.stop()


@pytest.fixture
def envad_process(tmp_path, tiny_model_path) -> Iterator[ServerHandle]:
    """A started `envad serve` subprocess with the tiny model and an empty store: for
    tests of the process itself (signals, exit code, log, kill -9)."""
    handle = ServerHandle(tmp_path / "data", models_dir_in(tmp_path, tiny_model_path))
    handle.start()
    yield handle
    handle.stop()


@pytest.fixture
def unused_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    return free_port()


def _ingest_and_fit(handle) -> None:
    """120 normal training rows of two cameras, and a fitted bundle."""
    from envad.v1 import envad_pb2 as pb
    from envad.v1 import envad_pb2_grpc as pb_grpc
    from tiny_encoder import synthetic_images

    stub = pb_grpc.AnomalyServiceStub(handle.channel())
    images = synthetic_images("normal", 120, seed=1)
    envs = ("cam-a", "cam-b")
    batches = [pb.IngestRequest(items=[
        pb.IngestItem(image=pb.Image(data=d, env=envs[(i + j) % 2]), split="train")
        for j, d in enumerate(images[i:i + 20])]) for i in range(0, len(images), 20)]
    summary = stub.Ingest(iter(batches), timeout=60)
    assert summary.inserted == len(images), summary
    stub.Fit(pb.FitRequest(seed=0), timeout=120)


@pytest.fixture
def fitted_server(envad_server) -> InProcessServer:
    """`envad_server` holding 120 normal training rows and a fitted bundle."""
    _ingest_and_fit(envad_server)
    return envad_server


@pytest.fixture
def fitted_process(envad_process) -> ServerHandle:
    """`envad_process` holding 120 normal training rows and a fitted bundle."""
    _ingest_and_fit(envad_process)
    return envad_process


@pytest.fixture
def one_archive_set(monkeypatch) -> dict:
    """`envad select` scoring one archive set, the 10% bursts, instead of all of them (each
    is fitted per space and cross-fitted: a selection's largest cost), for tests whose
    subject is not the archive sets (tests/training/test_selection.py scores every one
    through archive_sets and score_fold). Returns the sets left."""
    from envad.training import selection  # the train extra: only the tests that ask

    mixes = {"10% in bursts of 8": selection.ARCHIVE_MIXES["10% in bursts of 8"]}
    monkeypatch.setattr(selection, "ARCHIVE_MIXES", mixes)
    return mixes


#: the test files that keep one worker busy for a minute or more (`make test`'s slowest):
#: collected first, so that `--dist loadfile` hands them out at the start, not at the end
#: when the other workers would wait idle. Order only: a file not named runs in its turn.
LONGEST_FILES = ("tests/scale/test_ray_backfill_resume.py", "tests/training/test_distributed.py",
                 "tests/client/test_demo.py", "tests/training/test_parallel_grid.py",
                 "tests/training/test_selection.py", "tests/server/test_app.py",
                 "tests/training/test_sweep.py", "tests/client/test_ray_backfill.py",
                 "tests/training/test_evaluate.py", "tests/scale/test_replicas.py",
                 "tests/training/test_run.py", "tests/training/test_training_cli.py")


def pytest_collection_modifyitems(config, items) -> None:
    first = {path: rank for rank, path in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::")[0], len(first)))
