"""Bundles on disk: round trip, tamper and path checks, atomic activation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from envad.errors import FailedPrecondition, Internal, InvalidInput, NotFound
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.detectors.persistence import BundleStore, load_bundle, save_bundle


@pytest.fixture(scope="module")
def bundle():
    rng = np.random.default_rng(0)
    envs = np.repeat(["a", "b"], 100)
    spec = FitSpec(model_id="enc-1", stylist_drop_fraction=0.25,
                   fit_filter={"splits": ["train"]})
    return fit_bundle(rng.normal(size=(200, 12)), spec, envs=envs)


def test_round_trip_gives_identical_scores(tmp_path, bundle):
    store = BundleStore(tmp_path)
    store.save(bundle)
    loaded = store.load(bundle.bundle_id)
    X = np.random.default_rng(1).normal(size=(30, 12))
    before, after = bundle.score(X), loaded.score(X)
    for name in bundle.detectors:
        np.testing.assert_array_equal(before.raw[name], after.raw[name])
    np.testing.assert_array_equal(before.ensemble, after.ensemble)
    assert loaded.threshold == bundle.threshold and loaded.fit_filter == {"splits": ["train"]}
    np.testing.assert_array_equal(loaded.kept_features, bundle.kept_features)
    assert [m["bundle_id"] for m in store.list()] == [bundle.bundle_id]


def test_tampered_file_is_refused(tmp_path, bundle):
    path = save_bundle(bundle, tmp_path)
    (path / "KNN.joblib").write_bytes(b"malicious pickle")
    with pytest.raises(Internal, match="hash"):
        load_bundle(path, tmp_path)


def test_paths_outside_the_bundles_dir_are_refused(tmp_path, bundle):
    path = save_bundle(bundle, tmp_path / "elsewhere")
    with pytest.raises(InvalidInput, match="outside"):
        load_bundle(path, tmp_path / "bundles")
    with pytest.raises(InvalidInput, match="malformed"):
        BundleStore(tmp_path).load("../elsewhere/" + bundle.bundle_id)


def test_activation_pointer_per_model(tmp_path, bundle):
    store = BundleStore(tmp_path)
    assert store.active("enc-1") is None
    store.save(bundle)
    store.activate(bundle.bundle_id)
    assert store.active("enc-1").bundle_id == bundle.bundle_id
    assert store.active("other-model") is None
    pointer = json.loads((tmp_path / "active" / "enc-1.json").read_text())
    assert pointer == {"bundle_id": bundle.bundle_id}
    with pytest.raises(NotFound):
        store.activate("20990101-missing")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging")]


@pytest.mark.parametrize("spec, described", [
    ("style_l2:2", "style_l2(n_style=2)"),
    ("pca_l2", "pca_l2"),
    ("white_l2:0.01", "white_l2(shrinkage=0.01)"),
    ("center_white_l2", "center_white_l2(shrinkage=0.003, min_camera_rows=32)"),
])
def test_space_step_round_trips(tmp_path, spec, described):
    from envad.server.detectors.bundle import FitSpec, fit_bundle
    from envad.server.detectors.persistence import load_bundle, save_bundle

    rng = np.random.default_rng(0)
    envs = np.repeat(["a", "b", "c"], 30)
    X = rng.normal(size=(90, 5)) + np.repeat(rng.normal(scale=4, size=(3, 5)), 30, axis=0)
    bundle = fit_bundle(X, FitSpec(detectors=("KNN",), space=spec), envs=envs)
    loaded = load_bundle(save_bundle(bundle, tmp_path), tmp_path)
    assert loaded.space.describe() == described
    np.testing.assert_allclose(loaded.score(X[:7], envs[:7]).ensemble,
                               bundle.score(X[:7], envs[:7]).ensemble)
    assert not np.allclose(bundle.score(X[:7], envs[:7]).raw["KNN"],
                           fit_bundle(X, FitSpec(detectors=("KNN",), space="l2"), envs=envs)
                           .score(X[:7], envs[:7]).raw["KNN"])


def test_fit_groups_round_trip_and_bundles_fitted_without_ids_have_none(tmp_path):
    from envad.server.detectors.leave_out import FitGroups

    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 6))
    X[100:] = 4.0 + 0.01 * rng.normal(size=(20, 6))    # one burst of 20 frames
    ids = np.array([f"img-{n:03d}" for n in range(120)])
    codes = np.r_[np.arange(100), np.full(20, 100)]
    # KNN, KDE leave the event out themselves; OCSVM's cross-fit folds are saved with it
    bundle = fit_bundle(X, FitSpec(detectors=("KNN", "KDE", "OCSVM")), ids=ids,
                        groups=FitGroups.of_members(ids, codes, 30))
    path = save_bundle(bundle, tmp_path)
    loaded = load_bundle(path, tmp_path)
    assert loaded.info().fit_groups == bundle.info().fit_groups
    assert "else <= 30 s apart" in loaded.info().fit_groups
    expected, served = bundle.score(X, ids=ids), loaded.score(X, ids=ids)
    for name in ("KNN", "KDE", "OCSVM"):
        np.testing.assert_array_equal(served.raw[name], expected.raw[name])
    assert served.raw["KNN"][100:].min() > served.raw["KNN"][:100].max()
    assert served.raw["OCSVM"][100:].min() > np.quantile(served.raw["OCSVM"][:100], 0.9)
    # a bundle fitted without ids has no fit-groups file: each query scored like any image
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["files"]["fit_groups.npz"]
    manifest_path.write_text(json.dumps(manifest))
    older = load_bundle(path, tmp_path)
    assert older.fit_groups is None and older.info().fit_groups == ""
    assert older.score(X, ids=ids).raw["KNN"][100:].max() < 0.1


_MAPPING = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) ")


def resident_bytes(array: np.ndarray) -> int:
    """Bytes of the mappings that hold `array` resident in this process (/proc/self/smaps:
    pages a read has touched, not the file's pages in the system's cache)."""
    start, end = array.ctypes.data, array.ctypes.data + array.nbytes
    total, overlaps = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            mapping = _MAPPING.match(line)
            if mapping:
                low, high = (int(bound, 16) for bound in mapping.groups())
                overlaps = low < end and high > start
            elif overlaps and line.startswith("Rss:"):
                total += int(line.split()[1]) * 1024
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").is_file(), reason="reads Linux's smaps")
def test_a_loaded_bundle_maps_its_arrays_and_reads_the_folds_only_for_fit_rows(tmp_path):
    """What a server holds is what it scores with: LOF5's four cross-fit folds (each
    about its fit rows) stay on disk until a fit row is scored."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(2000, 64)).astype(np.float32)
    ids = np.array([f"img-{n:04d}" for n in range(2000)])
    bundle = fit_bundle(X, FitSpec(detectors=("LOF5",)), ids=ids)
    loaded = load_bundle(save_bundle(bundle, tmp_path), tmp_path)
    whole = loaded.fitted["LOF5"]
    folds = [fold for fold in whole.folds_ if fold is not None]
    assert len(folds) == 4
    rows = [d.estimator_.detector_._fit_X for d in [whole, *folds]]
    assert all(isinstance(r, np.memmap) and not r.flags.writeable for r in rows)
    assert all(r.nbytes > 100_000 for r in rows)      # many pages each
    new_images = rng.normal(size=(50, 64)).astype(np.float32)
    np.testing.assert_array_equal(loaded.score(new_images).raw["LOF5"],
                                  bundle.score(new_images).raw["LOF5"])
    assert resident_bytes(rows[0]) > 0
    assert [resident_bytes(r) for r in rows[1:]] == [0, 0, 0, 0]
    # fit rows are scored by the folds that left them out: read now, scores unchanged
    served = loaded.score(X[:200], ids=ids[:200]).raw["LOF5"]
    np.testing.assert_array_equal(served, bundle.score(X[:200], ids=ids[:200]).raw["LOF5"])
    assert all(resident_bytes(r) > 0 for r in rows[1:])


