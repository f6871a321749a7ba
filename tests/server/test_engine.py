"""The Engine in-process: a real LanceDB dir in tmp, real ONNX files, no gRPC."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envad.errors import FailedPrecondition, NotFound
from envad.records import MIN_FIT_ROWS, ImageInput, IngestInput, RowFilter
from envad.server.config import ServerConfig
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.domain import FitOptions, ScoreOptions
from envad.server.engine import Engine
from envad.server.metrics import ServerMetrics
from envad.server.store import EmbeddingStore, vectors_of
from tiny_encoder import build_tiny_encoder, synthetic_images


@pytest.fixture
def config(tmp_path) -> ServerConfig:
    return ServerConfig(data_dir=tmp_path / "data", models_dir=tmp_path / "models",
                        refresh_seconds=0.1)


@pytest.fixture
def engine(config):
    engine = Engine(config)
    yield engine
    engine.close()


def _fit_on_normal_images(engine: Engine) -> None:
    images = synthetic_images("normal", 60, seed=1)
    chunk = [IngestInput(ImageInput(data=d, env=("cam-a", "cam-b")[i % 2]), split="train")
             for i, d in enumerate(images)]
    assert engine.ingest([chunk]).inserted == len(images)
    engine.fit(FitOptions(row_filter=RowFilter(splits=("train",)), detectors=("KNN", "PCA"),
                          max_samples=1000, contamination=0.05, stylist_drop_fraction=None,
                          space="l2", min_camera_rows=32, allow_few_rows=True))


def _score_one(engine: Engine):
    image = ImageInput(data=synthetic_images("normal", 1, seed=9)[0], env="cam-a")
    return engine.score([image], ScoreOptions(top_k=3, split="archive"))


def test_start_without_models_is_not_ready_and_says_what_to_do(engine, config):
    engine.start()
    assert not engine.ready
    with pytest.raises(FailedPrecondition, match="copy an envad .onnx"):
        _score_one(engine)
    assert str(config.resolved_models_dir) in engine.info().hint


def test_start_activates_scores_and_remembers_the_model(engine, config):
    build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a")
    engine.start()
    assert engine.ready and engine.info().active_model.model_id == "enc-a"
    with pytest.raises(FailedPrecondition, match="no detectors fitted"):
        _score_one(engine)
    _fit_on_normal_images(engine)
    outcome = _score_one(engine)
    assert outcome.provenance.model_id == "enc-a"
    assert len(outcome.results[0].neighbors) == 3


def test_dimension_mismatch_at_start_answers_failed_precondition(engine, config):
    """The table was written by a 8-d encoder; a 16-d file with the same id arrives."""
    EmbeddingStore(config.lancedb_dir, "enc-a", 8)
    build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a", dim=16)
    engine.start()   # must not raise: the server starts and says why it is not ready
    assert not engine.ready
    with pytest.raises(FailedPrecondition) as caught:
        _score_one(engine)
    message = str(caught.value)
    assert "8-d" in message and "16-d" in message and "enc-a" in message
    assert "8-d" in engine.info().hint and engine.info().active_model is None
    engine.refresh()   # a refused file is not retried (and not logged) every refresh
    assert not engine.ready


def test_failed_activation_keeps_the_previous_model_serving(engine, config):
    build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a")
    engine.start()
    _fit_on_normal_images(engine)
    EmbeddingStore(config.lancedb_dir, "enc-b", 8)
    build_tiny_encoder(config.resolved_models_dir / "b.onnx", model_id="enc-b", dim=16)
    with pytest.raises(FailedPrecondition) as caught:
        engine.activate("enc-b")
    message = str(caught.value)
    assert "8-d" in message and "16-d" in message and "'enc-a' keeps serving" in message
    assert _score_one(engine).provenance.model_id == "enc-a"
    listing = engine.list_models()
    assert {m.model_id: m.active for m in listing.models} == {"enc-a": True, "enc-b": False}
    with pytest.raises(NotFound, match="enc-a, enc-b"):
        engine.activate("enc-c")


def test_named_model_space_is_created_once_and_activation_reuses_it(engine, config):
    build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a")
    build_tiny_encoder(config.resolved_models_dir / "b.onnx", model_id="enc-b", seed=1)
    engine.start()
    image = ImageInput(data=synthetic_images("normal", 1, seed=3)[0])
    embedded = engine.embed([image], model_id="enc-b")
    assert embedded.provenance.model_id == "enc-b" and embedded.dim == 16
    space = engine.require_space("enc-b")
    engine.activate("enc-b")
    assert engine.require_space() is space
    assert (config.data_dir / "active_model").read_text() == "enc-b"


def test_fit_does_not_depend_on_the_order_rows_were_stored(tmp_path):
    """The same rows stored in two orders give the same fitted scores (Fit orders its
    rows by id, so its fit/calibration split does not follow arrival order)."""
    images = synthetic_images("normal", 60, seed=1)
    items = [IngestInput(ImageInput(data=d, id=f"img-{i:03d}", env=("cam-a", "cam-b")[i % 2]),
                         split="train") for i, d in enumerate(images)]
    outcomes = []
    for name, order in (("forward", items), ("reversed", items[::-1])):
        config = ServerConfig(data_dir=tmp_path / name / "data",
                              models_dir=tmp_path / name / "models", refresh_seconds=0.1)
        build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a")
        engine = Engine(config)
        try:
            engine.start()
            for start in range(0, len(order), 7):      # several commits, in this order
                engine.ingest([order[start:start + 7]])
            engine.fit(FitOptions(row_filter=RowFilter(splits=("train",)),
                                  detectors=("KNN", "PCA"), max_samples=1000,
                                  contamination=0.05, stylist_drop_fraction=None,
                                  space="l2", min_camera_rows=32, allow_few_rows=True))
            outcomes.append(_score_one(engine).results[0])
        finally:
            engine.close()
    assert outcomes[0].raw == outcomes[1].raw
    assert outcomes[0].calibrated == outcomes[1].calibrated


def test_fit_refuses_fewer_rows_than_the_minimum_unless_allowed(engine, config):
    build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a")
    engine.start()
    images = synthetic_images("normal", 40, seed=1)
    engine.ingest([[IngestInput(ImageInput(data=d, env="cam-a"), split="train")
                    for d in images]])
    options = FitOptions(row_filter=RowFilter(splits=("train",)), detectors=("KNN",),
                         max_samples=1000, contamination=0.05, stylist_drop_fraction=None,
                         space="l2", min_camera_rows=32)
    with pytest.raises(FailedPrecondition, match=f"only 40 stored rows .* at least "
                                                 f"{MIN_FIT_ROWS}"):
        engine.fit(options)
    assert engine.info().bundle is None
    assert engine.fit(replace(options, allow_few_rows=True)).bundle.n_samples == 40


def test_fit_over_its_sample_cap_reads_only_the_sampled_vectors_and_fits_as_on_all(
        engine, config, monkeypatch):
    """A store larger than max_samples: Fit reads the vectors of the sampled rows only,
    and its bundle is the one fitting on every matching row (sorted by id) gives."""
    build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a")
    engine.start()
    images = synthetic_images("normal", 150, seed=1)
    engine.ingest([[IngestInput(ImageInput(data=d, id=f"img-{i:03d}",
                                           env=("cam-a", "cam-b")[i % 2]), split="train")
                    for i, d in enumerate(images)]])
    store = engine.require_space().store
    everything = store.read(RowFilter(splits=("train",))).sort_by("id")
    read_ids = store.read_ids
    vectors_read: list[int] = []

    def counted(ids, **kwargs):
        vectors_read.append(len(ids) if kwargs.get("with_vectors", True) else 0)
        return read_ids(ids, **kwargs)

    monkeypatch.setattr(store, "read_ids", counted)
    options = FitOptions(row_filter=RowFilter(splits=("train",)), detectors=("KNN", "PCA"),
                         max_samples=60, contamination=0.05, stylist_drop_fraction=None,
                         space="l2", min_camera_rows=32, seed=3)
    fitted = engine.fit(options).bundle
    assert fitted.n_samples == 60 and max(vectors_read) == 60
    spec = FitSpec(detectors=("KNN", "PCA"), max_samples=60, seed=3, space="l2",
                   min_camera_rows=32)
    reference = fit_bundle(vectors_of(everything), spec,
                           envs=np.asarray(everything.column("env").to_pylist()),
                           labels=np.asarray([""] * everything.num_rows))
    queries = vectors_of(everything)[:10] + 0.01
    served = engine.require_space().bundle.score(queries)
    assert np.array_equal(served.ensemble, reference.score(queries).ensemble)


def test_a_sampled_fit_leaves_out_each_burst_frames_whole_event(engine, config):
    """A burst of 30 odd frames (2 s apart) among 150 normal images (10 minutes apart),
    fitted on a sample of 60: every burst frame, the unsampled ones included (they
    belong to sampled frames' events), is scored without its event and stands out;
    with every row its own event (gap 0) the burst's sampled frames hide it."""
    from datetime import datetime, timedelta, timezone

    build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a")
    engine.start()
    start = datetime(2024, 6, 1, 6, tzinfo=timezone.utc)
    normal = [ImageInput(data=d, id=f"n-{i:03d}", env=("cam-a", "cam-b")[i % 2],
                         timestamp=start + timedelta(minutes=10 * i))
              for i, d in enumerate(synthetic_images("normal", 150, seed=1))]
    burst = [ImageInput(data=d, id=f"b-{i:03d}", env="cam-a",
                        timestamp=start + timedelta(days=2, seconds=2 * i))
             for i, d in enumerate(synthetic_images("odd", 30, seed=2))]
    engine.ingest([[IngestInput(image, split="train") for image in normal + burst]])
    knn = {}
    for gap in (60.0, 0.0):
        fitted = engine.fit(FitOptions(
            row_filter=RowFilter(splits=("train",)), detectors=("KNN",), max_samples=60,
            contamination=0.05, stylist_drop_fraction=None, space="l2", min_camera_rows=32,
            seed=3, event_gap_s=gap)).bundle
        assert fitted.n_samples == 60
        scored = engine.score(normal[:40] + burst,
                              ScoreOptions(top_k=1, split="x", reuse_stored=True))
        knn[gap] = np.array([r.raw["KNN"] for r in scored.results])
        if gap:
            assert fitted.fit_groups.endswith("largest 30")
    with_events, alone = knn[60.0], knn[0.0]
    assert with_events[40:].min() > 10 * with_events[:40].max()
    assert np.median(alone[40:]) < np.median(alone[:40])


def test_fit_serves_its_bundle_as_loaded_from_its_saved_files(engine, config):
    """The writer scores with what every replica loads: the bundle's arrays mapped from
    the files it saved (persistence.py), not the fit's copies."""
    build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a")
    engine.start()
    _fit_on_normal_images(engine)
    served = engine.require_space().bundle
    pca = served.fitted["PCA"]
    arrays = [v for v in (*vars(pca.estimator_).values(), *vars(pca.scaler_).values())
              if isinstance(v, np.ndarray)]
    assert arrays and all(isinstance(v, np.memmap) for v in arrays)
    assert [m["bundle_id"] for m in engine.bundles.list()] == [served.bundle_id]
    assert np.isfinite(_score_one(engine).results[0].ensemble)


def test_score_reuses_the_stored_embedding_of_a_stored_image(config):
    """reuse_stored: an image stored under its id with the same content is scored from
    its stored row without going through the encoder, with the scores and evidence it
    gets when embedded again; an unstored image, or another image under a stored id,
    is embedded."""
    metrics = ServerMetrics()
    engine = Engine(config, metrics)
    try:
        build_tiny_encoder(config.resolved_models_dir / "a.onnx", model_id="enc-a")
        engine.start()
        _fit_on_normal_images(engine)          # stores 60 images under their sha256

        def embedded() -> float:
            return metrics.registry.get_sample_value("envad_batch_images_sum") or 0.0

        stored = [ImageInput(data=d, env=("cam-a", "cam-b")[i % 2])
                  for i, d in enumerate(synthetic_images("normal", 60, seed=1)[:5])]
        fresh = ImageInput(data=synthetic_images("odd", 1, seed=3)[0], env="cam-a")
        impostor = ImageInput(data=synthetic_images("odd", 1, seed=4)[0],
                              id=stored[0].resolved_id(), env="cam-a")
        before = embedded()
        again = engine.score(stored, ScoreOptions(top_k=3, split="archive"))
        assert embedded() == before + 5
        reused = engine.score(stored + [fresh, impostor],
                              ScoreOptions(top_k=3, split="archive", reuse_stored=True))
        assert embedded() == before + 5 + 2           # only the two not stored as they are
        for a, b in zip(again.results, reused.results[:5], strict=True):
            assert (b.index, b.id) == (a.index, a.id)
            assert b.ensemble == pytest.approx(a.ensemble, abs=1e-6)
            assert [n.id for n in b.neighbors] == [n.id for n in a.neighbors]
            assert b.id not in [n.id for n in b.neighbors]     # no evidence for itself
        assert [r.index for r in reused.results] == list(range(7))
        assert all(r.error is None and r.ensemble is not None for r in reused.results)
        assert reused.results[5].ensemble > max(r.ensemble for r in reused.results[:5])
    finally:
        engine.close()
