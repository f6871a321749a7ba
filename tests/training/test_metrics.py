"""ROC-AUC and aggregation helpers against scikit-learn."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score, roc_curve

from envad.training.metrics import (
    mean_per_camera_auc,
    mean_std,
    per_camera_auc,
    roc_auc,
    roc_auc_columns,
    roc_curve_points,
)


@pytest.mark.parametrize("seed", range(5))
def test_roc_auc_equals_scikit_learn_including_ties(seed):
    rng = np.random.default_rng(seed)
    labels = rng.random(300) < 0.3
    scores = np.round(rng.normal(size=300) + labels, 1)  # rounding creates ties
    assert roc_auc(labels, scores) == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)


def test_single_class_is_nan_and_per_camera():
    assert math.isnan(roc_auc(np.zeros(5, bool), np.arange(5)))
    labels = np.array([0, 1, 0, 1, 0, 0], bool)
    scores = np.array([0.1, 0.9, 0.2, 0.3, 0.5, 0.4])
    envs = np.array(["a", "a", "b", "b", "c", "c"])
    per = per_camera_auc(labels, scores, envs)
    assert per["a"] == 1.0 and per["b"] == 1.0 and math.isnan(per["c"])
    assert mean_per_camera_auc(labels, scores, envs) == 1.0


def test_mean_std_and_curve():
    assert mean_std([0.5, 0.7]) == pytest.approx((0.6, np.std([0.5, 0.7], ddof=1)))
    assert mean_std([0.4]) == (0.4, 0.0)
    labels = np.array([0, 0, 1, 1, 0, 1], bool)
    scores = np.array([0.1, 0.4, 0.35, 0.8, 0.2, 0.9])
    fpr, tpr = roc_curve_points(labels, scores)
    ref_fpr, ref_tpr, _ = roc_curve(labels, scores, drop_intermediate=False)
    np.testing.assert_allclose(fpr, ref_fpr)
    np.testing.assert_allclose(tpr, ref_tpr)


def test_roc_auc_columns_equals_roc_auc_of_each_column_ties_included():
    rng = np.random.default_rng(3)
    labels = rng.random(120) < 0.3
    scores = np.column_stack([rng.normal(size=120), rng.integers(0, 4, 120),   # ties
                              np.where(labels, 1.0, 0.0), np.zeros(120)])
    expected = [roc_auc(labels, scores[:, j]) for j in range(scores.shape[1])]
    assert roc_auc_columns(labels, scores).tolist() == expected
    assert expected[2] == 1.0 and expected[3] == 0.5
    assert np.isnan(roc_auc_columns(np.zeros(5, bool), np.ones((5, 2)))).all()
