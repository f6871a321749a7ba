"""The paper's detectors: exact settings, scaler placement, ordering, separation."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from envad.errors import InvalidInput
from envad.server.detectors import registry
from envad.v1 import envad_pb2 as pb
from envad.v1 import envad_pb2_grpc as pb_grpc
from tiny_encoder import synthetic_images

PAPER_ORDER = ["IsoForest", "INNE", "LODA", "OCSVM", "PCA", "LOF5", "KNN", "KDE"]
WITH_SCALER = {"LODA", "OCSVM", "PCA", "LOF5"}
PAPER_SETTINGS = {
    "INNE": {"n_estimators": 51},
    "LODA": {"n_bins": 25, "n_random_cuts": 100},
    "OCSVM": {"gamma": "auto"},
    "PCA": {"standardization": False, "whiten": True},
    "LOF5": {"n_neighbors": 5, "novelty": True, "metric": "euclidean"},
    "KNN": {"n_neighbors": 5, "method": "largest"},
    "KDE": {"bandwidth": 1.0},
    "IsoForest": {"n_estimators": 100},
}


def blobs(seed=0, dim=32):
    rng = np.random.default_rng(seed)
    inliers = rng.normal(size=(300, dim))
    held_out = rng.normal(size=(40, dim))
    outliers = rng.normal(size=(20, dim)) + 3.0
    return inliers, held_out, outliers


def test_registry_holds_the_paper_detectors_in_order_then_envads_own():
    assert list(registry.PAPER_DETECTORS) == PAPER_ORDER
    assert registry.names() == PAPER_ORDER + ["NORM"]
    assert [n for n in registry.names() if registry.get(n).reads_raw] == ["NORM"]


def test_duplicate_names_are_rejected():
    with pytest.raises(ValueError, match="already registered"):
        registry.register("KNN", uses_scaler=False, quadratic=True, description="x")(lambda s: s)


def test_unknown_detector_lists_known_ones():
    with pytest.raises(InvalidInput, match="IsoForest, INNE"):
        registry.get("NOPE")


@pytest.mark.parametrize("name", PAPER_ORDER)
def test_exact_paper_settings_and_scaler(name):
    spec = registry.get(name)
    estimator = spec.pyod_estimator(0)
    params = estimator.get_params()
    for key, value in PAPER_SETTINGS[name].items():
        assert params[key] == value, (name, key)
    assert spec.uses_scaler == (name in WITH_SCALER)
    detector = registry.Detector(name).fit(blobs()[0])
    assert (detector.scaler_ is not None) == (name in WITH_SCALER)


@pytest.mark.parametrize("name", PAPER_ORDER)
def test_outliers_score_higher_than_held_out_inliers(name):
    inliers, held_out, outliers = blobs()
    detector = registry.Detector(name, seed=0).fit(inliers)
    scores = detector.score(np.vstack([held_out, outliers]))
    assert scores.dtype == np.float64
    assert roc_auc_score([0] * len(held_out) + [1] * len(outliers), scores) > 0.9


@pytest.mark.parametrize("name", PAPER_ORDER)
def test_deterministic_for_a_seed(name):
    inliers, held_out, _ = blobs()
    a = registry.Detector(name, seed=3).fit(inliers).score(held_out)
    b = registry.Detector(name, seed=3).fit(inliers).score(held_out)
    np.testing.assert_array_equal(a, b)


def test_estimator_rules():
    detector = registry.Detector("KNN", seed=1)
    assert vars(detector) == {"name": "KNN", "seed": 1}  # __init__ only stores parameters
    assert detector.fit(blobs()[0]) is detector
    assert hasattr(detector, "estimator_")


@pytest.mark.parametrize("name", PAPER_ORDER)
def test_envad_scores_equal_the_paper_pyod_recipe(name):
    """Every entry, re-implemented or not, scores like pyod with the paper's settings
    (KDE: at the bandwidth envad derived from the fit rows, the one setting it changes).

    KDE is compared at 8-d, where scikit-learn's tree densities are exact (test_exact.py).
    """
    from sklearn.preprocessing import StandardScaler

    inliers, held_out, outliers = blobs(seed=5, dim=8 if name == "KDE" else 64)
    queries = np.vstack([held_out, outliers])
    spec = registry.get(name)
    scaler = StandardScaler().fit(inliers) if spec.uses_scaler else None
    prep = (lambda X: scaler.transform(X)) if scaler else (lambda X: X)
    if name == "KDE":
        # at its bandwidth (a fraction of the neighbour spacing) the outliers' kernel terms
        # underflow in scikit-learn's tree sums; ExactKDE sums in log space and equals the
        # brute-force density there too (test_exact.py)
        queries = held_out
    detector = registry.Detector(name, seed=0).fit(inliers)
    reference = spec.pyod_estimator(0, detector.estimator_).fit(prep(inliers)).decision_function(
        prep(queries))
    np.testing.assert_allclose(detector.score(queries), reference, rtol=1e-4, atol=1e-6)


def test_kde_takes_its_bandwidth_from_the_fit_rows_not_pyods_fixed_one():
    """The one paper setting envad changes: the bandwidth follows the rows' scale, so the
    same rows in unit length and x40 get the same ranking (pyod's 1.0 would not)."""
    from envad.server.detectors.exact import neighbour_scale

    inliers, held_out, outliers = blobs(seed=2, dim=16)
    queries = np.vstack([held_out, outliers])
    detector = registry.Detector("KDE", seed=0).fit(inliers)
    np.testing.assert_allclose(detector.estimator_.bandwidth_, registry.KDE_BANDWIDTH_FACTOR
                               * neighbour_scale(inliers - inliers.mean(axis=0)))
    scaled = registry.Detector("KDE", seed=0).fit(40 * inliers)
    np.testing.assert_array_equal(np.argsort(detector.score(queries)),
                                  np.argsort(scaled.score(40 * queries)))
    assert registry.settings("KDE")["params"]["bandwidth"] is None


def test_a_capped_detector_is_fitted_on_a_seeded_sample(monkeypatch):
    from dataclasses import replace

    assert registry.get("OCSVM").max_fit_rows == registry.OCSVM_MAX_FIT_ROWS
    monkeypatch.setitem(registry._REGISTRY, "OCSVM",
                        replace(registry.get("OCSVM"), max_fit_rows=50))
    inliers = blobs()[0]
    a = registry.Detector("OCSVM", seed=2).fit(inliers)
    b = registry.Detector("OCSVM", seed=2).fit(inliers)
    assert len(a.estimator_.decision_scores_) == 50
    np.testing.assert_array_equal(a.score(inliers[:10]), b.score(inliers[:10]))


def test_float32_entries_score_float32_rows_without_a_float64_copy():
    X = blobs()[0].astype(np.float32)
    assert registry.get("KDE").score_dtype is np.float64     # float32 swapped near-ties
    for name in ("KNN", "IsoForest"):
        assert registry.get(name).score_dtype is np.float32
        scores = registry.Detector(name).fit(X).score(X[:5])
        assert scores.dtype == np.float64 and scores.shape == (5,)


def _mapped_libraries(handle) -> str:
    return open(f"/proc/{handle.process.pid}/maps").read()


def test_a_server_of_the_default_pipeline_never_loads_scikit_learn(fitted_process):
    """scikit-learn (about 60 MB resident) is loaded by the bundles whose detectors use
    it, not by a server that fits and scores the default pipeline."""
    stub = pb_grpc.AnomalyServiceStub(fitted_process.channel())
    request = pb.ScoreRequest(images=[pb.Image(data=synthetic_images("normal", 1, seed=5)[0],
                                               env="cam-new")])
    assert stub.Score(request, timeout=60).results[0].detectors
    assert "/sklearn/" not in _mapped_libraries(fitted_process)
    stub.Fit(pb.FitRequest(seed=0, detectors=["KNN", "OCSVM"]), timeout=120)
    assert stub.Score(request, timeout=60).results[0].detectors
    assert "/sklearn/" in _mapped_libraries(fitted_process)    # the check can see it
