"""Every message from the server's converters back through the client's (and requests the
other way): what one side writes, the other reads unchanged; defaults are resolved once."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from envad.client import convert as client
from envad.client import results as r
from envad.errors import InvalidInput
from envad.pipeline import DEFAULT_PIPELINE
from envad.records import (
    INGEST_SPLIT,
    BundleInfo,
    DetectorFitStats,
    ImageInput,
    IngestInput,
    ItemError,
    ModelInfo,
    ModelList,
    Neighbor,
    Provenance,
    RowFilter,
    ServerInfo,
)
from envad.server import convert as server
from envad.server.config import ServerConfig
from envad.server.domain import (
    Activation,
    CameraStatsReset,
    EmbedOutcome,
    ExportOutcome,
    FitOutcome,
    ImageResult,
    IngestTotals,
    ScoreOutcome,
    SearchOutcome,
)
from envad.server.store import make_schema
from envad.v1 import envad_pb2 as pb

WHEN = dt.datetime(2026, 5, 1, 12, 30, tzinfo=dt.timezone.utc)
PROVENANCE = Provenance(model_id="enc-a", model_sha256="ab" * 32, bundle_id="b-1",
                        table_version=7, server_version="0.1.0", space="l2")
NEIGHBORS = [Neighbor(id="n1", env="cam-a", label="deer", split="train", uri="file:///1",
                      distance=0.25),
             Neighbor(id="n2", env="cam-b", label="", split="archive", uri="", distance=1.5)]
MODEL = ModelInfo(model_id="enc-a", file="a.onnx", sha256="cd" * 32, input_size=32,
                  embedding_dim=16, algorithm="erm", training_envs=("cam-a", "cam-b"),
                  dataset="tiny", created="2026-01-01T00:00:00+00:00", active=True,
                  metadata={"envad.model_id": "enc-a"})
BUNDLE = BundleInfo(bundle_id="b-1", model_id="enc-a", detectors=("KNN", "PCA"),
                    n_samples=120, n_features=16, threshold=0.875, created="2026-05-01",
                    filter=RowFilter(envs=("cam-a",), splits=("train",)),
                    stats=(DetectorFitStats("KNN", 0.5, 96), DetectorFitStats("PCA", 0.25, 96)),
                    space="center_l2(min_camera_rows=32)", calibration="interpolated",
                    fit_groups="scoring a fit row leaves its event out (frames of a camera "
                               "<= 60 s apart): 120 rows in 40 events, largest 5")
ERROR = ItemError(index=1, id="bad", code="INVALID_ARGUMENT", message="image bad: not an image")


# ------------------------------------------------------------------ client -> server


def test_images_and_ingest_items_arrive_unchanged() -> None:
    image = ImageInput(data=b"\x89PNG", id="i1", env="cam-a", timestamp=WHEN, uri="file:///i1")
    assert server.image_from_pb(client.image_to_pb(image)) == image
    items = [IngestInput(image, label="deer", split="train"),
             IngestInput(ImageInput(data=b"x"), label="", split="")]
    (request,) = client.ingest_requests(items, max_message_bytes=1 << 20)
    assert server.ingest_chunk_from_pb(request) == [
        items[0], IngestInput(ImageInput(data=b"x"), split=INGEST_SPLIT)]


def test_filters_arrive_unchanged() -> None:
    row_filter = RowFilter(envs=("cam-a", "cam-b"), splits=("train",), labels=("deer",))
    assert server.filter_from_pb(client.filter_to_pb(row_filter)) == row_filter
    assert server.filter_from_pb(client.filter_to_pb(None)) == RowFilter()


def test_request_defaults_are_resolved_from_the_config() -> None:
    config = ServerConfig(default_top_k=7, fit_max_samples=321)
    score = server.score_options_from_pb(pb.ScoreRequest(), config)
    assert (score.top_k, score.split, score.threshold, score.neighbor_filter) == (
        7, INGEST_SPLIT, None, None)
    score = server.score_options_from_pb(pb.ScoreRequest(top_k=2, split="val", threshold=0.5,
                                                         label="x"), config)
    assert (score.top_k, score.split, score.threshold, score.label) == (2, "val", 0.5, "x")
    fit = server.fit_options_from_pb(pb.FitRequest(), config)
    assert fit.row_filter == RowFilter(splits=("train",)) and fit.max_samples == 321
    # no detector named: the default pipeline's set, not the paper's eight
    assert fit.detectors == DEFAULT_PIPELINE.detectors == ("KNN",)
    assert fit.contamination == 0.05
    assert fit.stylist_drop_fraction is None and fit.space and fit.min_camera_rows == 32
    fit = server.fit_options_from_pb(pb.FitRequest(
        stylist=pb.StylistOptions(enabled=True), detectors=["KNN"], contamination=0.1,
        max_samples=50, no_activate=True), config)
    assert (fit.stylist_drop_fraction, fit.detectors, fit.contamination, fit.max_samples,
            fit.activate) == (0.25, ("KNN",), 0.1, 50, False)
    export = server.export_options_from_pb(pb.ExportRequest(without_vectors=True))
    assert (export.batch_size, export.with_vectors) == (4096, False)


def test_a_fits_event_gap_defaults_to_a_minute_and_refuses_what_is_not_a_number() -> None:
    config = ServerConfig()
    assert server.fit_options_from_pb(pb.FitRequest(), config).event_gap_s == 60.0
    assert server.fit_options_from_pb(pb.FitRequest(event_gap_s=5.5), config).event_gap_s == 5.5
    # negative: no events, each row alone
    assert server.fit_options_from_pb(pb.FitRequest(event_gap_s=-1), config).event_gap_s == 0.0
    for value in (float("nan"), float("inf"), float("-inf")):
        with pytest.raises(InvalidInput, match="finite"):
            server.fit_options_from_pb(pb.FitRequest(event_gap_s=value), config)


@pytest.mark.parametrize("field, value", [("image", b"png"), ("vector", (0.5, 1.5)),
                                          ("row_id", "r1")])
def test_search_queries_carry_exactly_one_query(field, value) -> None:
    request = client.search_request_to_pb(
        image=value if field == "image" else None,
        vector=value if field == "vector" else None,
        id=value if field == "row_id" else None, k=0, row_filter=RowFilter(envs=("cam-a",)))
    query = server.search_query_from_pb(request, ServerConfig())
    assert getattr(query, field) == value and query.k == 10
    assert query.row_filter == RowFilter(envs=("cam-a",))
    assert [getattr(query, f) is None for f in ("image", "vector", "row_id")].count(True) == 2


# ------------------------------------------------------------------ server -> client


def test_scores_arrive_with_their_errors_neighbours_and_provenance() -> None:
    good = ImageResult(index=0, id="i0", env="cam-a", raw={"KNN": 2.5, "PCA": 0.125},
                       calibrated={"KNN": 0.75, "PCA": 0.5}, ensemble=0.625, is_anomaly=False,
                       threshold=0.875, neighbors=NEIGHBORS, stored=True, adaptation="camera")
    bad = ImageResult(index=1, id="bad", env="", error=ERROR)
    result = client.score_result_from_pb(server.score_to_pb(ScoreOutcome([good, bad],
                                                                         PROVENANCE)))
    assert result.provenance == PROVENANCE
    first, second = result.results
    assert first.detector_scores() == good.raw
    assert first.detector_scores(calibrated=True) == good.calibrated
    assert (first.ensemble, first.is_anomaly, first.threshold, first.stored,
            first.adaptation) == (0.625, False, 0.875, True, "camera")
    assert list(first.neighbors) == NEIGHBORS and first.error is None
    assert second.error == ERROR and not second.ok and second.detectors == ()


def test_embeddings_arrive_per_item() -> None:
    vector = np.arange(4, dtype=np.float32) / 4
    outcome = EmbedOutcome([vector, None], [ERROR], ["i0", "bad"], 4, PROVENANCE)
    result = client.embed_result_from_pb(server.embed_to_pb(outcome))
    assert result.dim == 4 and result.provenance == PROVENANCE
    assert result.embeddings[0].vector == tuple(vector.tolist())
    assert result.embeddings[1].error == ERROR and result.embeddings[1].vector == ()


def test_ingest_summary_search_fit_and_reset_arrive_unchanged() -> None:
    totals = IngestTotals(received=3, inserted=1, duplicates=1, failures=[ERROR],
                          provenance=PROVENANCE)
    summary = client.ingest_summary_from_pb(server.ingest_summary_to_pb(totals))
    assert (summary.received, summary.inserted, summary.duplicates, summary.failed,
            summary.failures, summary.provenance) == (3, 1, 1, 1, (ERROR,), PROVENANCE)
    found = client.search_result_from_pb(server.search_to_pb(SearchOutcome(NEIGHBORS,
                                                                           PROVENANCE)))
    assert found == r.SearchResult(tuple(NEIGHBORS), PROVENANCE)
    fit = client.fit_result_from_pb(server.fit_to_pb(FitOutcome(BUNDLE, True, PROVENANCE)))
    assert fit == r.FitResult(bundle_id="b-1", stats=BUNDLE.stats, n_samples=120, n_features=16,
                              threshold=0.875, activated=True, provenance=PROVENANCE,
                              space=BUNDLE.space, fit_groups=BUNDLE.fit_groups)
    reset = server.camera_stats_reset_to_pb(CameraStatsReset(("cam-z",), PROVENANCE))
    assert client.camera_stats_reset_from_pb(reset) == ("cam-z",)


def test_models_and_server_info_arrive_as_the_same_records() -> None:
    listing = ModelList((MODEL, ModelInfo(**{**MODEL.__dict__, "model_id": "enc-b",
                                              "active": False, "metadata": {}})), "/models")
    assert client.model_list_from_pb(server.model_list_to_pb(listing)) == listing
    activation = server.activation_to_pb(Activation(MODEL, PROVENANCE))
    assert client.model_info_from_pb(activation.model) == MODEL
    info = ServerInfo(server_version="0.1.0", active_model=MODEL, bundle=BUNDLE,
                      env_counts={"cam-a": 3, "cam-b": 2}, total_rows=5, table_version=7,
                      data_dir="/data", hint="ready", index_rows=5)
    assert client.server_info_from_pb(server.server_info_to_pb(info)) == info
    empty = ServerInfo(server_version="0.1.0", active_model=None, bundle=None, env_counts={},
                       total_rows=0, table_version=0, data_dir="/data", hint="copy", index_rows=0)
    assert client.server_info_from_pb(server.server_info_to_pb(empty)) == empty


@pytest.mark.parametrize("export_format", [pb.EXPORT_FORMAT_ARROW_IPC, pb.EXPORT_FORMAT_ROWS])
def test_export_chunks_arrive_as_the_stored_rows(export_format) -> None:
    dim = 3
    table = pa.table({
        "id": ["r1", "r2"], "env": ["cam-a", "cam-b"], "label": ["deer", None],
        "split": ["train", "archive"], "timestamp": [WHEN, None], "uri": ["file:///r1", ""],
        "sha256": ["00" * 32, "11" * 32], "model_id": ["enc-a", "enc-a"],
        "ingested_at": [WHEN, WHEN],
        "vector": pa.FixedSizeListArray.from_arrays(
            pa.array(np.arange(6, dtype=np.float32)), dim),
        "event": ["burst-7", ""]}, schema=make_schema(dim))
    outcome = ExportOutcome(iter(table.to_batches(max_chunksize=1)), PROVENANCE)
    chunks = [pb.ExportChunk.FromString(c)
              for c in server.export_chunks_to_wire(outcome, export_format)]
    assert len(chunks) == 2
    assert all(client.provenance_from_pb(c.provenance) == PROVENANCE for c in chunks)
    batches = [b for c in chunks for b in client.export_chunk_from_pb(c, with_vectors=True)]
    rows = [row for batch in batches for row in batch.to_pylist()]
    assert [row["id"] for row in rows] == ["r1", "r2"]
    assert rows[0]["timestamp"] == WHEN and rows[1]["timestamp"] is None
    assert [list(row["vector"]) for row in rows] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert rows[0]["label"] == "deer" and rows[1]["label"] in ("", None)
    assert [row["event"] for row in rows] == ["burst-7", ""]
