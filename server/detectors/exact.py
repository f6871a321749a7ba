"""Exact, faster re-implementations of pyod's KNN and KDE with identical scores.

pyod's KNN and KDE compute scores for every training row when fitted (O(n^2) in the fit
set) and query through scikit-learn trees, which degrade to brute force at 512
dimensions. envad never needs the training-row scores (bundles calibrate on held-out
rows), so fitting here only stores the data; scoring is one FAISS flat search (KNN) or
chunked matrix products (KDE). tests/server/detectors/test_exact.py checks that the
scores equal pyod's on the same data; benchmarks/detectors.py measures the speed-up.
"""

from __future__ import annotations

import faiss
import numpy as np
from scipy.special import logsumexp

_CHUNK = 1024


class ExactKNN:
    """Distance to the k-th nearest fit row (pyod `KNN(method="largest")`)."""

    def __init__(self, n_neighbors: int = 5):
        self.n_neighbors = n_neighbors

    def get_params(self, deep: bool = True) -> dict:
        return {"n_neighbors": self.n_neighbors, "method": "largest"}

    def fit(self, X: np.ndarray) -> ExactKNN:
        X = np.ascontiguousarray(X, dtype=np.float32)
        if len(X) < self.n_neighbors:
            raise ValueError(f"KNN needs at least {self.n_neighbors} rows, got {len(X)}")
        self.index_ = faiss.IndexFlatL2(X.shape[1])
        self.index_.add(X)
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        queries = np.ascontiguousarray(X, dtype=np.float32)
        squared, _ = self.index_.search(queries, self.n_neighbors)
        return np.sqrt(np.maximum(squared[:, -1].astype(np.float64), 0.0))


class ExactKDE:
    """Negative Gaussian kernel log-density (pyod `KDE()`, scikit-learn's normalisation)."""

    def __init__(self, bandwidth: float = 1.0):
        self.bandwidth = bandwidth

    def get_params(self, deep: bool = True) -> dict:
        return {"bandwidth": self.bandwidth}

    def fit(self, X: np.ndarray) -> ExactKDE:
        self.X_ = np.ascontiguousarray(X, dtype=np.float64)
        self.sq_norms_ = np.einsum("ij,ij->i", self.X_, self.X_)
        n, dim = self.X_.shape
        h = self.bandwidth
        self.log_norm_ = np.log(n) + 0.5 * dim * np.log(2 * np.pi * h * h)
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        out = np.empty(len(X))
        for start in range(0, len(X), _CHUNK):
            q = X[start:start + _CHUNK]
            squared = (np.einsum("ij,ij->i", q, q)[:, None] + self.sq_norms_[None, :]
                       - 2.0 * q @ self.X_.T)
            np.maximum(squared, 0.0, out=squared)
            log_density = logsumexp(-0.5 * squared / self.bandwidth ** 2, axis=1) - self.log_norm_
            out[start:start + _CHUNK] = -log_density
        return out
