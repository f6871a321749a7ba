"""The floor and ceiling rows of every PhotoDigits report (BENCHMARK.md).

content oracle: KNN on the clean 8x8 digits (content alone) with the same buckets;
raw pixels: KNN on the styled images' pixels (style drowns content). Both fit on the
training cameras' normal `train` rows and score the test cameras, like the encoders.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from envad.server.detectors.registry import Detector
from envad.training.metrics import mean_per_camera_auc, roc_auc


def _knn_row(fit: np.ndarray, test: np.ndarray, labels: np.ndarray, envs: np.ndarray) -> dict:
    scores = Detector("KNN").fit(fit).score(test)
    return {"pooled": roc_auc(labels, scores), "per_camera": mean_per_camera_auc(labels, scores,
                                                                                 envs)}


def reference_rows(dataset, fit_idx: np.ndarray, test_idx: np.ndarray,
                   size: int) -> dict[str, dict]:
    """{'raw pixels': {...}, 'content oracle': {...}} (oracle only when digits.npz exists)."""
    labels = np.array([dataset.records[i].is_anomaly for i in test_idx], dtype=bool)
    envs = np.array([dataset.records[i].env for i in test_idx])
    rows = {}
    pixels = lambda idx: dataset.images(idx, size).reshape(len(idx), -1).astype(np.float32)
    rows["raw pixels"] = _knn_row(pixels(fit_idx), pixels(test_idx), labels, envs)
    digits_file = Path(dataset.root) / "digits.npz"
    if digits_file.is_file():
        from envad.training.photodigits import load_content

        content = load_content(dataset.root)
        clean = lambda idx: np.stack([content[dataset.records[i].id].ravel()
                                      for i in idx]).astype(np.float32)
        rows["content oracle"] = _knn_row(clean(fit_idx), clean(test_idx), labels, envs)
    return rows