def test_isolation_forests_are_read_not_mapped(tmp_path):
    """scikit-learn copies the trees on loading: mapping IsoForest's file would only pin
    its hundreds of small per-tree arrays, one mapping each."""
    X = np.random.default_rng(6).normal(size=(300, 8))
    bundle = fit_bundle(X, FitSpec(detectors=("IsoForest", "PCA")))
    loaded = load_bundle(save_bundle(bundle, tmp_path), tmp_path)
    forest = loaded.fitted["IsoForest"].estimator_.detector_
    per_tree = forest._decision_path_lengths + forest._average_path_length_per_tree
    assert len(per_tree) == 200 and not any(isinstance(a, np.memmap) for a in per_tree)
    assert isinstance(loaded.fitted["PCA"].scaler_.mean_, np.memmap)
    np.testing.assert_array_equal(loaded.score(X).raw["IsoForest"],
                                  bundle.score(X).raw["IsoForest"])


def test_score_adaptation_round_trips(tmp_path):
    rng = np.random.default_rng(2)
    X = rng.normal(size=(120, 6))
    bundle = fit_bundle(X, FitSpec(detectors=("KNN",), score_adaptation="camera:5"))
    path = save_bundle(bundle, tmp_path)
    loaded = load_bundle(path, tmp_path)
    assert loaded.score_adaptation.describe() == "camera(prior_rows=5)"
    queries = X[:20] + 1.0
    envs = ["cam"] * 20
    stats, loaded_stats = bundle.new_score_statistics(), loaded.new_score_statistics()
    bundle.observe(queries, envs, score_stats=stats)
    loaded.observe(queries, envs, score_stats=loaded_stats)
    expected = bundle.score(queries, envs, score_stats=stats)
    served = loaded.score(queries, envs, score_stats=loaded_stats)
    np.testing.assert_allclose(served.calibrated["KNN"], expected.calibrated["KNN"])
    assert not np.allclose(served.adapted["KNN"], served.raw["KNN"])


