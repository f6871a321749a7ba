"""Stylist's ranking of embedding dimensions: envad's quantile-step form against SciPy.

`rank_features` (server/detectors/stylist.py) needs the 1-D Wasserstein distance of every
dimension between every pair of cameras. The reference is SciPy's
`scipy.stats.wasserstein_distance`, called once per dimension and pair; envad's
`wasserstein_per_column` computes all dimensions of a pair at once. Both rank the same
standardised rows, in the same run; one JSON line per size with both times (best of
`--rounds`), their ratio and the largest difference between the two rankings.

    python -m benchmarks.stylist_ranking --rows 2400 20000 --cameras 3 8
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from itertools import combinations

import numpy as np
from scipy.stats import wasserstein_distance

from benchmarks.common import emit, log
from envad.server.detectors import stylist


def scipy_ranking(X: np.ndarray, envs: np.ndarray) -> np.ndarray:
    """The same bias as stylist.rank_features, one SciPy call per dimension and pair."""
    mean, std = X.mean(axis=0), X.std(axis=0)
    std[std == 0] = 1.0
    groups = [(X[envs == e] - mean) / std for e in np.unique(envs)]
    pairs = list(combinations(groups, 2))
    return np.array([np.mean([wasserstein_distance(a[:, d], b[:, d]) for a, b in pairs])
                     for d in range(X.shape[1])])


def best_seconds(fn: Callable[[], np.ndarray], rounds: int) -> tuple[float, np.ndarray]:
    """The best of `rounds` calls' seconds, and the last call's result."""
    seconds = []
    for _ in range(max(rounds, 1)):
        start = time.perf_counter()
        result = fn()
        seconds.append(time.perf_counter() - start)
    return min(seconds), result


def measure(rows: int, cameras: int, dims: int, rounds: int) -> dict:
    rng = np.random.default_rng(0)
    envs = np.array([f"cam-{i % cameras}" for i in range(rows)])
    X = rng.normal(size=(rows, dims)) + rng.normal(size=(cameras, dims))[
        np.arange(rows) % cameras]
    scipy_s, reference = best_seconds(lambda: scipy_ranking(X, envs), rounds)
    envad_s, ranked = best_seconds(lambda: stylist.rank_features(X, envs), rounds)
    return {"benchmark": "stylist_ranking", "rows": rows, "cameras": cameras, "dims": dims,
            "scipy_s": scipy_s, "envad_s": envad_s, "ratio_scipy_over_envad": scipy_s / envad_s,
            "max_abs_difference": float(np.max(np.abs(ranked - reference)))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[2400, 20000])
    parser.add_argument("--cameras", type=int, nargs="+", default=[3, 8],
                        help="one per --rows: the cameras the rows are spread over")
    parser.add_argument("--dims", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    if len(args.cameras) != len(args.rows):
        parser.error("give one --cameras value per --rows value")
    for rows, cameras in zip(args.rows, args.cameras, strict=True):
        log(f"stylist ranking: {rows:,} rows over {cameras} cameras, {args.dims} dimensions")
        emit(measure(rows, cameras, args.dims, args.rounds))


if __name__ == "__main__":
    main()
