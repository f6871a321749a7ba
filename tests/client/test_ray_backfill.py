"""`envad backfill --engine ray` on a local Ray (2 CPUs): rows written straight into the
store's Lance table are picked up, searched and scored by the running server."""

from __future__ import annotations

import hashlib
import shutil
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")
lance = pytest.importorskip("lance")

from local_ray import local_ray_cluster  # noqa: E402

from client_archives import make_camtrap_dp, make_folder_dataset  # noqa: E402
from envad.client import EnvadClient, ray_backfill  # noqa: E402
from envad.client.backfill import run_backfill  # noqa: E402
from envad.client.backfill_plan import BackfillOptions  # noqa: E402
from envad.client.content_index import DUPLICATE_REASON  # noqa: E402
from envad.client.ray_backfill import RayOptions, run_ray_backfill, target_for  # noqa: E402
from envad.client.results import RowFilter  # noqa: E402
from envad.client.sources import open_source  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    with local_ray_cluster():
        yield


def wait_for_rows(client: EnvadClient, n: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while client.info().total_rows < n or client.info().index_rows < n:
        assert time.monotonic() < deadline, f"server never saw {n} rows: {client.info()}"
        time.sleep(0.2)


def test_ray_rows_are_served(local_ray, envad_server, tmp_path) -> None:
    dataset = make_folder_dataset(tmp_path / "ds", per_env=10)
    source = open_source(dataset)
    target = target_for(envad_server.data_dir, envad_server.models_dir / "tiny-test.onnx")
    before = lance.dataset(target.table_uri)
    options = RayOptions(workers=2, batch_size=4, chunk_size=12)
    summary = run_ray_backfill(source, target, tmp_path / "ck.jsonl", BackfillOptions(),
                               options, progress=False)
    assert (summary.ok, summary.inserted, summary.failed) == (20, 20, 0)
    # one Append commit per chunk: 20 images in chunks of 12 -> 2 commits, each of ONE
    # fragment although each chunk was embedded in 3 blocks of 4 images
    after = lance.dataset(target.table_uri)
    assert after.version == before.version + 2
    assert len(after.get_fragments()) == len(before.get_fragments()) + 2

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
        fit = client.fit(RowFilter(splits=("train",)), detectors=("KNN",),
                         allow_few_rows=True)
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


def test_the_kept_rows_of_a_chunk_are_written_in_fragments_of_at_most_fragment_rows(
        envad_server, tmp_path, monkeypatch) -> None:
    """12 embedded rows, 11 kept, fragments of at most 5 rows: 5 + 5 + 1, none committed,
    the dropped key in none of them."""
    monkeypatch.setattr(ray_backfill, "FRAGMENT_ROWS", 5)
    target = target_for(envad_server.data_dir, envad_server.models_dir / "tiny-test.onnx")
    n, dim = 12, target.dim
    vectors = np.random.default_rng(0).normal(size=(n, dim)).astype(np.float32)
    chunk = pa.table({
        "key": [f"k{i}" for i in range(n)], "id": [f"id{i}" for i in range(n)],
        "uri": [f"file:///img{i}.png" for i in range(n)], "env": ["cam0"] * n,
        "label": [""] * n, "split": ["train"] * n, "event": [""] * n,
        "timestamp": [""] * n, "sha256": [f"{i:064x}" for i in range(n)], "error": [""] * n,
        "vector": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel()), dim)})
    version = lance.dataset(target.table_uri).version
    fragments = ray_backfill.write_kept_fragments(chunk, {f"k{i}" for i in range(1, n)},
                                                  target)
    assert [f.physical_rows for f in fragments] == [5, 5, 1]
    assert lance.dataset(target.table_uri).version == version
    written = lance.LanceDataset.commit(target.table_uri, lance.LanceOperation.Append(
        fragments), read_version=version).to_table()
    assert sorted(written.column("id").to_pylist()) == sorted(f"id{i}" for i in range(1, n))


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


def test_ray_stores_an_image_once_across_sources_like_the_service(local_ray, envad_server,
                                                                  tmp_path) -> None:
    """The content-hash rule of the service engine: an image stored under another id (a
    copy in another source, or in the same chunk) is skipped, naming the stored row;
    --keep-duplicates (skip_duplicates=False) stores it anyway."""
    package = make_camtrap_dp(tmp_path / "pkg")              # ids deploymentID/mediaID
    media = package / "media"
    tree = tmp_path / "copies" / "siteZ"                      # ids: sha256 of the bytes
    tree.mkdir(parents=True)
    for image in media.glob("*.png"):
        shutil.copy(image, tree / image.name)
    (media / "m0.png").write_bytes((media / "m1.png").read_bytes())   # a copy in one chunk
    target = target_for(envad_server.data_dir, envad_server.models_dir / "tiny-test.onnx")
    ray_options = RayOptions(workers=1, batch_size=4)

    def ray_backfill(path: Path, name: str, **options):
        return run_ray_backfill(open_source(path), target, tmp_path / f"{name}.jsonl",
                                BackfillOptions(**options), ray_options, progress=False)

    first = ray_backfill(package, "pkg")
    assert first.inserted == 3 and first.skipped[DUPLICATE_REASON] == 1   # (and a video)
    second = ray_backfill(tmp_path / "copies", "copies")
    assert second.inserted == 1 and second.skipped == {DUPLICATE_REASON: 3}  # m0's old bytes
    rows = lance.dataset(target.table_uri).to_table(columns=["id", "env", "event"]).to_pylist()
    assert len(rows) == 4 and {r["env"] for r in rows} == {"locA", "Ridge", "siteZ"}
    assert {r["id"]: r["event"] for r in rows if r["env"] == "locA"} == {"dep1/m0": "e1"}
    with EnvadClient(envad_server.address) as client:         # the service engine agrees
        wait_for_rows(client, 4)
        service = run_backfill(client, open_source(tmp_path / "copies"),
                               tmp_path / "service.jsonl", progress=False)
    assert service.inserted == 0 and service.skipped == {DUPLICATE_REASON: 3}
    assert service.duplicates == 1                            # the row the Ray run stored
    kept = ray_backfill(tmp_path / "copies", "kept", skip_duplicates=False)
    assert kept.inserted == 3 and not kept.skipped
