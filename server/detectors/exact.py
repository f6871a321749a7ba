"""Exact, faster re-implementations of pyod's KNN and KDE with identical scores.

pyod's KNN and KDE compute scores for every training row when fitted (O(n^2) in the fit
set) and query through scikit-learn trees, which degrade to brute force at 512
dimensions. envad never needs the training-row scores (bundles calibrate on held-out
rows), so fitting here only stores the data; scoring is one FAISS flat search (KNN) or
chunked matrix products (KDE). tests/server/detectors/test_exact.py checks that the
scores equal pyod's on the same data; benchmarks/detectors.py measures the speed-up.

KNN scores in float32 (the encoder's own precision; FAISS is float32), with the ranks of
pyod's float64 scores (tests/server/test_parity.py). KDE stays in float64: in float32 two
real queries whose densities differed by 5e-9 (relative) swapped ranks. Its cost per query
is linear in its reference rows instead, so it keeps a capped, seeded reference sample
(`max_reference`, default 10,000 rows; Spearman against the full set is reported by
benchmarks/detectors.py).

KDE's bandwidth is either a number (pyod's `KDE()`: 1.0) or, with `bandwidth=None`, a
multiple of the fit rows' own scale: the median distance from a reference row to its
5th nearest other reference row. A fixed bandwidth means something different in every
embedding space: 1.0 is narrow next to a raw ResNet embedding's distances (tens), so the
density follows the nearest rows, and wide next to unit-length rows' (below 2), so the
density flattens towards a distance to the bulk and stops seeing content. A bandwidth in
the rows' own scale gives the same estimator in every space.
"""

from __future__ import annotations

import faiss
import numpy as np

from envad.server.detectors.distances import squared_distances, squared_norms

_CHUNK = 1024
#: reference rows a KDE keeps (a seeded sample when the fit set is larger)
DEFAULT_KDE_MAX_REFERENCE = 10_000
#: a data-scaled bandwidth is this neighbour's distance (median over the reference rows)...
SCALE_NEIGHBOUR = 5
#: ...measured on a seeded sample of at most this many reference rows
SCALE_SAMPLE = 2_000


def neighbour_scale(X: np.ndarray, k: int = SCALE_NEIGHBOUR, max_rows: int = SCALE_SAMPLE,
                    seed: int = 0) -> float:
    """Median distance from a row of `X` to its k-th nearest other row (k capped at the
    rows there are), over a seeded sample of at most `max_rows` rows searched against
    every row. Exact duplicates (a camera's repeated empty frames) are left out of the
    median: they say nothing of the spacing of distinct rows."""
    if len(X) < 2:
        raise ValueError(f"a data-scaled bandwidth needs at least 2 rows, got {len(X)}")
    k = min(k, len(X) - 1)
    rows = np.ascontiguousarray(X, dtype=np.float32)
    sample = rows
    if len(rows) > max_rows:
        sample = rows[np.sort(np.random.default_rng(seed).choice(len(rows), max_rows,
                                                                 replace=False))]
    index = faiss.IndexFlatL2(rows.shape[1])
    index.add(rows)
    squared, _ = index.search(sample, k + 1)       # the row itself comes first
    distances = np.sqrt(np.maximum(squared[:, k], 0.0))
    distinct = distances[distances > 0]
    if not len(distinct):
        raise ValueError("a data-scaled bandwidth needs rows that are not all the same")
    return float(np.median(distinct))


def _logsumexp(values: np.ndarray) -> np.ndarray:
    """log(sum(exp(row))) of each row, without overflow (SciPy's)."""
    # SciPy's special functions: only a KDE scores with them, so that a server of the
    # default pipeline never loads them (docs/scaling.md, the fixed part)
    from scipy.special import logsumexp
    return logsumexp(values, axis=1)


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
        return np.sqrt(np.maximum(squared[:, -1], 0.0)).astype(np.float64)

    def decision_function_leaving_out(self, X: np.ndarray, query_groups: np.ndarray,
                                      row_groups: np.ndarray) -> np.ndarray:
        """`decision_function`, each query's k-th neighbour taken among the fit rows
        outside its group (`query_groups[i]` against `row_groups`, one code per fit row;
        a negative code leaves nothing out). A query whose group leaves fewer than k
        rows keeps its plain score."""
        out = self.decision_function(X)
        members = np.flatnonzero(query_groups >= 0)
        if not len(members):
            return out
        sizes = np.bincount(row_groups, minlength=int(query_groups.max()) + 1)
        groups = query_groups[members]
        wanted = min(self.n_neighbors + int(sizes[groups].max()), self.index_.ntotal)
        queries = np.ascontiguousarray(X[members], dtype=np.float32)
        squared, positions = self.index_.search(queries, wanted)
        excluded = (positions < 0) | (row_groups[np.maximum(positions, 0)] == groups[:, None])
        kept = np.where(excluded, np.inf, squared)
        kth = np.sort(kept, axis=1)[:, self.n_neighbors - 1]
        enough = np.isfinite(kth)
        out[members[enough]] = np.sqrt(np.maximum(kth[enough], 0.0))
        return out


