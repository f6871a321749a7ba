"""EnvadClient against a real `envad serve` (the envad_server fixture)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from client_archives import png_bytes
from envad.client import EnvadClient, FitSettings
from envad.client.results import ImageInput, IngestInput, RowFilter, sha256_hex
from envad.errors import FailedPrecondition, InvalidInput, NotFound
from envad.records import MIN_FIT_ROWS
from server_handle import InProcessServer, models_dir_in

ENVS = ("cam0", "cam1")


def ingest_some(client: EnvadClient, n_per_env: int = 12, split: str = "train") -> list[str]:
    items = [IngestInput(ImageInput(png_bytes(100 * e + i, size=32), env=env), label="0",
                         split=split)
             for e, env in enumerate(ENVS) for i in range(n_per_env)]
    summary = client.ingest(items)
    assert summary.failed == 0 and summary.inserted == len(items)
    return [sha256_hex(i.image.data) for i in items]


def test_info_and_models(envad_server) -> None:
    with EnvadClient(envad_server.address) as client:
        info = client.info()
        assert info.active_model is not None and info.active_model.model_id == "tiny-test"
        assert info.bundle is None and info.total_rows == 0
        listing = client.list_models()
        assert [m.model_id for m in listing.models] == ["tiny-test"]
        assert listing.models[0].active and listing.models[0].input_size == 32
        assert client.activate_model("tiny-test").model_id == "tiny-test"
        with pytest.raises(NotFound):
            client.activate_model("no-such-model")
        assert client.health() == "SERVING"


def test_ingest_fit_score_search_export(envad_server, tmp_path) -> None:
    with EnvadClient(envad_server.address) as client:
        with pytest.raises(FailedPrecondition):
            client.score([png_bytes(1, 32)])
        ids = ingest_some(client)
        again = client.ingest([IngestInput(ImageInput(png_bytes(0, 32), env="cam0"),
                                           split="train")])
        assert again.inserted == 0 and again.duplicates == 1
        fit = client.fit(RowFilter(splits=("train",)), detectors=("KNN", "IsoForest"),
                         allow_few_rows=True)
        assert fit.activated and fit.n_samples == len(ids)
        assert {s.detector for s in fit.stats} == {"KNN", "IsoForest"}
        result = client.score([ImageInput(png_bytes(999, 32), env="cam9"), b"not an image"],
                              top_k=3)
        good, bad = result.results
        assert good.ok and 0.0 <= good.ensemble <= 1.0
        assert set(good.detector_scores()) == {"KNN", "IsoForest"}
        assert len(good.neighbors) == 3 and good.neighbors[0].id in ids
        assert bad.error is not None and bad.error.code == "INVALID_ARGUMENT"
        assert result.provenance.bundle_id == fit.bundle_id
        hits = client.search(id=ids[0], k=2, row_filter=RowFilter(envs=("cam0",)))
        assert hits.neighbors[0].id == ids[0] and all(n.env == "cam0" for n in hits.neighbors)
        out = tmp_path / "emb.parquet"
        assert client.export_parquet(out, RowFilter(envs=("cam1",))) == len(ids) // 2
        table = pq.read_table(out)
        assert set(table.column("env").to_pylist()) == {"cam1"}
        assert table.schema.field("vector").type.list_size == 16
        info = client.info()
        assert info.env_counts == {"cam0": 12, "cam1": 12}
        assert info.bundle.bundle_id == fit.bundle_id
        with pytest.raises(InvalidInput):
            client.search(vector=[0.0] * 3)


def test_score_stream_raises_for_a_refused_batch_after_the_good_ones(fitted_server) -> None:
    """The server answers a refused batch in-band (ScoreResponse.error); the library
    raises it as its domain error, after yielding the results before it."""
    with EnvadClient(fitted_server.address) as client:
        batches = [[ImageInput(png_bytes(1, size=32))], [],
                   [ImageInput(png_bytes(2, size=32))]]
        results = []
        with pytest.raises(InvalidInput, match="batch 1: no images"):
            for result in client.score_stream(batches):
                results.append(result)
        assert len(results) == 1 and len(results[0].results) == 1


def test_evidence_leaves_out_the_image_itself_unless_asked(envad_server, tmp_path) -> None:
    import json
    import subprocess
    import sys

    with EnvadClient(envad_server.address) as client:
        ids = ingest_some(client)
        client.fit(RowFilter(splits=("train",)), detectors=("KNN",), allow_few_rows=True)
        stored = png_bytes(0, size=32)                       # stored as ids[0]
        plain = client.score([stored], top_k=3).results[0]
        assert ids[0] not in [n.id for n in plain.neighbors] and len(plain.neighbors) == 3
        itself = client.score([stored], top_k=3, include_self=True).results[0]
        assert itself.neighbors[0].id == ids[0]
        hits = client.search(id=ids[0], k=2, exclude_self=True)
        assert ids[0] not in [n.id for n in hits.neighbors] and len(hits.neighbors) == 2
    path = tmp_path / "stored.png"
    path.write_bytes(stored)
    cmd = [sys.executable, "-m", "envad.client.cli", "score", str(path), "--server",
           envad_server.address, "--json", "--top-k", "2"]
    default = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    asked = subprocess.run(cmd + ["--include-self"], capture_output=True, text=True,
                           timeout=120)
    assert default.returncode == 0 and asked.returncode == 0, default.stderr + asked.stderr
    first = [json.loads(p.stdout)[0]["neighbors"][0]["id"] for p in (default, asked)]
    assert first[0] != ids[0] and first[1] == ids[0]


def test_fit_refuses_fewer_rows_than_the_minimum_unless_allowed(envad_server) -> None:
    """The server's Fit owns the minimum: the library gets FAILED_PRECONDITION naming the
    count and the minimum, nothing is fitted, and allow_few_rows fits anyway (a
    keyword that replaces one field of the FitSettings record)."""
    settings = FitSettings(detectors=("KNN",))
    with EnvadClient(envad_server.address) as client:
        ingest_some(client, n_per_env=20)
        with pytest.raises(FailedPrecondition) as refused:
            client.fit(RowFilter(splits=("train",)), settings)
        message = str(refused.value)
        assert "only 40 stored rows" in message and f"at least {MIN_FIT_ROWS}" in message
        assert "allow_few_rows" in message and "\n" not in message
        assert client.info().bundle is None
        fit = client.fit(RowFilter(splits=("train",)), settings, allow_few_rows=True)
        assert fit.n_samples == 40 and [s.detector for s in fit.stats] == ["KNN"]
        assert client.info().bundle.bundle_id == fit.bundle_id


def test_writes_go_to_the_writer_and_reads_to_the_server(envad_server, tmp_path,
                                                         tiny_model_path) -> None:
    """`writer=`: Ingest, SetLabel, Fit and Score with store reach the writer only;
    reads stay on the server, which here has no rows and no bundle."""
    root = tmp_path / "writer"
    writer = InProcessServer(root / "data", models_dir_in(root, tiny_model_path)).start()
    try:
        with EnvadClient(envad_server.address, writer=writer.address) as client:
            ids = ingest_some(client)
            assert client.set_label(ids[:1], "normal").updated == (ids[0],)
            client.fit(RowFilter(splits=("train",)), detectors=("KNN",), allow_few_rows=True)
            stored = client.score([ImageInput(png_bytes(500, 32), env="cam0")], store=True)
            assert stored.results[0].ok
            with pytest.raises(FailedPrecondition):      # read: the server, unfitted
                client.score([png_bytes(500, 32)])
            assert client.info().total_rows == 0
        with EnvadClient(writer.address) as at_writer:
            info = at_writer.info()
        assert info.total_rows == len(ids) + 1 and info.bundle is not None
    finally:
        writer.stop()
