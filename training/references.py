"""The floor and ceiling rows of every PhotoDigits report (BENCHMARK.md).

content oracle: KNN on the clean 8x8 digits (content alone) with the same buckets;
raw pixels: KNN on the styled images' pixels (style drowns content). Both fit on the
training cameras' normal `train` rows and score the test cameras, like the encoders.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from envad.server.detectors.registry import Detector
from envad.training.metrics import mean_per_camera_auc, roc_auc
from envad.training.photodigits import load_content


def _knn_row(fit: np.ndarray, test: np.ndarray, labels: np.ndarray, envs: np.ndarray) -> dict:
    scores = Detector("KNN").fit(fit).score(test)
    return {"pooled": roc_auc(labels, scores), "per_camera": mean_per_camera_auc(labels, scores,
                                                                                 envs)}


def reference_rows(dataset, fit_idx: np.ndarray, test_idx: np.ndarray, size: int,
                   max_fit: int = 20000, seed: int = 0) -> dict[str, dict]:
    """{'raw pixels': {...}, 'content oracle': {...}} (oracle only when digits.npz exists).

    At most `max_fit` fit rows (a seeded sample, like the detector bundles' cap).
    """
    if len(fit_idx) > max_fit:
        rng = np.random.default_rng(seed)
        fit_idx = np.sort(rng.choice(fit_idx, size=max_fit, replace=False))
    labels = np.array([dataset.records[i].is_anomaly for i in test_idx], dtype=bool)
    envs = np.array([dataset.records[i].env for i in test_idx])
    rows = {}

    def pixels(idx):
        return dataset.images(idx, size).reshape(len(idx), -1).astype(np.float32)

    rows["raw pixels"] = _knn_row(pixels(fit_idx), pixels(test_idx), labels, envs)
    digits_file = Path(dataset.root) / "digits.npz"
    if digits_file.is_file():
        content = load_content(dataset.root)

        def clean(idx):
            return np.stack([content[dataset.records[i].id].ravel()
                             for i in idx]).astype(np.float32)

        rows["content oracle"] = _knn_row(clean(fit_idx), clean(test_idx), labels, envs)
    return rows


def cached_reference_rows(dataset, fit_idx: np.ndarray, test_idx: np.ndarray, size: int,
                          path: Path, max_fit: int = 20000) -> dict[str, dict]:
    """reference_rows, computed once per (dataset, size, rows) and kept in `path`."""
    key = {"dataset": str(dataset.root), "size": size, "max_fit": max_fit,
           "n_fit": len(fit_idx), "n_test": len(test_idx)}
    if path.is_file():
        cached = json.loads(path.read_text())
        if cached.get("key") == key:
            return cached["rows"]
    rows = reference_rows(dataset, fit_idx, test_idx, size, max_fit)
    path.write_text(json.dumps({"key": key, "rows": rows}, indent=1))
    return rows
