"""ExactKNN and ExactKDE equal pyod's KNN and the exact Gaussian KDE."""

from __future__ import annotations

import numpy as np
import pytest
from pyod.models.kde import KDE
from pyod.models.knn import KNN
from scipy.special import logsumexp
from sklearn.neighbors import KernelDensity

from envad.server.detectors.exact import ExactKDE, ExactKNN


def data(seed=0, n=400, dim=96):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, dim)), np.vstack([rng.normal(size=(30, dim)),
                                                 1.3 * rng.normal(size=(30, dim))])


def test_knn_equals_pyod():
    X, Q = data()
    np.testing.assert_allclose(ExactKNN(5).fit(X).decision_function(Q),
                               KNN(n_neighbors=5, method="largest").fit(X).decision_function(Q),
                               rtol=1e-5)


def brute_force_kde_score(X, Q, bandwidth=1.0):
    squared = ((Q[:, None, :] - X[None]) ** 2).sum(-1)
    return -(logsumexp(-0.5 * squared / bandwidth ** 2, axis=1) - np.log(len(X))
             - 0.5 * X.shape[1] * np.log(2 * np.pi * bandwidth ** 2))


def test_kde_equals_the_exact_density_in_high_dimensions():
    """Equal to the brute force to rounding (distances about the mean), same ranks."""
    X, Q = data(seed=1, dim=512)
    ours = ExactKDE(1.0).fit(X).decision_function(Q)
    exact = brute_force_kde_score(X, Q)
    np.testing.assert_allclose(ours, exact, rtol=1e-9)
    np.testing.assert_array_equal(np.argsort(ours), np.argsort(exact))


def test_kde_keeps_a_capped_seeded_reference_sample():
    X, Q = data(seed=4, n=600, dim=32)
    capped = ExactKDE(1.0, max_reference=200, random_state=7).fit(X)
    assert capped.X_.shape == (200, 32) and capped.X_.dtype == np.float64
    rows_kept = capped.X_ + capped.center_
    again = ExactKDE(1.0, max_reference=200, random_state=7).fit(X)
    np.testing.assert_array_equal(capped.X_, again.X_)
    rows = [int(np.flatnonzero(np.isclose(X, r).all(1))[0]) for r in rows_kept[:5]]
    np.testing.assert_allclose(capped.decision_function(Q),
                               brute_force_kde_score(X[np.sort(
                                   np.random.default_rng(7).choice(600, 200, replace=False))],
                                   Q), rtol=1e-6)
    assert rows == sorted(rows)
    assert ExactKDE(1.0, max_reference=None).fit(X).X_.shape == (600, 32)


def test_kde_equals_pyod_where_pyod_is_exact():
    X, Q = data(seed=2, dim=8)
    ours = ExactKDE(1.0).fit(X).decision_function(Q)
    np.testing.assert_allclose(ours, KDE(bandwidth=1.0).fit(X).decision_function(Q), rtol=1e-6)
    np.testing.assert_allclose(ours, brute_force_kde_score(X, Q), rtol=1e-6)


def test_scikit_learn_tree_densities_break_down_in_high_dimensions():
    """Why envad's KDE is its own: the tree densities behind pyod's KDE() are off at 512-d."""
    X, Q = data(seed=0, n=300, dim=512)
    exact = brute_force_kde_score(X, Q)
    for algorithm in ("kd_tree", "ball_tree"):
        tree = -KernelDensity(algorithm=algorithm).fit(X).score_samples(Q)
        assert np.abs(tree - exact).max() > 1.0, algorithm


def brute_force_neighbour_scale(X, k=5):
    distances = np.sqrt(((X[:, None, :] - X[None]) ** 2).sum(-1))
    return float(np.median(np.sort(distances, axis=1)[:, k]))   # column 0 is the row itself


def test_a_data_scaled_bandwidth_is_its_factor_times_the_median_fifth_neighbour_distance():
    X, Q = data(seed=6, n=300, dim=16)
    kde = ExactKDE(None, bandwidth_factor=0.5).fit(X)
    np.testing.assert_allclose(kde.bandwidth_, 0.5 * brute_force_neighbour_scale(X), rtol=1e-5)
    np.testing.assert_allclose(kde.decision_function(Q),
                               brute_force_kde_score(X, Q, kde.bandwidth_), rtol=1e-9)


def test_a_data_scaled_kde_ranks_the_same_rows_the_same_in_any_scale():
    """Unit-length rows and the same rows x 40 (a raw embedding's scale): a data-scaled
    bandwidth ranks the queries identically; pyod's fixed 1.0 does not."""
    X, Q = data(seed=7, n=300, dim=64)
    X = X / np.linalg.norm(X, axis=1, keepdims=True)
    Q = Q / np.linalg.norm(Q, axis=1, keepdims=True) * np.linspace(0.8, 1.2, len(Q))[:, None]

    def order(kde, scale):
        return np.argsort(kde.fit(scale * X).decision_function(scale * Q))

    np.testing.assert_array_equal(order(ExactKDE(None), 1.0), order(ExactKDE(None), 40.0))
    assert not np.array_equal(order(ExactKDE(1.0), 1.0), order(ExactKDE(1.0), 40.0))


