"""The reviewed-normal memory: images a reviewer marked as false alarms stop being flagged,
and so do images of the same content at that camera.

A Fit whose rows include rows labelled `normal` (the review loop: `envad label --normal`,
server/review.py) keeps those rows, and the rows of their events (leave_out.py's groups),
in the detectors' space, with their cameras. At score time each image's distance to the
nearest remembered row of its camera is read against the fit set's own scale: the
distances from normal fit rows to their nearest other fit row of the camera outside their
event (`reference`, calibration.py's interpolated calibration). The ensemble becomes the
smaller of the detectors' ensemble and that calibrated distance: an image as close to a
reviewed false alarm as normal images are to each other is scored as normal as they are;
the reviewed image itself and its event (distance 0) score near 0; an image far from
every reviewed row (any other content) keeps its score. Rows labelled `anomaly` are never
fit on (server/review.py), so they never enter the memory.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envad.server.detectors.calibration import Calibration
from envad.server.detectors.distances import row_blocks, squared_distances, squared_norms

#: fit rows whose nearest-neighbour distance makes the reference (a seeded sample)
MAX_REFERENCE_ROWS = 4000
NO_CAMERA = ""


@dataclass(frozen=True)
class ReviewedNormals:
    """Remembered rows (`vectors` in the detectors' space, `envs` their cameras) and the
    sorted reference distances they are read against."""

    vectors: np.ndarray
    envs: np.ndarray
    reference: np.ndarray

    @staticmethod
    def of(data: np.ndarray, reviewed: np.ndarray, envs=None, codes=None,
           seed: int = 0) -> ReviewedNormals | None:
        """The memory of fit rows `data` [n, d] whose mask `reviewed` is set, widened to
        their groups `codes` (one per row; None: each row alone); None when no row is
        reviewed or too few rows give a reference."""
        reviewed = np.asarray(reviewed, dtype=bool)
        if not reviewed.any() or len(data) < 3:
            return None
        envs = (np.full(len(data), NO_CAMERA) if envs is None
                else np.asarray(envs).astype(str))
        codes = np.arange(len(data)) if codes is None else np.asarray(codes)
        remembered = reviewed | np.isin(codes, codes[reviewed])
        reference = _nearest_other(data, envs, codes, seed)
        if len(reference) == 0:
            return None
        return ReviewedNormals(np.asarray(data[remembered], dtype=np.float64),
                               envs[remembered], np.sort(reference))

    def scores(self, X: np.ndarray, envs=None) -> np.ndarray:
        """Per row of X: its distance to the nearest remembered row of its camera,
        calibrated against the reference (1.0 where its camera has none)."""
        X = np.asarray(X, dtype=np.float64)
        envs = np.full(len(X), NO_CAMERA) if envs is None else np.asarray(envs).astype(str)
        nearest = np.full(len(X), np.inf)
        for env in np.unique(envs):
            mine = (self.envs == env) if env != NO_CAMERA else np.ones(len(self.envs), bool)
            if not mine.any():
                continue
            rows = np.flatnonzero(envs == env)
            nearest[rows] = np.sqrt(_min_squared(X[rows], self.vectors[mine]))
        out = np.ones(len(X))
        known = np.isfinite(nearest)
        if known.any():
            out[known] = Calibration.of(self.reference)(nearest[known])
        return out

    def cap(self, ensemble: np.ndarray, X: np.ndarray, envs=None) -> np.ndarray:
        """The ensemble scores, none above the memory's score of its row."""
        return np.minimum(ensemble, self.scores(X, envs))

    def arrays(self) -> dict[str, np.ndarray]:
        """What persistence writes (numpy arrays, no pickles)."""
        return {"vectors": self.vectors, "envs": self.envs.astype(str),
                "reference": self.reference}

    @staticmethod
    def from_arrays(arrays) -> ReviewedNormals:
        return ReviewedNormals(np.asarray(arrays["vectors"], dtype=np.float64),
                               np.asarray(arrays["envs"]).astype(str),
                               np.asarray(arrays["reference"], dtype=np.float64))


def _min_squared(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    y_squared = squared_norms(Y)
    out = np.empty(len(X))
    for block in row_blocks(len(X), len(Y)):
        out[block] = squared_distances(X[block], Y, y_squared).min(axis=1)
    return out


def _nearest_other(data: np.ndarray, envs: np.ndarray, codes: np.ndarray, seed: int
                   ) -> np.ndarray:
    """Distances from (a seeded sample of) the rows to their nearest row of the same
    camera outside their group (rows with no such row left out)."""
    data = np.asarray(data, dtype=np.float64)
    rows = np.arange(len(data))
    if len(rows) > MAX_REFERENCE_ROWS:
        rows = np.sort(np.random.default_rng(seed).choice(rows, MAX_REFERENCE_ROWS,
                                                           replace=False))
    out = []
    for env in np.unique(envs[rows]):
        peers = np.flatnonzero(envs == env)
        queries = rows[envs[rows] == env]
        y_squared = squared_norms(data[peers])
        for block in row_blocks(len(queries), len(peers)):
            q = queries[block]
            squared = squared_distances(data[q], data[peers], y_squared)
            squared[codes[q][:, None] == codes[peers][None, :]] = np.inf
            out.append(np.sqrt(squared.min(axis=1)))
    found = np.concatenate(out) if out else np.zeros(0)
    return found[np.isfinite(found)]
