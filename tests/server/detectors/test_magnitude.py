"""Feature magnitude: shorter embeddings score higher, read before the space step."""

from __future__ import annotations

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.detectors.magnitude import FeatureMagnitude


def test_shorter_rows_score_higher():
    X = np.array([[3.0, 4.0], [0.6, 0.8], [0.0, 10.0]])
    scores = FeatureMagnitude().fit(X).decision_function(X)
    np.testing.assert_allclose(scores, [-5.0, -1.0, -10.0])
    assert np.argmax(scores) == 1


def test_rows_of_another_width_are_refused():
    detector = FeatureMagnitude().fit(np.ones((4, 3)))
    with pytest.raises(InvalidInput, match="3 features"):
        detector.decision_function(np.ones((2, 5)))


def test_in_an_l2_bundle_the_norm_still_counts_and_knn_does_not_see_it():
    """With space l2 every vector the other detectors see has length 1; NORM reads the
    raw embedding, so a short query in a familiar direction is flagged by NORM only."""
    rng = np.random.default_rng(0)
    directions = rng.normal(size=(400, 16))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    X = directions * rng.uniform(9.0, 11.0, size=(400, 1))
    bundle = fit_bundle(X, FitSpec(detectors=("KNN", "NORM"), space="l2", seed=0))
    familiar = X[:5]
    short = familiar * 0.3                       # same directions, a third of the length
    long_scores, short_scores = bundle.score(familiar), bundle.score(short)
    np.testing.assert_allclose(short_scores.raw["KNN"], long_scores.raw["KNN"], atol=1e-5)
    # beyond every calibration row of NORM: above the top calibration level n / (n + 1)
    n_reference = len(bundle.reference["NORM"])
    assert (short_scores.calibrated["NORM"] > n_reference / (n_reference + 1)).all()
    assert (short_scores.raw["NORM"] > long_scores.raw["NORM"]).all()
    assert (short_scores.ensemble > long_scores.ensemble).all()
