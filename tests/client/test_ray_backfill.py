"""`envad backfill --engine ray` on a local Ray (2 CPUs): rows written straight into the
store's Lance table are picked up, searched and scored by the running server."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np
import pytest

ray = pytest.importorskip("ray")
lance = pytest.importorskip("lance")

from client_archives import make_folder_dataset  # noqa: E402
from envad.client import EnvadClient  # noqa: E402
from envad.client.backfill_plan import BackfillOptions  # noqa: E402
from envad.client.ray_backfill import RayOptions, run_ray_backfill, target_for  # noqa: E402
from envad.client.results import RowFilter  # noqa: E402
from envad.client.sources import open_source  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def wait_for_rows(client: EnvadClient, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while client.info().total_rows < n or client.info().index_rows < n:
        assert time.monotonic() < deadline, f"server never saw {n} rows: {client.info()}"
        time.sleep(0.2)


def test_ray_rows_are_served(local_ray, envad_server, tmp_path) -> None:
    dataset = make_folder_dataset(tmp_path / "ds", per_env=10)
    source = open_source(dataset)
    target = target_for(envad_server.data_dir, envad_server.models_dir / "tiny-test.onnx")
    version_before = lance.dataset(target.table_uri).version
    options = RayOptions(workers=2, batch_size=4, chunk_size=12)
    summary = run_ray_backfill(source, target, tmp_path / "ck.jsonl", BackfillOptions(),
                               options, progress=False)
    assert (summary.ok, summary.inserted, summary.failed) == (20, 20, 0)
    # one Append commit per chunk of fragments: 20 images in chunks of 12 -> 2 commits
    assert lance.dataset(target.table_uri).version == version_before + 2

    with EnvadClient(envad_server.address) as client:
        wait_for_rows(client, 20)
        items = list(source)
        first = items[0].read_bytes()
        expected_id = hashlib.sha256(first).hexdigest()
        hits = client.search(id=expected_id, k=3)
        assert hits.neighbors[0].id == expected_id and hits.neighbors[0].distance < 1e-4
        assert hits.neighbors[0].env == "cam0" and hits.neighbors[0].split == "train"
        # the Ray workers embed exactly as the server does
        served = np.array(client.embed([first]).embeddings[0].vector)
        stored = client.search(vector=served.tolist(), k=1).neighbors[0]
        assert stored.id == expected_id and stored.distance < 1e-4
        fit = client.fit(RowFilter(splits=("train",)), detectors=("KNN",))
        assert fit.n_samples == 20
        scored = client.score([first], include_self=True).results[0]
        assert scored.ok and scored.neighbors[0].id == expected_id
        evidence = client.score([first]).results[0]       # an image is no evidence for itself
        assert expected_id not in [n.id for n in evidence.neighbors]

    again = run_ray_backfill(source, target, tmp_path / "ck.jsonl", BackfillOptions(), options,
                             resume=True, progress=False)
    assert again.already_done == 20 and again.processed == 0
    one_chunk = RayOptions(workers=2, batch_size=10, chunk_size=64)
    fresh = run_ray_backfill(source, target, tmp_path / "other.jsonl", BackfillOptions(),
                             one_chunk, progress=False)
    assert fresh.ok == 20 and fresh.inserted == 0  # ids already stored are not written twice
    table = lance.dataset(target.table_uri).to_table(columns=["id"])
    assert table.num_rows == 20 and len(set(table.column("id").to_pylist())) == 20


def test_ray_rows_keep_the_exif_capture_time(local_ray, envad_server, tmp_path) -> None:
    from camera_folder import make_camera_folder, shot_time

    folder = make_camera_folder(tmp_path / "cams", normal=6, odd=0)
    target = target_for(envad_server.data_dir, envad_server.models_dir / "tiny-test.onnx")
    summary = run_ray_backfill(open_source(folder), target, tmp_path / "ck.jsonl",
                               BackfillOptions(), RayOptions(workers=1, batch_size=4),
                               progress=False)
    assert summary.ok == 6
    table = lance.dataset(target.table_uri).to_table(columns=["uri", "timestamp"]).to_pylist()
    times = {Path(r["uri"]).name: r["timestamp"].replace(tzinfo=None) for r in table}
    assert times == {f"IMG_{n:04d}.JPG": shot_time(n) for n in range(6)}