def test_calibration_round_trips_and_an_unknown_kind_is_refused(tmp_path):
    rng = np.random.default_rng(3)
    bundle = fit_bundle(rng.normal(size=(100, 6)), FitSpec(detectors=("KNN",)))
    path = save_bundle(bundle, tmp_path)
    queries = rng.normal(size=(30, 6)) * 5.0
    loaded = load_bundle(path, tmp_path)
    assert loaded.calibration == "interpolated"
    np.testing.assert_array_equal(loaded.score(queries).ensemble, bundle.score(queries).ensemble)
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["calibration"] = "quantile"
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(Internal, match="unknown calibration 'quantile'"):
        load_bundle(path, tmp_path)


@pytest.mark.parametrize("key", ["space", "space_scores", "score_adaptation", "calibration",
                                 "format_version"])
def test_a_bundle_of_an_unknown_older_format_is_refused_naming_the_refit(tmp_path, key):
    rng = np.random.default_rng(4)
    path = save_bundle(fit_bundle(rng.normal(size=(100, 6)), FitSpec(detectors=("KNN",))), tmp_path)
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest[key]          # written by a development version before envad 0.1.0
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(FailedPrecondition, match=rf"unknown older format .*no {key}\b.*"
                                                 r"refit the detectors with `envad fit`"):
        load_bundle(path, tmp_path)


def test_a_bundle_of_another_format_version_is_refused_naming_the_refit(tmp_path):
    rng = np.random.default_rng(5)
    path = save_bundle(fit_bundle(rng.normal(size=(100, 6)), FitSpec(detectors=("KNN",))), tmp_path)
    manifest_path = path / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["format_version"] = 0
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(FailedPrecondition, match="format version 0.*refit the detectors"):
        load_bundle(path, tmp_path)
