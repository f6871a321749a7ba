"""Stylist-style feature selection: drop the embedding dimensions that follow the camera.

Each dimension is standardised, then scored by the mean 1-D Wasserstein distance between
its per-environment distributions over all pairs of training environments. Dimensions
with the largest distance carry the most environment (style) information; dropping them
leaves the content dimensions for the detectors.
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
from scipy.stats import wasserstein_distance

from envad.errors import InvalidInput

MIN_ROWS_PER_ENV = 2
#: fraction of dimensions Stylist drops when a request enables it without a fraction
DEFAULT_DROP_FRACTION = 0.25


def rank_features(X: np.ndarray, envs: np.ndarray) -> np.ndarray:
    """Environment bias of every dimension of X: mean pairwise Wasserstein distance."""
    X = np.asarray(X, dtype=np.float64)
    envs = np.asarray(envs).astype(str)
    if X.ndim != 2 or len(X) != len(envs):
        raise InvalidInput("X must be [n, d] with one environment per row")
    groups = [X[envs == e] for e in np.unique(envs)]
    groups = [g for g in groups if len(g) >= MIN_ROWS_PER_ENV]
    if len(groups) < 2:
        raise InvalidInput(
            f"Stylist needs at least 2 environments with >= {MIN_ROWS_PER_ENV} rows each")
    mean = X.mean(axis=0)
    std = X.std(axis=0)
    std[std == 0] = 1.0
    groups = [(g - mean) / std for g in groups]
    pairs = list(combinations(range(len(groups)), 2))
    bias = np.zeros(X.shape[1])
    for dim in range(X.shape[1]):
        bias[dim] = np.mean([wasserstein_distance(groups[a][:, dim], groups[b][:, dim])
                             for a, b in pairs])
    return bias


def select_features(X: np.ndarray, envs: np.ndarray, drop_fraction: float) -> np.ndarray:
    """Sorted indices of the dimensions kept after dropping the most biased fraction."""
    if not 0.0 <= drop_fraction < 1.0:
        raise InvalidInput(f"drop_fraction must be in [0, 1), got {drop_fraction}")
    bias = rank_features(X, envs)
    n_drop = min(int(round(drop_fraction * len(bias))), len(bias) - 1)
    if n_drop == 0:
        return np.arange(len(bias))
    dropped = np.argsort(bias, kind="stable")[-n_drop:]
    return np.setdiff1d(np.arange(len(bias)), dropped)
