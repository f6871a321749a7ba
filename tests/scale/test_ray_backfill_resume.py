"""`envad backfill --engine ray` into a store on object storage (moto's S3 on loopback),
on a local Ray of 2 CPUs with 2 embedding actors: a worker killed mid-run, or the driver
killed mid-run, and a re-run with --resume store every image exactly once, in rows equal
to those the service stores for the same images (`envad backfill` through a real server
on the same kind of store)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
lance = pytest.importorskip("lance")
psutil = pytest.importorskip("psutil")

from local_ray import local_ray_cluster  # noqa: E402
from s3_emulator import BUCKET, SECRET, in_process, listed, local_models  # noqa: E402

from envad.client import EnvadClient, ray_backfill  # noqa: E402
from envad.client.backfill import run_backfill  # noqa: E402
from envad.client.backfill_plan import BackfillOptions  # noqa: E402
from envad.client.ray_backfill import RayOptions, run_ray_backfill, target_for  # noqa: E402
from envad.client.sources import open_source  # noqa: E402
from tiny_encoder import synthetic_images  # noqa: E402

#: 3 cameras x 1,000 images, in chunks of 500 (6 commits)
CAMERAS, PER_CAMERA, CHUNK = 3, 1000, 500
IMAGES = CAMERAS * PER_CAMERA
COMPARED = ("id", "env", "label", "split", "timestamp", "uri", "sha256", "event")


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """A plain image tree (environment = first folder; id = sha256 of the bytes)."""
    root = tmp_path_factory.mktemp("archive")
    for camera in range(CAMERAS):
        folder = root / f"cam{camera}"
        folder.mkdir()
        for i, data in enumerate(synthetic_images("normal", PER_CAMERA, size=16, seed=camera)):
            (folder / f"img{i:04d}.png").write_bytes(data)
    return root


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_model_path) -> Path:
    return local_models(tmp_path_factory.mktemp("models"), tiny_model_path)


@pytest.fixture(scope="module")
def service_rows(archive, models, s3_options, tmp_path_factory) -> dict[str, dict]:
    """The rows `envad backfill` (service engine) stores for the archive, through a real
    server whose data dir is on the S3 emulator."""
    work = tmp_path_factory.mktemp("service")
    uri = f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"
    server = in_process(uri, models, work / "cache", s3_options).start()
    try:
        with EnvadClient(server.address) as client:
            summary = run_backfill(client, open_source(archive), work / "ck.jsonl",
                                   BackfillOptions(batch_size=64), progress=False)
    finally:
        server.stop()
    assert (summary.inserted, summary.failed) == (IMAGES, 0)
    return stored_rows(target_for(uri, model_file(models), s3_options))


def model_file(models: Path) -> Path:
    return next(models.glob("*.onnx"))


def stored_rows(target) -> dict[str, dict]:
    table = lance.dataset(target.table_uri, storage_options=target.lance_options).to_table()
    rows = table.to_pylist()
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids)), "an id is stored more than once"
    return {r["id"]: r for r in rows}


def assert_same_rows(ray_rows: dict[str, dict], service_rows: dict[str, dict]) -> None:
    """Every image stored once, with the service's metadata and vector."""
    assert ray_rows.keys() == service_rows.keys()
    for row_id, expected in service_rows.items():
        got = ray_rows[row_id]
        assert {k: got[k] for k in COMPARED} == {k: expected[k] for k in COMPARED}
        np.testing.assert_allclose(got["vector"], expected["vector"], rtol=1e-5, atol=1e-6)


def checkpointed(path: Path) -> int:
    """Items recorded in a checkpoint journal so far (its header line left out)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum(1 for line in lines[1:] if line.strip())


def embedding_workers() -> list:
    """This test's Ray actors that embed (Ray names the process after the actor)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if "Embedder" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


def kill_a_worker_after_first_commit(checkpoint: Path, done: threading.Event,
                                     killed: list[int]) -> None:
    """SIGKILL one embedding actor once a chunk is committed and recorded."""
    while not done.is_set() and not killed:
        if checkpointed(checkpoint) >= CHUNK:
            for worker in embedding_workers():
                os.kill(worker.pid, signal.SIGKILL)
                killed.append(worker.pid)
                return
        time.sleep(0.05)


