"""Isolation Forest scored by direct tree walks equals pyod's IForest."""

from __future__ import annotations

import numpy as np
import pytest
from pyod.models.iforest import IForest

from envad.server.detectors.iforest import DirectIForest


@pytest.mark.parametrize("dim, max_features", [(2, 1.0), (64, 1.0), (512, 1.0), (64, 0.5)])
def test_scores_equal_pyods(dim, max_features):
    rng = np.random.default_rng(dim)
    train = rng.standard_normal((500, dim))
    queries = np.vstack([rng.standard_normal((100, dim)), rng.standard_normal((20, dim)) * 5])
    ours = DirectIForest(random_state=3, max_features=max_features).fit(train)
    reference = IForest(random_state=3, max_features=max_features).fit(train)
    np.testing.assert_allclose(ours.decision_function(queries),
                               reference.decision_function(queries), rtol=0, atol=1e-12)
    np.testing.assert_allclose(ours.decision_function(queries[:1]),
                               reference.decision_function(queries[:1]), rtol=0, atol=1e-12)
    outliers = ours.decision_function(queries[100:])
    assert outliers.mean() > ours.decision_function(queries[:100]).mean()


def test_wrong_width_is_refused():
    model = DirectIForest(random_state=0).fit(np.random.default_rng(0).standard_normal((50, 4)))
    with pytest.raises(ValueError, match=r"X must be \[n, 4\]"):
        model.decision_function(np.zeros((2, 3)))


def test_a_pickled_forest_holds_no_flat_table_and_scores_the_same():
    import pickle

    rng = np.random.default_rng(1)
    model = DirectIForest(random_state=0).fit(rng.standard_normal((200, 8)))
    queries = rng.standard_normal((5, 8))
    before = model.decision_function(queries)
    assert hasattr(model, "flat_")
    copy = pickle.loads(pickle.dumps(model))
    assert not hasattr(copy, "flat_")
    np.testing.assert_array_equal(copy.decision_function(queries), before)
