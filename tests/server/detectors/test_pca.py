"""PCA scored through one product equals pyod's PCA."""

from __future__ import annotations

import numpy as np
import pytest
from pyod.models.pca import PCA

from envad.server.detectors import distances
from envad.server.detectors.pca import VectorizedPCA


@pytest.mark.parametrize("dim, standardization", [(8, False), (64, False), (512, False),
                                                  (64, True)])
def test_scores_equal_pyods(dim, standardization, monkeypatch):
    rng = np.random.default_rng(dim)
    train = rng.standard_normal((300, dim)) * rng.uniform(0.5, 3, dim)
    queries = np.vstack([rng.standard_normal((60, dim)), rng.standard_normal((10, dim)) * 5])
    settings = dict(standardization=standardization, whiten=True, random_state=0)
    ours, reference = VectorizedPCA(**settings).fit(train), PCA(**settings).fit(train)
    expected = reference.decision_function(queries)
    np.testing.assert_allclose(ours.decision_function(queries), expected, rtol=1e-10)
    np.testing.assert_allclose(ours.decision_function(queries[:1]), expected[:1], rtol=1e-10)
    monkeypatch.setattr(distances, "BLOCK_ELEMENTS", 7 * dim)   # several row blocks
    np.testing.assert_allclose(ours.decision_function(queries), expected, rtol=1e-10)
    assert expected[60:].mean() > expected[:60].mean()
