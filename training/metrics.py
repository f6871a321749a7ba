"""ROC-AUC (anomaly = positive) pooled and per camera, and mean ± std over seeds."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """Area under the ROC curve via the Mann-Whitney U statistic (ties count one half).

    NaN when only one class is present.
    """
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    n_pos = int(labels.sum())
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def roc_auc_columns(labels: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """`roc_auc` of every column of scores [n, k] at once (one ranking of the matrix
    instead of k): the same values, as the ranks' sums are exact in float64."""
    labels = np.asarray(labels).astype(bool)
    scores = np.asarray(scores, dtype=np.float64)
    n_pos = int(labels.sum())
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return np.full(scores.shape[1], np.nan)
    ranks = rankdata(scores, axis=0)
    return (ranks[labels].sum(axis=0) - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def per_camera_auc(labels: np.ndarray, scores: np.ndarray, envs: np.ndarray) -> dict[str, float]:
    """ROC-AUC of each environment's images on their own."""
    envs = np.asarray(envs).astype(str)
    return {env: roc_auc(labels[envs == env], scores[envs == env]) for env in np.unique(envs)}


def mean_per_camera_auc(labels: np.ndarray, scores: np.ndarray, envs: np.ndarray) -> float:
    values = [v for v in per_camera_auc(labels, scores, envs).values() if not math.isnan(v)]
    return float(np.mean(values)) if values else float("nan")


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value), ignoring NaNs."""
    clean = np.asarray([v for v in values if v is not None and not math.isnan(v)], float)
    if len(clean) == 0:
        return float("nan"), float("nan")
    return float(clean.mean()), float(clean.std(ddof=1)) if len(clean) > 1 else 0.0


def roc_curve_points(labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(false positive rate, true positive rate) at every distinct threshold."""
    order = np.argsort(-np.asarray(scores, float), kind="stable")
    labels = np.asarray(labels).astype(bool)[order]
    tps = np.concatenate([[0], np.cumsum(labels)])
    fps = np.concatenate([[0], np.cumsum(~labels)])
    return fps / max(fps[-1], 1), tps / max(tps[-1], 1)
