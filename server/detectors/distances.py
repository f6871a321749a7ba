"""Euclidean distances between row blocks through one matrix product (float64).

||x - y||^2 = ||x||^2 - 2 x.y + ||y||^2: a GEMM instead of a loop over pairs, as
scikit-learn's brute-force neighbour search computes them; negative rounding residues
are clipped to 0. ExactKDE and the vectorised scorers of pyod's PCA, LOF and OCSVM share
it.
"""

from __future__ import annotations

import numpy as np

#: query rows x reference rows per distance block (float64: 32 MB)
BLOCK_ELEMENTS = 1 << 22


def squared_norms(X: np.ndarray) -> np.ndarray:
    return np.einsum("ij,ij->i", X, X)


def squared_distances(X: np.ndarray, Y: np.ndarray, y_squared: np.ndarray | None = None
                      ) -> np.ndarray:
    """[len(X), len(Y)] squared euclidean distances (`y_squared`: Y's squared norms)."""
    y_squared = squared_norms(Y) if y_squared is None else y_squared
    squared = X @ Y.T
    squared *= -2.0
    squared += y_squared[None, :]
    squared += squared_norms(X)[:, None]
    return np.maximum(squared, 0.0, out=squared)


def row_blocks(rows: int, columns: int):
    """Slices of `rows` query rows such that a block of distances to `columns` reference
    rows holds at most BLOCK_ELEMENTS values (one row at least)."""
    step = max(1, BLOCK_ELEMENTS // max(columns, 1))
    for start in range(0, rows, step):
        yield slice(start, min(start + step, rows))
