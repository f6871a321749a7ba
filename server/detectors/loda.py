"""LODA with vectorised scoring: pyod's fitted projections and histograms, all cuts at once.

pyod's `LODA.decision_function` loops in Python over its 100 random cuts (a projection,
a `searchsorted` and a log each), about 1.5 ms for a single query. Here the fit is pyod's
own; scoring projects onto every cut in one product, finds every bin by comparing with
the cuts' bin edges at once, and adds the cuts' terms in pyod's order, so the scores
equal pyod's (tested).
"""

from __future__ import annotations

import numbers

import numpy as np
from pyod.models.loda import LODA


class VectorizedLODA(LODA):
    """pyod's LODA (Pevný 2016) whose `decision_function` scores all cuts at once."""

    def decision_function(self, X):
        if not isinstance(self.n_bins, numbers.Integral):   # "auto": pyod's own loop
            return super().decision_function(X)
        X = np.asarray(X, dtype=np.float64)
        projected = X @ self.projections_.T                      # [rows, cuts]
        edges = self.limits_[:, :self.n_bins - 1]                # [cuts, bins - 1]
        bins = (edges[None, :, :] < projected[:, :, None]).sum(axis=2)  # searchsorted left
        cuts = np.arange(self.n_random_cuts)
        terms = -np.asarray(self.weights)[None, :] * np.log(self.histograms_[cuts, bins])
        scores = np.zeros(len(X))
        for column in terms.T:            # summed cut by cut, as pyod does
            scores += column
        return scores / self.n_random_cuts