class ExactKDE:
    """Negative Gaussian kernel log-density (pyod `KDE()`, scikit-learn's normalisation),
    over at most `max_reference` fit rows (None: all). `bandwidth`: a number, or None for
    `bandwidth_factor` x the reference rows' `neighbour_scale` (the fitted value is
    `bandwidth_`)."""

    def __init__(self, bandwidth: float | None = 1.0, bandwidth_factor: float = 1.0,
                 max_reference: int | None = DEFAULT_KDE_MAX_REFERENCE,
                 random_state: int = 0):
        self.bandwidth = bandwidth
        self.bandwidth_factor = bandwidth_factor
        self.max_reference = max_reference
        self.random_state = random_state

    def get_params(self, deep: bool = True) -> dict:
        return {"bandwidth": self.bandwidth, "bandwidth_factor": self.bandwidth_factor,
                "max_reference": self.max_reference, "random_state": self.random_state}

    def fit(self, X: np.ndarray) -> ExactKDE:
        X = np.asarray(X)
        self.reference_rows_ = None     # positions of the reference rows among X (None: all)
        if self.max_reference is not None and len(X) > self.max_reference:
            rng = np.random.default_rng(self.random_state)
            self.reference_rows_ = np.sort(rng.choice(len(X), size=self.max_reference,
                                                      replace=False))
            X = X[self.reference_rows_]
        # distances are taken about the fit rows' mean: the same distances, but smaller
        # norms, so |q|^2 + |x|^2 - 2 q.x loses less to cancellation
        X = np.asarray(X, dtype=np.float64)
        self.center_ = X.mean(axis=0)
        self.X_ = np.ascontiguousarray(X - self.center_)
        self.sq_norms_ = squared_norms(self.X_)
        if self.bandwidth is None:
            self.bandwidth_ = self.bandwidth_factor * neighbour_scale(
                self.X_, seed=self.random_state)
        else:
            self.bandwidth_ = float(self.bandwidth)
        n, dim = self.X_.shape
        h = self.bandwidth_
        self.log_norm_ = np.log(n) + 0.5 * dim * np.log(2 * np.pi * h * h)
        return self

    def __setstate__(self, state: dict) -> None:
        # estimators pickled before the data-scaled bandwidth have a number and no factor
        state.setdefault("bandwidth_factor", 1.0)
        state.setdefault("reference_rows_", None)
        if "X_" in state and "bandwidth_" not in state:
            state["bandwidth_"] = float(state["bandwidth"])
        self.__dict__.update(state)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        return self._negative_log_density(X, None, None)

    def decision_function_leaving_out(self, X: np.ndarray, query_groups: np.ndarray,
                                      row_groups: np.ndarray) -> np.ndarray:
        """`decision_function`, each query's density taken over the reference rows
        outside its group (`query_groups[i]` against `row_groups`, one code per fit row;
        a negative code leaves nothing out). A query whose group holds every reference
        row keeps its plain score."""
        reference_groups = (row_groups if self.reference_rows_ is None
                            else row_groups[self.reference_rows_])
        return self._negative_log_density(X, np.asarray(query_groups), reference_groups)

    def _negative_log_density(self, X: np.ndarray, query_groups: np.ndarray | None,
                              reference_groups: np.ndarray | None) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64) - self.center_
        out = np.empty(len(X))
        scale = -0.5 / self.bandwidth_ ** 2
        n = len(self.X_)
        kernel_norm = self.log_norm_ - np.log(n)    # the normalisation less log(rows)
        for start in range(0, len(X), _CHUNK):
            q = X[start:start + _CHUNK]
            squared = squared_distances(q, self.X_, self.sq_norms_)
            squared *= scale
            log_norm = np.full(len(q), self.log_norm_)
            if query_groups is not None and reference_groups is not None:
                groups = query_groups[start:start + _CHUNK]
                excluded = reference_groups[None, :] == groups[:, None]
                left = n - excluded.sum(axis=1)
                leaving = (groups >= 0) & (left > 0)
                squared[leaving] = np.where(excluded[leaving], -np.inf, squared[leaving])
                log_norm[leaving] = np.log(left[leaving]) + kernel_norm
            log_density = _logsumexp(squared) - log_norm
            out[start:start + _CHUNK] = -log_density
        return out
