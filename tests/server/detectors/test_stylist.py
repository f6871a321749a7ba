"""Stylist ranking: camera-following dimensions rank first and are dropped; the distances
are SciPy's."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
from scipy.stats import wasserstein_distance

from envad.errors import InvalidInput
from envad.server.detectors.stylist import (
    kept_features,
    rank_features,
    select_features,
    wasserstein_per_column,
)


def camera_data(seed=0):
    rng = np.random.default_rng(seed)
    envs = np.repeat(["c1", "c2", "c3", "c4"], 80)
    X = rng.normal(size=(320, 6))
    X[:, 1] += np.repeat([0, 2, 4, 6], 80)        # strongly style-driven
    X[:, 4] *= np.repeat([1, 3, 1, 3], 80)        # style changes the spread
    return X, envs


def test_style_dimensions_rank_highest():
    X, envs = camera_data()
    bias = rank_features(X, envs)
    assert list(np.argsort(bias)[-2:]) == [4, 1]


def test_select_drops_the_most_biased_fraction():
    X, envs = camera_data()
    assert select_features(X, envs, 1 / 6).tolist() == [0, 2, 3, 4, 5]
    assert select_features(X, envs, 2 / 6).tolist() == [0, 2, 3, 5]
    assert select_features(X, envs, 0.0).tolist() == list(range(6))


def test_validation():
    X, envs = camera_data()
    with pytest.raises(InvalidInput, match="drop_fraction"):
        select_features(X, envs, 1.0)
    with pytest.raises(InvalidInput, match="2 environments"):
        rank_features(X, np.array(["one"] * len(X)))


@pytest.mark.parametrize("n, m", [(2, 2), (3, 7), (101, 37), (400, 1)])
def test_each_columns_distance_is_scipys(n, m):
    rng = np.random.default_rng(n * 1000 + m)
    u, v = rng.normal(size=(n, 5)), 2 * rng.normal(size=(m, 5)) + 1
    u[:, 0], v[:, 0] = np.round(u[:, 0]), np.round(v[:, 0])     # ties within and across
    v[:, 1] = u[0, 1]                                          # one sample a single value
    expected = [wasserstein_distance(u[:, j], v[:, j]) for j in range(5)]
    np.testing.assert_allclose(wasserstein_per_column(u, v), expected, rtol=0, atol=1e-12)


def test_the_ranking_is_scipys_mean_over_camera_pairs():
    X, envs = camera_data(seed=3)
    X, envs = X[:-17], envs[:-17]                              # cameras of unequal sizes
    Z = (X - X.mean(axis=0)) / X.std(axis=0)
    groups = [Z[envs == e] for e in np.unique(envs)]
    expected = [np.mean([wasserstein_distance(a[:, j], b[:, j])
                         for a, b in combinations(groups, 2)]) for j in range(X.shape[1])]
    np.testing.assert_allclose(rank_features(X, envs), expected, rtol=0, atol=1e-12)


def test_kept_features_of_a_ranking_are_select_features():
    X, envs = camera_data()
    bias = rank_features(X, envs)
    for fraction in (0.0, 1 / 6, 2 / 6, 0.5):
        assert kept_features(bias, fraction).tolist() == select_features(X, envs, fraction).tolist()
    with pytest.raises(InvalidInput, match="drop_fraction"):
        kept_features(bias, -0.1)