@pytest.fixture
def local_ray():
    """One local Ray (2 CPUs) for the killed run and its resume, as a cluster that
    outlives a worker: the backfill connects to it instead of starting its own."""
    with local_ray_cluster():
        yield


def test_a_killed_worker_then_resume_stores_every_image_once(
        archive, models, s3_options, s3_uri, service_rows, local_ray, tmp_path,
        monkeypatch) -> None:
    # two actor pools of 3 chunks each: once the first chunk is committed, an embedding
    # actor is still alive or the second pool's is about to start, so one is killed
    # mid-run whatever the timing
    monkeypatch.setattr(ray_backfill, "WINDOW_CHUNKS", 3)
    target = target_for(s3_uri, model_file(models), s3_options)
    assert SECRET not in repr(target)
    ray_options = RayOptions(num_cpus=2, workers=2, batch_size=64, chunk_size=CHUNK)
    checkpoint = tmp_path / "ck.jsonl"
    done = threading.Event()
    killed: list[int] = []
    failure: list[Exception] = []
    killer = threading.Thread(target=kill_a_worker_after_first_commit,
                              args=(checkpoint, done, killed))
    killer.start()
    try:
        run_ray_backfill(open_source(archive), target, checkpoint, BackfillOptions(),
                         ray_options, progress=False)
    except Exception as exc:  # the kill may fail the run; --resume finishes it
        failure.append(exc)
    finally:
        done.set()
        killer.join()
    assert killed, "no embedding actor was found to kill"
    again = run_ray_backfill(open_source(archive), target, checkpoint, BackfillOptions(),
                             ray_options, resume=True, progress=False)
    assert again.failed == 0
    assert again.already_done + again.processed == IMAGES
    if not failure:     # Ray restarted the actor and retried its batch: nothing was left
        assert again.already_done == IMAGES
    assert_same_rows(stored_rows(target), service_rows)


def envad_backfill(archive: Path, target_uri: str, models: Path, checkpoint: Path,
                   options: dict[str, str], *extra: str) -> subprocess.Popen:
    """`envad backfill --engine ray` as a subprocess (its own session: its local Ray's
    processes can be found and ended with it)."""
    command = [sys.executable, "-m", "envad.client.cli", "backfill", str(archive),
               "--engine", "ray", "--data-dir", target_uri,
               "--model-file", str(model_file(models)), "--num-cpus", "2",
               "--workers", "2", "--chunk-size", str(CHUNK), "--checkpoint", str(checkpoint),
               "--no-progress", "--json", *extra]
    env = {**os.environ, "ENVAD_STORAGE_OPTIONS": listed(options),
           "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def end_session(process: subprocess.Popen) -> None:
    """SIGKILL what is left of the session this test started for `process`."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_killed_driver_then_resume_stores_every_image_once(
        archive, models, s3_options, s3_uri, service_rows, tmp_path) -> None:
    checkpoint = tmp_path / "ck.jsonl"
    driver = envad_backfill(archive, s3_uri, models, checkpoint, s3_options)
    try:
        deadline = time.monotonic() + 120
        while checkpointed(checkpoint) < CHUNK:
            assert driver.poll() is None, driver.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "no chunk was committed in 120 s"
            time.sleep(0.05)
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(30)
    finally:
        end_session(driver)
    assert 0 < checkpointed(checkpoint) < IMAGES
    resumed = envad_backfill(archive, s3_uri, models, checkpoint, s3_options, "--resume")
    try:
        out, err = resumed.communicate(timeout=180)
    finally:
        end_session(resumed)
    assert resumed.returncode == 0, err[-2000:]
    assert SECRET not in out + err
    summary = json.loads(out)
    assert summary["failed"] == 0 and summary["already_done"] >= CHUNK
    target = target_for(s3_uri, model_file(models), s3_options)
    assert_same_rows(stored_rows(target), service_rows)
