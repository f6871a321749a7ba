"""Isolation Forest with direct tree walks: pyod's IForest, scored without joblib.

scikit-learn scores an IsolationForest through a joblib `Parallel` call per request that
dispatches one task per tree; for one query that bookkeeping costs tens of milliseconds
(100 trees), far more than walking the trees. Here the fit is pyod's own, and scoring
walks all trees at once: the fitted trees are flattened into one node table (global
feature, threshold, children, and the path length a leaf contributes), every query
starts at every tree's root and takes one step per level in a single vectorised gather,
and the leaves' path lengths are summed tree by tree in scikit-learn's order, so the
scores equal pyod's (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pyod.models.iforest import IForest
from sklearn.ensemble._iforest import _average_path_length


@dataclass(frozen=True)
class FlatForest:
    """Every tree's nodes in one table; a leaf points to itself on both sides."""

    roots: np.ndarray        # [trees] node index of each tree's root
    feature: np.ndarray      # [nodes] column of X tested (global, after feature subsets)
    threshold: np.ndarray    # [nodes] go left when X[feature] <= threshold
    left: np.ndarray         # [nodes]
    right: np.ndarray        # [nodes]
    leaf_depth: np.ndarray   # [nodes] a leaf's path length + average path length - 1
    levels: int              # steps that take every query to a leaf


def flatten(forest) -> FlatForest:
    roots, features, thresholds, lefts, rights, depths = [], [], [], [], [], []
    offset, levels = 0, 0
    for tree, columns, path_lengths, average_lengths in zip(
            forest.estimators_, forest.estimators_features_,
            forest._decision_path_lengths, forest._average_path_length_per_tree,
            strict=True):
        t = tree.tree_
        nodes = np.arange(t.node_count)
        leaf = t.children_left < 0
        roots.append(offset)
        features.append(np.where(leaf, 0, np.asarray(columns)[np.maximum(t.feature, 0)]))
        thresholds.append(np.where(leaf, np.inf, t.threshold))
        lefts.append(np.where(leaf, nodes, t.children_left) + offset)
        rights.append(np.where(leaf, nodes, t.children_right) + offset)
        depths.append(np.asarray(path_lengths, dtype=np.float64)
                      + np.asarray(average_lengths, dtype=np.float64) - 1.0)
        levels = max(levels, int(t.max_depth))
        offset += t.node_count
    return FlatForest(np.asarray(roots, dtype=np.int64),
                      np.concatenate(features).astype(np.int64),
                      np.concatenate(thresholds), np.concatenate(lefts).astype(np.int64),
                      np.concatenate(rights).astype(np.int64), np.concatenate(depths),
                      levels)


class DirectIForest(IForest):
    """pyod's IForest (Liu et al. 2008) whose `decision_function` walks the trees itself."""

    def __getstate__(self):
        """The flat table is rebuilt from the trees on first use: bundles store pyod's
        fitted state only."""
        state = dict(super().__getstate__())
        state.pop("flat_", None)
        return state

    def decision_function(self, X):
        forest = self.detector_
        X = np.ascontiguousarray(X, dtype=np.float32)     # the dtype sklearn's trees use
        if X.ndim != 2 or X.shape[1] != forest.n_features_in_:
            raise ValueError(f"X must be [n, {forest.n_features_in_}], got {list(X.shape)}")
        flat = getattr(self, "flat_", None)
        if flat is None:
            flat = self.flat_ = flatten(forest)
        rows = np.arange(len(X))[:, None]
        node = np.broadcast_to(flat.roots, (len(X), len(flat.roots)))
        for _ in range(flat.levels):
            go_left = X[rows, flat.feature[node]] <= flat.threshold[node]
            node = np.where(go_left, flat.left[node], flat.right[node])
        per_tree = flat.leaf_depth[node]
        depths = np.zeros(len(X))
        for column in per_tree.T:         # summed tree by tree, as scikit-learn does
            depths += column
        denominator = len(forest.estimators_) * _average_path_length([forest._max_samples])
        scores = 2 ** -np.divide(depths, denominator, out=np.ones_like(depths),
                                 where=denominator != 0)
        # scikit-learn: decision = -scores - offset_; pyod inverts it (higher = outlier)
        return scores + forest.offset_
