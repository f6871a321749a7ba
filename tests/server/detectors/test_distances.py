"""Euclidean distances through one product equal scipy's pairwise loop; row blocks cover
every query row once and bound a block's size."""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

from envad.server.detectors import distances
from envad.server.detectors.distances import row_blocks, squared_distances, squared_norms


def test_squared_distances_equal_scipys_and_are_never_negative():
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal((30, 64)) * 5, rng.standard_normal((40, 64))
    Y[3] = X[7]                                  # a pair at distance 0
    squared = squared_distances(X, Y)
    np.testing.assert_allclose(squared, cdist(X, Y, "sqeuclidean"), rtol=1e-10, atol=1e-9)
    np.testing.assert_array_equal(squared_distances(X, Y, squared_norms(Y)), squared)
    assert squared.min() >= 0.0 and squared[7, 3] < 1e-9


def test_row_blocks_cover_the_rows_in_order_within_the_block_size(monkeypatch):
    monkeypatch.setattr(distances, "BLOCK_ELEMENTS", 100)
    blocks = list(row_blocks(23, 10))            # 10 rows a block
    assert [(b.start, b.stop) for b in blocks] == [(0, 10), (10, 20), (20, 23)]
    assert [(b.start, b.stop) for b in row_blocks(3, 1000)] == [(0, 1), (1, 2), (2, 3)]
    assert list(row_blocks(0, 10)) == []
