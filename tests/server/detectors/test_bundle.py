"""fit_bundle: calibration, ensemble, threshold, sample cap, Stylist, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.server.detectors import registry
from envad.server.detectors.bundle import FitSpec, fit_bundle, fit_sample


def data(seed=0, n=400, dim=16):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, dim)).astype(np.float32)


def test_scores_calibrated_ensemble_and_threshold():
    X = data()
    bundle = fit_bundle(X, FitSpec(seed=0, contamination=0.1))
    assert bundle.detectors == list(registry.PAPER_DETECTORS)   # what a Fit naming none gets
    fresh = data(seed=1, n=500)
    scores = bundle.score(fresh)
    for name in bundle.detectors:
        assert ((scores.calibrated[name] >= 0) & (scores.calibrated[name] <= 1)).all()
    np.testing.assert_allclose(scores.ensemble,
                               np.mean([scores.calibrated[n] for n in bundle.detectors], 0))
    flagged = (scores.ensemble >= bundle.threshold).mean()
    assert 0.02 < flagged < 0.25  # close to the 10% contamination on fresh normal data
    far = bundle.score(data(seed=2, n=20) + 6.0)
    assert (far.ensemble >= bundle.threshold).all()
    assert set(bundle.stats) == set(bundle.detectors)
    assert all(s["n_samples"] == 320 for s in bundle.stats.values())


def test_sample_cap_and_detector_subset():
    bundle = fit_bundle(data(n=600), FitSpec(detectors=("KNN", "PCA"), max_samples=100, seed=4))
    assert bundle.detectors == ["KNN", "PCA"] and bundle.n_samples == 100


def test_a_bundle_fitted_on_the_callers_sample_is_the_one_all_rows_give():
    """fit_sample: a caller that reads only the sampled rows (the server's Fit on a large
    store) and fits on them with the same FitSpec gets the bundle fitting on every row
    would have given (the sample has a random stream of its own)."""
    X = data(n=600)
    spec = FitSpec(detectors=("KNN", "PCA"), max_samples=100, seed=4)
    everything = fit_bundle(X, spec)
    chosen = fit_sample(600, 100, seed=4)
    assert len(chosen) == 100 and (np.diff(chosen) > 0).all()
    sampled = fit_bundle(X[chosen], spec)
    queries = data(seed=3, n=25)
    assert np.array_equal(sampled.score(queries).ensemble, everything.score(queries).ensemble)
    assert sampled.threshold == everything.threshold
    assert np.array_equal(fit_sample(80, 100, seed=4), np.arange(80))
    assert not np.array_equal(fit_sample(600, 100, seed=5), chosen)


def test_stylist_drops_the_environment_biased_dimension():
    rng = np.random.default_rng(0)
    envs = np.repeat(["cam-a", "cam-b", "cam-c"], 100)
    X = rng.normal(size=(300, 8))
    X[:, 5] += np.repeat([0.0, 5.0, 10.0], 100)   # dimension 5 follows the camera
    bundle = fit_bundle(X, FitSpec(detectors=("KNN",), stylist_drop_fraction=0.125), envs=envs)
    assert 5 not in bundle.kept_features and len(bundle.kept_features) == 7
    assert bundle.score(X[:3]).ensemble.shape == (3,)
    with pytest.raises(InvalidInput, match="environments"):
        fit_bundle(X, FitSpec(detectors=("KNN",), stylist_drop_fraction=0.1))


@pytest.mark.parametrize("kwargs, message", [
    ({"detectors": ("Nope",)}, "unknown detector"),
    ({"contamination": 0.0}, "contamination"),
    ({"max_samples": 5}, "max_samples"),
    ({"detectors": ("KNN", "KNN")}, "repeat"),
])
def test_bad_arguments(kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        fit_bundle(data(), FitSpec(**kwargs))


def test_bad_data():
    with pytest.raises(InvalidInput, match="at least 20"):
        fit_bundle(data(n=10))
    bad = data()
    bad[3, 2] = np.nan
    with pytest.raises(InvalidInput, match="NaN"):
        fit_bundle(bad)
    bundle = fit_bundle(data(), FitSpec(detectors=("KNN",)))
    with pytest.raises(InvalidInput, match="16"):
        bundle.score(np.zeros((2, 8)))


def test_space_step_is_fitted_and_applied_before_the_detectors():
    rng = np.random.default_rng(0)
    envs = np.repeat(["cam-a", "cam-b"], 100)
    X = rng.normal(size=(200, 8)) + np.where(envs == "cam-a", 0.0, 10.0)[:, None]
    bundle = fit_bundle(X, FitSpec(detectors=("KNN",), space="center_l2"), envs=envs)
    assert bundle.space.name == "center_l2"
    query = X[:5]
    expected, _ = bundle.space.transform(query, envs[:5])
    np.testing.assert_allclose(bundle.score(query, envs[:5]).raw["KNN"],
                               bundle.fitted["KNN"].score(expected))
    raw = fit_bundle(X, FitSpec(detectors=("KNN",), space="raw"), envs=envs)
    assert not np.allclose(raw.score(query).raw["KNN"], bundle.score(query, envs[:5]).raw["KNN"])


def test_auto_space_is_chosen_on_labels_or_falls_back():
    rng = np.random.default_rng(1)
    envs = np.repeat(["c0", "c1", "c2"], 60)
    labels = np.tile(np.repeat(["x", "y", "z"], 20), 3)
    X = rng.normal(size=(180, 6))
    X[:, 0] += np.select([labels == "x", labels == "y"], [5.0, -5.0], 0.0)
    X[:, 1:] += np.repeat(rng.normal(scale=10, size=(3, 5)), 60, axis=0)
    chosen = fit_bundle(X, FitSpec(detectors=("KNN",), space="auto"), envs=envs, labels=labels)
    assert chosen.space_scores and set(chosen.space_scores) >= {"raw", "l2", "center_l2"}
    fallback = fit_bundle(X, FitSpec(detectors=("KNN",), space="auto"), envs=envs)
    assert fallback.space.name == "l2" and not fallback.space_scores


def test_score_stream_adapts_an_unseen_camera_once_enough_images_are_stored():
    rng = np.random.default_rng(2)
    envs = np.repeat(["a", "b"], 60)
    bundle = fit_bundle(rng.normal(size=(120, 4)), FitSpec(detectors=("KNN",), space="center_l2",
                                                           min_camera_rows=20), envs=envs)
    scores = bundle.score_stream(rng.normal(size=(40, 4)) + 3, np.array(["new"] * 40),
                                   chunk=10)
    # each chunk is scored with the rows stored before it: 20 stored after two chunks
    assert scores.adaptation == ["global"] * 20 + ["camera"] * 20


def test_a_rows_scores_do_not_depend_on_the_rows_scored_with_it():
    """Score coalesces requests: a row scored alone and in a batch must agree in its
    calibrated and ensemble scores up to the float rounding of the detectors' matrix
    products (BLAS and FAISS sum in another order for one row than for many; calibration
    is continuous, so it does not magnify that), and its ensemble sums its detectors in
    the same order."""
    rng = np.random.default_rng(11)
    bundle = fit_bundle(rng.normal(size=(300, 16)), FitSpec(seed=0))
    queries = rng.normal(size=(37, 16))
    together = bundle.score(queries)
    for i in (0, 5, 36):
        alone = bundle.score(queries[i:i + 1])
        for name in bundle.detectors:
            np.testing.assert_allclose(alone.raw[name][0], together.raw[name][i], rtol=1e-6)
            np.testing.assert_allclose(alone.calibrated[name][0],
                                       together.calibrated[name][i], rtol=0, atol=1e-6)
        np.testing.assert_allclose(alone.ensemble[0], together.ensemble[i], rtol=0, atol=1e-6)
        same_calibrated = [together.calibrated[name][i] for name in bundle.detectors]
        assert together.ensemble[i] == sum(same_calibrated) / len(same_calibrated)


def test_a_one_detector_bundle_ranks_images_beyond_every_calibration_row_by_their_raw_score():
    """With one detector the ensemble is its calibrated score: images more anomalous than
    every calibration row must keep the raw score's order, not tie at the top."""
    bundle = fit_bundle(data(n=100), FitSpec(detectors=("KNN",), seed=0))
    queries = data(seed=3, n=40) * np.linspace(1.0, 8.0, 40)[:, None]   # growing outliers
    scores = bundle.score(queries)
    beyond = scores.raw["KNN"] > bundle.reference["KNN"].max()
    assert beyond.sum() >= 20
    order = np.argsort(scores.raw["KNN"])
    assert (np.diff(scores.ensemble[order]) > 0).all()
    assert len(np.unique(scores.ensemble[beyond])) == beyond.sum()
    assert ((scores.ensemble > 0) & (scores.ensemble < 1)).all()


def test_a_stream_reusing_another_adaptations_raw_scores_scores_the_same():
    """`score_stream(known=...)` reuses the detectors' raw scores of the same rows (they
    do not depend on the score adaptation) and gives the scores a full run gives."""
    from dataclasses import replace

    from envad.server.detectors.score_adaptation import parse_score_adaptation

    rng = np.random.default_rng(5)
    X = rng.normal(size=(240, 8))
    bundle = fit_bundle(X, FitSpec(detectors=("KNN", "PCA"), seed=0),
                        envs=np.array(["a", "b"] * 120))
    query = rng.normal(size=(150, 8)) + 0.8
    envs = np.array(["new"] * 150)
    known = bundle.score_stream(query, envs)
    for spec in ("none", "camera:16", "frozen:8:256", "gated:16"):
        adapted = replace(bundle, score_adaptation=parse_score_adaptation(spec))
        full, reused = adapted.score_stream(query, envs), adapted.score_stream(
            query, envs, known=known)
        assert np.array_equal(full.ensemble, reused.ensemble), spec
        assert all(np.array_equal(full.adapted[n], reused.adapted[n]) for n in full.raw)
