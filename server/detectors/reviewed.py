"""The review memory: labels a reviewer gave move scores, at the image and around it.

A Fit whose rows include rows labelled `normal` (a false alarm, `envad label --normal`)
or `anomaly` (new content, `envad label --anomaly`; server/review.py maps the server's
`anomaly_labels` onto ANOMALY_LABEL) keeps those rows, widened to their events
(leave_out.py's groups), in the detectors' space, with their cameras. Rows labelled new
content and the frames of their events are never fit on (`known_anomalies`): the bundle
leaves them out of the detectors' fit and calibration parts and of the reference below.

At score time each image's distance to the nearest remembered row of its camera is read
against the fit set's own scale: the distances from normal fit rows to their nearest
other fit row of the camera outside their event (`reference`, calibration.py's
interpolated calibration). The ensemble is capped by that calibrated distance to the
reviewed normals (an image as close to a reviewed false alarm as normal images are to
each other is scored as normal as they are; the reviewed image and its event, distance
0, near 0) and floored by one minus the calibrated distance to the reviewed new content
(the labelled image and its event near 1; an image of the same content at that camera
up with them). An image far from every remembered row keeps its score.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from envad.records import ANOMALY_LABEL, NORMAL_LABEL
from envad.server.detectors.calibration import Calibration
from envad.server.detectors.distances import row_blocks, squared_distances, squared_norms

#: fit rows whose nearest-neighbour distance makes the reference (a seeded sample)
MAX_REFERENCE_ROWS = 4000
#: the remembered vectors' type at rest (a Fit of many rows labelled normal remembers
#: them all); distances are computed in float64 from them
VECTOR_TYPE = np.float32
NO_CAMERA = ""


def known_anomalies(labels, codes=None) -> np.ndarray:
    """Mask of the rows never fit on: labelled ANOMALY_LABEL, and the rows of their groups
    `codes` (one per row; None: each row alone)."""
    if labels is None:
        return np.zeros(0 if codes is None else len(codes), dtype=bool)
    marked = np.asarray(labels).astype(str) == ANOMALY_LABEL
    if codes is None or not marked.any():
        return marked
    codes = np.asarray(codes)
    return np.isin(codes, codes[marked])


@dataclass(frozen=True)
class ReviewMemory:
    """Remembered reviewed normals and new content (vectors in the detectors' space, with
    their cameras) and the sorted reference distances they are read against."""

    normal_vectors: np.ndarray
    normal_envs: np.ndarray
    anomaly_vectors: np.ndarray
    anomaly_envs: np.ndarray
    reference: np.ndarray

    @staticmethod
    def of(data: np.ndarray, labels, envs=None, codes=None,
           seed: int = 0) -> ReviewMemory | None:
        """The memory of rows `data` [n, d] with their `labels` (NORMAL_LABEL,
        ANOMALY_LABEL, other), widened to their groups `codes` (one per row; None: each
        row alone); None when no row is reviewed or too few normal rows give a
        reference."""
        data = np.asarray(data, dtype=np.float64)
        labels = np.full(len(data), "") if labels is None else np.asarray(labels).astype(str)
        envs = (np.full(len(data), NO_CAMERA) if envs is None
                else np.asarray(envs).astype(str))
        codes = np.arange(len(data)) if codes is None else np.asarray(codes)
        anomalous = known_anomalies(labels, codes)
        reviewed = (labels == NORMAL_LABEL) & ~anomalous
        if not (reviewed.any() or anomalous.any()) or (~anomalous).sum() < 3:
            return None
        normal = (reviewed | np.isin(codes, codes[reviewed])) & ~anomalous
        fit = ~anomalous
        reference = _nearest_other(data[fit], envs[fit], codes[fit], seed)
        if len(reference) == 0:
            return None
        return ReviewMemory(data[normal].astype(VECTOR_TYPE), envs[normal],
                            data[anomalous].astype(VECTOR_TYPE), envs[anomalous],
                            np.sort(reference))

    def normal_scores(self, X: np.ndarray, envs=None) -> np.ndarray:
        """Per row of X: its calibrated distance to the nearest reviewed normal of its
        camera (1.0 where its camera has none)."""
        return self._calibrated(self._nearest(X, envs, self.normal_vectors, self.normal_envs))

    def anomaly_scores(self, X: np.ndarray, envs=None) -> np.ndarray:
        """Per row of X: one minus its calibrated distance to the nearest reviewed new
        content of its camera (0.0 where its camera has none)."""
        nearest = self._nearest(X, envs, self.anomaly_vectors, self.anomaly_envs)
        return 1.0 - self._calibrated(nearest)

    def adjust(self, ensemble: np.ndarray, X: np.ndarray, envs=None) -> np.ndarray:
        """The ensemble scores capped by `normal_scores`, then floored by
        `anomaly_scores` (a row labelled new content is never discounted)."""
        capped = np.minimum(ensemble, self.normal_scores(X, envs))
        return np.maximum(capped, self.anomaly_scores(X, envs))

    def _calibrated(self, nearest: np.ndarray) -> np.ndarray:
        out = np.ones(len(nearest))
        known = np.isfinite(nearest)
        if known.any():
            out[known] = Calibration.of(self.reference)(nearest[known])
        return out

    @staticmethod
    def _nearest(X: np.ndarray, envs, vectors: np.ndarray, vector_envs: np.ndarray
                 ) -> np.ndarray:
        """Distance from each row of X to the nearest of `vectors` of its camera (inf
        where none)."""
        X = np.asarray(X, dtype=np.float64)
        envs = np.full(len(X), NO_CAMERA) if envs is None else np.asarray(envs).astype(str)
        nearest = np.full(len(X), np.inf)
        for env in np.unique(envs):
            mine = (vector_envs == env) if env != NO_CAMERA else np.ones(len(vector_envs), bool)
            if not mine.any():
                continue
            rows = np.flatnonzero(envs == env)
            nearest[rows] = np.sqrt(_min_squared(X[rows], vectors[mine].astype(np.float64)))
        return nearest

    def arrays(self) -> dict[str, np.ndarray]:
        """What persistence writes (numpy arrays, no pickles)."""
        return {"vectors": self.normal_vectors, "envs": self.normal_envs.astype(str),
                "anomaly_vectors": self.anomaly_vectors,
                "anomaly_envs": self.anomaly_envs.astype(str), "reference": self.reference}

    @staticmethod
    def from_arrays(arrays) -> ReviewMemory:
        """The memory `arrays` wrote (a bundle written before new-content labels were
        remembered has no anomaly arrays: none remembered)."""
        width = np.asarray(arrays["vectors"]).shape[1]
        files = set(getattr(arrays, "files", arrays))
        anomaly_vectors = (arrays["anomaly_vectors"] if "anomaly_vectors" in files
                           else np.zeros((0, width)))
        anomaly_envs = arrays["anomaly_envs"] if "anomaly_envs" in files else np.zeros(0, str)
        return ReviewMemory(np.asarray(arrays["vectors"], dtype=VECTOR_TYPE),
                            np.asarray(arrays["envs"]).astype(str),
                            np.asarray(anomaly_vectors, dtype=VECTOR_TYPE),
                            np.asarray(anomaly_envs).astype(str),
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
