"""Vectorised INNE scores like pyod's INNE, for the same fit."""

from __future__ import annotations

import numpy as np
import pytest
from pyod.models.inne import INNE

from envad.server.detectors.inne import CHUNK_ROWS, VectorizedINNE


@pytest.mark.parametrize("dim", [2, 64, 512])
def test_scores_equal_pyods(dim):
    rng = np.random.default_rng(dim)
    train = rng.standard_normal((300, dim))
    queries = np.vstack([rng.standard_normal((200, dim)),          # mostly covered
                         rng.standard_normal((50, dim)) * 4 + 3,   # mostly not covered
                         train[:20]])                              # exactly on centroids
    ours = VectorizedINNE(n_estimators=51, random_state=7).fit(train)
    reference = INNE(n_estimators=51, random_state=7).fit(train)
    np.testing.assert_array_equal(ours._centroids, reference._centroids)
    np.testing.assert_allclose(ours.decision_function(queries),
                               reference.decision_function(queries), atol=1e-12)
    np.testing.assert_allclose(ours.decision_scores_, reference.decision_scores_, atol=1e-12)
    far = ours.decision_function(rng.standard_normal((5, dim)) * 100)
    np.testing.assert_array_equal(far, 1.0)        # covered by no hypersphere: score 1


def test_chunked_scoring_matches_one_block(monkeypatch):
    rng = np.random.default_rng(0)
    train, queries = rng.standard_normal((100, 8)), rng.standard_normal((50, 8))
    model = VectorizedINNE(n_estimators=11, random_state=0).fit(train)
    whole = model.decision_function(queries)
    monkeypatch.setattr("envad.server.detectors.inne.CHUNK_ROWS", 7)
    assert CHUNK_ROWS != 7
    np.testing.assert_array_equal(model.decision_function(queries), whole)
