"""Stylist-style feature selection: drop the embedding dimensions that follow the camera.

Each dimension is standardised, then scored by the mean 1-D Wasserstein distance between
its per-environment distributions over all pairs of training environments. Dimensions
with the largest distance carry the most environment (style) information; dropping them
leaves the content dimensions for the detectors.

The distance of two samples is the area between their quantile functions. Both are step
functions whose steps sit at the multiples of 1/n and 1/m, whatever the values, so one
set of steps serves every dimension: each pair of environments is one matrix product over
the two cameras' sorted rows (each camera sorted once), not a SciPy call per dimension
and pair (`benchmarks/stylist_ranking.py` measures the two; the tests check them against
each other).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np

from envad.errors import InvalidInput

MIN_ROWS_PER_ENV = 2
#: fraction of dimensions Stylist drops when a request enables it without a fraction
DEFAULT_DROP_FRACTION = 0.25
#: dimensions handled at once: bounds the (n + m) x columns gather of one pair
_COLUMNS_PER_CHUNK = 64


def wasserstein_per_column(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The 1-D Wasserstein distance between column j of u [n, d] and column j of v [m, d],
    for every j: the integral over q in (0, 1] of |F_u^-1(q) - F_v^-1(q)|."""
    return _between_sorted(np.sort(u, axis=0), np.sort(v, axis=0))


def _between_sorted(u_sorted: np.ndarray, v_sorted: np.ndarray) -> np.ndarray:
    """wasserstein_per_column of two samples whose columns are sorted."""
    n, m = len(u_sorted), len(v_sorted)
    # the quantile functions step at i/n and j/m; in units of 1/(n m) those are multiples
    # of m and of n, exact in integers
    steps = np.union1d(np.arange(1, n + 1, dtype=np.int64) * m,
                       np.arange(1, m + 1, dtype=np.int64) * n)
    widths = np.diff(steps, prepend=0) / (n * m)
    at_u, at_v = (steps + m - 1) // m - 1, (steps + n - 1) // n - 1
    distance = np.empty(u_sorted.shape[1])
    for start in range(0, len(distance), _COLUMNS_PER_CHUNK):
        columns = slice(start, start + _COLUMNS_PER_CHUNK)
        distance[columns] = widths @ np.abs(u_sorted[at_u, columns] - v_sorted[at_v, columns])
    return distance


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
    ordered = [np.sort((g - mean) / std, axis=0) for g in groups]     # once per camera
    return np.mean([_between_sorted(a, b) for a, b in combinations(ordered, 2)], axis=0)


def kept_features(bias: np.ndarray, drop_fraction: float) -> np.ndarray:
    """Sorted indices of the dimensions kept after dropping the most biased fraction of
    dimensions ranked by `bias` (rank_features)."""
    if not 0.0 <= drop_fraction < 1.0:
        raise InvalidInput(f"drop_fraction must be in [0, 1), got {drop_fraction}")
    n_drop = min(int(round(drop_fraction * len(bias))), len(bias) - 1)
    if n_drop == 0:
        return np.arange(len(bias))
    dropped = np.argsort(bias, kind="stable")[-n_drop:]
    return np.setdiff1d(np.arange(len(bias)), dropped)


def select_features(X: np.ndarray, envs: np.ndarray, drop_fraction: float) -> np.ndarray:
    """Sorted indices of the dimensions kept after dropping the most biased fraction."""
    return kept_features(rank_features(X, envs), drop_fraction)
