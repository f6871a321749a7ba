"""Feature magnitude: an embedding's length as its normality.

A network trained to tell the normal classes apart answers familiar content with strong
features; content it was never trained on excites its filters less, so its embedding is
shorter (Dhamija et al., NeurIPS 2018, "Reducing network agnostophobia"; Vaze et al.,
ICLR 2022, "Open-set recognition: a good closed-set classifier is all you need", whose
maximum-logit score follows the feature norm). The score is the negated L2 norm of the
encoder's own output: no space step applies (unit length would erase it), nothing is
fitted beyond the calibration every bundle detector gets.
"""

from __future__ import annotations

import numpy as np

from envad.errors import InvalidInput


class FeatureMagnitude:
    """`decision_function(X)` = -||x||: shorter embeddings are more anomalous."""

    def fit(self, X: np.ndarray) -> FeatureMagnitude:
        X = np.asarray(X)
        if X.ndim != 2 or len(X) == 0:
            raise InvalidInput(f"feature magnitude needs a non-empty 2-D array, got {X.shape}")
        self.n_features_in_ = X.shape[1]
        return self

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise InvalidInput(f"expected rows of {self.n_features_in_} features, got {X.shape}")
        return -np.linalg.norm(X.astype(np.float64, copy=False), axis=1)