def test_exact_duplicates_do_not_set_the_scale_and_identical_rows_are_refused():
    import pytest

    from envad.server.detectors.exact import neighbour_scale

    X = data(seed=8, n=100, dim=8)[0]
    with_copies = np.vstack([X, np.repeat(X[:1], 400, axis=0)])   # one frame, 401 times
    assert neighbour_scale(with_copies) > 0
    with pytest.raises(ValueError, match="not all the same"):
        ExactKDE(None).fit(np.repeat(X[:1], 50, axis=0))
    assert neighbour_scale(X[:3]) > 0          # fewer rows than neighbours: the farthest


def test_a_kde_pickled_before_the_data_scaled_bandwidth_scores_as_it_did():
    import pickle

    X, Q = data(seed=9, n=200, dim=16)
    kde = ExactKDE(1.0).fit(X)
    expected = kde.decision_function(Q)
    del kde.bandwidth_, kde.bandwidth_factor              # the attributes older ones lack
    loaded = pickle.loads(pickle.dumps(kde))
    assert loaded.bandwidth_ == 1.0 and loaded.bandwidth_factor == 1.0
    np.testing.assert_array_equal(loaded.decision_function(Q), expected)


def test_a_data_scaled_kde_survives_pickling_with_its_fitted_bandwidth():
    import pickle

    X, Q = data(seed=10, n=200, dim=16)
    kde = ExactKDE(None, bandwidth_factor=0.25).fit(X)
    loaded = pickle.loads(pickle.dumps(kde))
    assert loaded.bandwidth is None and loaded.bandwidth_ == kde.bandwidth_
    np.testing.assert_array_equal(loaded.decision_function(Q), kde.decision_function(Q))


def groups_of(n, seed, n_groups=40):
    return np.random.default_rng(seed).integers(0, n_groups, size=n)


def test_knn_leaving_out_a_group_is_the_kth_distance_outside_it():
    X, Q = data(seed=3, n=300, dim=24)
    Q = np.vstack([Q, X[:20]])                    # fit rows among the queries
    row_groups = groups_of(len(X), 4)
    query_groups = np.r_[np.full(len(Q) - 20, -1), row_groups[:20]]
    query_groups[3] = 7                           # a new image may name a group too
    knn = ExactKNN(5).fit(X)
    ours = knn.decision_function_leaving_out(Q, query_groups, row_groups)
    distances = np.sqrt(((Q[:, None, :] - X[None]) ** 2).sum(-1))
    for i, group in enumerate(query_groups):
        outside = distances[i] if group < 0 else distances[i][row_groups != group]
        assert ours[i] == pytest.approx(np.sort(outside)[4], rel=1e-4)
    plain = knn.decision_function(Q)
    np.testing.assert_array_equal(ours[query_groups < 0], plain[query_groups < 0])


def test_knn_keeps_the_plain_score_when_a_group_leaves_fewer_than_k_rows():
    X = np.random.default_rng(0).normal(size=(8, 3))
    row_groups = np.array([0, 0, 0, 0, 0, 1, 1, 1])
    knn = ExactKNN(5).fit(X)
    np.testing.assert_array_equal(
        knn.decision_function_leaving_out(X[:1], np.array([0]), row_groups),
        knn.decision_function(X[:1]))


def test_kde_leaving_out_a_group_is_the_density_of_the_rows_outside_it():
    X, Q = data(seed=5, n=300, dim=24)
    Q = np.vstack([Q, X[:20]])
    row_groups = groups_of(len(X), 6)
    query_groups = np.r_[np.full(len(Q) - 20, -1), row_groups[:20]]
    kde = ExactKDE(bandwidth=None, bandwidth_factor=0.5).fit(X)
    ours = kde.decision_function_leaving_out(Q, query_groups, row_groups)
    for i, group in enumerate(query_groups):
        rows = X if group < 0 else X[row_groups != group]
        expected = brute_force_kde_score(rows, Q[i:i + 1], kde.bandwidth_)[0]
        assert ours[i] == pytest.approx(expected, rel=1e-9)


def test_kde_leaves_out_among_its_capped_reference_sample():
    X, Q = data(seed=7, n=300, dim=12)
    row_groups = groups_of(len(X), 8)
    kde = ExactKDE(bandwidth=2.0, max_reference=120, random_state=3).fit(X)
    kept = kde.reference_rows_
    assert len(kept) == 120
    ours = kde.decision_function_leaving_out(X[:10], row_groups[:10], row_groups)
    for i in range(10):
        rows = X[kept][row_groups[kept] != row_groups[i]]
        expected = brute_force_kde_score(rows, X[i:i + 1], 2.0)[0]
        assert ours[i] == pytest.approx(expected, rel=1e-9)
