"""LODA scored with all cuts at once equals pyod's LODA."""

from __future__ import annotations

import numpy as np
import pytest
from pyod.models.loda import LODA

from envad.server.detectors.loda import VectorizedLODA


@pytest.mark.parametrize("dim, n_bins", [(2, 25), (64, 25), (512, 10), (16, "auto")])
def test_scores_equal_pyods(dim, n_bins):
    rng = np.random.default_rng(dim)
    train = rng.standard_normal((400, dim))
    queries = np.vstack([rng.standard_normal((80, dim)), rng.standard_normal((20, dim)) * 4])
    ours = VectorizedLODA(n_bins=n_bins, n_random_cuts=100, random_state=1).fit(train)
    reference = LODA(n_bins=n_bins, n_random_cuts=100, random_state=1).fit(train)
    np.testing.assert_allclose(ours.decision_function(queries),
                               reference.decision_function(queries), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.decision_function(queries[:1]),
                               reference.decision_function(queries[:1]), rtol=0, atol=1e-12)
    assert ours.decision_function(queries[80:]).mean() > ours.decision_function(
        queries[:80]).mean()
