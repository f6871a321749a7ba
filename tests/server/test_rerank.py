"""Exact re-ranking of candidates (server/rerank.py)."""

from __future__ import annotations

import numpy as np

from envad.server.rerank import exact_order


def test_candidates_are_ordered_by_their_exact_distances_and_missing_ones_last():
    vectors = np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 0.0]], np.float32)   # rows 10, 20, 30
    distinct = np.array([10, 20, 30])
    queries = np.array([[0.0, 0.0], [3.0, 3.0]], np.float32)
    positions = np.array([[20, -1, 30, 10], [10, 30, 20, -1]])
    read: list[np.ndarray] = []

    def vectors_at(wanted: np.ndarray) -> np.ndarray:
        read.append(wanted)
        return vectors[np.searchsorted(distinct, wanted)]

    distances, ordered = exact_order(queries, positions, vectors_at)
    assert [w.tolist() for w in read] == [[10, 20, 30]]     # once, each position once
    np.testing.assert_array_equal(ordered, [[10, 30, 20, -1], [20, 30, 10, -1]])
    np.testing.assert_allclose(distances[:, :3], [[0.0, 1.0, 25.0], [1.0, 13.0, 18.0]])
    assert np.isinf(distances[:, 3]).all()
