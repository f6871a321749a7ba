"""One-class SVM scored through one kernel product equals pyod's OCSVM."""

from __future__ import annotations

import numpy as np
import pytest
from pyod.models.ocsvm import OCSVM

from envad.server.detectors import distances
from envad.server.detectors.ocsvm import VectorizedOCSVM


@pytest.mark.parametrize("dim, gamma", [(2, "auto"), (64, "auto"), (512, "auto"),
                                        (16, "scale"), (16, 0.3)])
def test_scores_equal_pyods(dim, gamma, monkeypatch):
    rng = np.random.default_rng(dim)
    train = rng.standard_normal((300, dim))
    queries = np.vstack([rng.standard_normal((60, dim)), rng.standard_normal((10, dim)) * 4])
    ours, reference = VectorizedOCSVM(gamma=gamma).fit(train), OCSVM(gamma=gamma).fit(train)
    expected = reference.decision_function(queries)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(ours.decision_function(queries), expected, rtol=0,
                               atol=1e-9 * scale)
    np.testing.assert_allclose(ours.decision_function(queries[:1]), expected[:1], rtol=0,
                               atol=1e-9 * scale)
    monkeypatch.setattr(distances, "BLOCK_ELEMENTS", 5 * len(ours.detector_.support_vectors_))
    np.testing.assert_allclose(ours.decision_function(queries), expected, rtol=0,
                               atol=1e-9 * scale)
    assert expected[60:].mean() > expected[:60].mean()


def test_other_kernels_score_as_pyod():
    rng = np.random.default_rng(1)
    train, queries = rng.standard_normal((100, 8)), rng.standard_normal((20, 8))
    ours = VectorizedOCSVM(kernel="linear").fit(train)
    np.testing.assert_allclose(ours.decision_function(queries),
                               OCSVM(kernel="linear").fit(train).decision_function(queries),
                               rtol=1e-12)
