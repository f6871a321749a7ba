"""LOF scored from one distance block equals pyod's LOF (novelty mode), to the float32
rounding of the fit rows it keeps (RTOL)."""

from __future__ import annotations

import numpy as np
import pytest
from pyod.models.lof import LOF

from envad.server.detectors import distances
from envad.server.detectors.lof import VectorizedLOF

#: the fit rows are kept in float32: scores within about 1e-7 of pyod's float64 ones
RTOL = 1e-6


@pytest.mark.parametrize("dim, n_neighbors", [(2, 5), (64, 5), (512, 5), (16, 20)])
def test_scores_equal_pyods(dim, n_neighbors, monkeypatch):
    rng = np.random.default_rng(dim)
    train = rng.standard_normal((400, dim))
    train[10:13] = train[9]                      # duplicated fit rows
    queries = np.vstack([rng.standard_normal((60, dim)), rng.standard_normal((10, dim)) * 4,
                         train[:5]])             # fit rows among the queries
    settings = dict(n_neighbors=n_neighbors, novelty=True, metric="euclidean")
    ours, reference = VectorizedLOF(**settings).fit(train), LOF(**settings).fit(train)
    expected = reference.decision_function(queries)
    assert ours.detector_._fit_X.dtype == np.float32
    np.testing.assert_allclose(ours.decision_function(queries), expected, rtol=RTOL)
    np.testing.assert_allclose(ours.decision_function(queries[:1]), expected[:1], rtol=RTOL)
    monkeypatch.setattr(distances, "BLOCK_ELEMENTS", 3 * len(train))   # several blocks
    np.testing.assert_allclose(ours.decision_function(queries), expected, rtol=RTOL)
    assert expected[60:70].mean() > expected[:60].mean()


@pytest.mark.filterwarnings("ignore:n_neighbors .* is greater than the total number")
def test_fewer_fit_rows_than_neighbours_and_other_metrics_score_as_pyod():
    rng = np.random.default_rng(3)
    train, queries = rng.standard_normal((4, 8)), rng.standard_normal((6, 8))
    for settings in (dict(n_neighbors=5, novelty=True, metric="euclidean"),
                     dict(n_neighbors=3, novelty=True, metric="manhattan")):
        ours, reference = VectorizedLOF(**settings).fit(train), LOF(**settings).fit(train)
        np.testing.assert_allclose(ours.decision_function(queries),
                                   reference.decision_function(queries), rtol=1e-9)
