"""Isolation Forest with direct tree walks: pyod's IForest, scored without joblib.

scikit-learn scores an IsolationForest through a joblib `Parallel` call per request that
dispatches one task per tree; for one query that bookkeeping costs tens of milliseconds
(100 trees), far more than walking the trees. Here the fit is pyod's own, and scoring
applies each fitted tree in turn and sums the same path lengths in the same order, so
the scores equal pyod's (tested).
"""

from __future__ import annotations

import numpy as np
from pyod.models.iforest import IForest
from sklearn.ensemble._iforest import _average_path_length


class DirectIForest(IForest):
    """pyod's IForest (Liu et al. 2008) whose `decision_function` walks the trees itself."""

    def decision_function(self, X):
        forest = self.detector_
        X = np.ascontiguousarray(X, dtype=np.float32)     # the dtype sklearn's trees use
        if X.ndim != 2 or X.shape[1] != forest.n_features_in_:
            raise ValueError(f"X must be [n, {forest.n_features_in_}], got {list(X.shape)}")
        subsample = forest._max_features != X.shape[1]
        depths = np.zeros(len(X))
        for tree, features, path_lengths, average_lengths in zip(
                forest.estimators_, forest.estimators_features_,
                forest._decision_path_lengths, forest._average_path_length_per_tree,
                strict=True):
            leaves = tree.apply(np.ascontiguousarray(X[:, features]) if subsample else X,
                                check_input=False)
            depths += path_lengths[leaves] + average_lengths[leaves] - 1.0
        denominator = len(forest.estimators_) * _average_path_length([forest._max_samples])
        scores = 2 ** -np.divide(depths, denominator, out=np.ones_like(depths),
                                 where=denominator != 0)
        # scikit-learn: decision = -scores - offset_; pyod inverts it (higher = outlier)
        return scores + forest.offset_
