"""Choosing the space step on the fitting rows alone: a novelty proxy on training cameras.

The question the detectors face is "is this new content, on a camera never seen?". The
fitting rows can ask it of themselves without any anomaly and without any test camera:
for each training camera c and each content label L, fit the space on the other
cameras' rows without L, and ask KNN (5th-neighbour distance, the paper's KNN) to find
camera c's rows of label L among camera c's rows. The mean ROC-AUC over (c, L) is the
proxy; the space with the best proxy wins (ties: the simpler, earlier candidate).
Camera c plays an unseen camera: centring uses its own mean, as per-camera adaptation
does once a camera has sent enough images.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from envad.server.detectors.exact import ExactKNN
from envad.server.detectors.geometry import (
    DEFAULT_MIN_CAMERA_ROWS,
    CameraStats,
    EmbeddingSpace,
    parse_space,
)

PROXY_K = 5
DEFAULT_MAX_ROWS = 2000
MIN_ROWS_PER_GROUP = 5
STYLE_CANDIDATES = (1, 2, 3, 5, 8)


@dataclass(frozen=True)
class SpaceChoice:
    """The chosen (unfitted) space and the proxy ROC-AUC of every candidate."""

    space: EmbeddingSpace
    scores: dict[str, float]
    n_rows: int


def candidate_spaces(n_cameras: int) -> list[str]:
    """Space names worth trying with `n_cameras` training cameras (a fold holds one
    fewer, so style_l2 can remove at most n_cameras - 2 directions there)."""
    names = ["raw", "l2", "pca_l2", "center_l2", "white_l2", "center_white_l2"]
    names += [f"style_l2:{n}" for n in STYLE_CANDIDATES if n <= n_cameras - 2]
    return names


def _auc(positive: np.ndarray, scores: np.ndarray) -> float:
    # scikit-learn: only when a Fit asks for the `auto` space, so that a server of the
    # default pipeline never loads it (docs/scaling.md, the fixed part)
    from sklearn.metrics import roc_auc_score
    return float(roc_auc_score(positive, scores))


def _always(stats: CameraStats) -> Callable[[str], CameraStats]:
    """A running-stats lookup that answers `stats` for every camera."""
    return lambda env: stats


def proxy_auc(spec: str, X: np.ndarray, envs: np.ndarray, labels: np.ndarray) -> float:
    """Mean ROC-AUC of leave-one-camera-out, leave-one-label-out novelty detection."""
    aucs = []
    for camera in np.unique(envs):
        held = envs == camera
        query, query_labels = X[held], labels[held]
        stats = CameraStats(int(held.sum()), query.mean(axis=0))
        for label in np.unique(labels):
            positive = query_labels == label
            ref_rows = ~held & (labels != label)
            if (positive.sum() < MIN_ROWS_PER_GROUP or (~positive).sum() < MIN_ROWS_PER_GROUP
                    or ref_rows.sum() <= PROXY_K):
                continue
            space = parse_space(spec).fit(X[ref_rows], envs[ref_rows])
            ref, _ = space.transform(X[ref_rows], envs[ref_rows])
            q, _ = space.transform(query, np.full(len(query), camera),
                                   running=_always(stats))
            knn = ExactKNN(n_neighbors=PROXY_K).fit(ref)     # the registry's KNN
            aucs.append(_auc(positive, knn.decision_function(q)))
    return float(np.mean(aucs)) if aucs else float("nan")


def usable_for_selection(envs: np.ndarray, labels: np.ndarray) -> bool:
    """The proxy needs at least 2 cameras and 2 content labels."""
    return len(np.unique(envs)) >= 2 and len(np.unique(labels)) >= 2


def choose_space(X: np.ndarray, envs: Sequence[str] | np.ndarray,
                 labels: Sequence[str] | np.ndarray, *,
                 candidates: Sequence[str] | None = None, max_rows: int = DEFAULT_MAX_ROWS,
                 seed: int = 0, min_camera_rows: int = DEFAULT_MIN_CAMERA_ROWS
                 ) -> SpaceChoice:
    """Try each candidate space on a seeded sample of at most `max_rows` fitting rows."""
    X = np.asarray(X, dtype=np.float64)
    envs = np.asarray(envs).astype(str)
    labels = np.asarray(labels).astype(str)
    if not usable_for_selection(envs, labels):
        raise ValueError("choosing a space needs rows from >= 2 cameras with >= 2 labels")
    if len(X) > max_rows:
        rows = np.sort(np.random.default_rng(seed).choice(len(X), max_rows, replace=False))
        X, envs, labels = X[rows], envs[rows], labels[rows]
    names = list(candidates) if candidates else candidate_spaces(len(np.unique(envs)))
    scores = {name: proxy_auc(name, X, envs, labels) for name in names}
    finite = [n for n in names if np.isfinite(scores[n])]
    best = max(finite, key=lambda n: (scores[n], -names.index(n))) if finite else "raw"
    return SpaceChoice(parse_space(best, min_camera_rows=min_camera_rows), scores, len(X))
