"""Stylist ranking: camera-following dimensions rank first and are dropped."""

from __future__ import annotations

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.server.detectors.stylist import rank_features, select_features


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
