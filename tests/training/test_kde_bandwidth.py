"""Choosing KDE's bandwidth factor on the training cameras' folds."""

from __future__ import annotations

import json

import numpy as np
import pytest

from envad.training import kde_bandwidth
from envad.training.kde_bandwidth import (
    FIXED,
    KNN,
    choose_factor,
    criterion,
    rule_name,
    score_rules,
)
from envad.training.selection import ARCHIVE_MIXES, QuerySet, archive_sets


def _sphere_clusters(rng, centres, per_cluster, spread=0.15):
    rows = np.repeat(centres, per_cluster, axis=0)
    rows = rows + spread * rng.normal(size=rows.shape) / np.sqrt(centres.shape[1])
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_on_unit_length_rows_a_bandwidth_in_their_spacing_finds_new_content_and_one_does_not():
    """Content lives in tight clusters on the unit sphere, the new one amid the known: at
    pyod's fixed 1.0 the kernel spans the whole sphere and the new cluster, near all the
    known ones at once, looks densest; at a quarter of the 5th-neighbour distance KDE
    finds it as KNN does."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(7, 32))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    X_fit = _sphere_clusters(rng, centres[:6], 40)
    envs = np.tile(["a", "b"], len(X_fit) // 2)
    between = centres[:6].sum(axis=0, keepdims=True)     # new content amid the known
    query = np.vstack([_sphere_clusters(rng, centres[:6], 10),
                       _sphere_clusters(rng, between / np.linalg.norm(between), 10)])
    positive = np.r_[np.zeros(60, bool), np.ones(10, bool)]
    out = score_rules(X_fit, envs, query, "new", positive, spaces=("l2",), factors=(0.25, 4.0))
    auc = out["l2"]["auc"]
    assert out["l2"]["neighbour_scale"] > 0
    assert auc[rule_name(0.25)] > 0.95 and auc[KNN] > 0.95
    assert auc[FIXED] < 0.5
    assert set(auc) == {KNN, FIXED, rule_name(0.25), rule_name(4.0)}


def test_an_archive_with_repeated_new_content_is_scored_against_itself():
    """Fitted on rows that include the new content and each archive row scored without
    its own event: bursts whose frames are one event are found by both rules; the same
    content seen in 4 separate events is dense to a kernel a quarter of the neighbour
    spacing wide and not to KNN (5 neighbours); clean fits find the new content with
    both."""
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(7, 32))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    X_fit = _sphere_clusters(rng, centres[:6], 40)
    envs = np.tile(["a", "b"], len(X_fit) // 2)
    query = np.vstack([_sphere_clusters(rng, centres[:6], 40),
                       _sphere_clusters(rng, centres[6:], 40)])
    positive = np.r_[np.zeros(240, bool), np.ones(40, bool)]
    archives = archive_sets(QuerySet(query, np.full(280, "new"), positive), "new", seed=0)
    out = score_rules(X_fit, envs, query, "new", positive, spaces=("l2",), factors=(0.25,),
                      archives=archives)["l2"]
    assert set(out["archive"]) == set(ARCHIVE_MIXES)
    assert out["auc"][rule_name(0.25)] > 0.95 and out["auc"][KNN] > 0.95
    bursts = out["archive"]["2% in bursts of 4"]
    assert bursts[rule_name(0.25)] > 0.95 and bursts[KNN] > 0.95
    repeated = out["archive"]["2% seen in 4 events"]
    assert repeated[rule_name(0.25)] < 0.5 < 0.9 < repeated[KNN]
    mean_archive = np.mean([out["archive"][mix][KNN] for mix in ARCHIVE_MIXES])
    assert criterion(out, KNN) == pytest.approx(0.5 * (out["auc"][KNN] + mean_archive))


def test_the_criterion_weighs_archive_fits_as_much_as_clean_ones():
    def space(clean, archive):
        return {"auc": {"x0.5": clean[0], "x1": clean[1]},
                "archive": {mix: {"x0.5": archive[0], "x1": archive[1]}
                            for mix in ARCHIVE_MIXES}}

    # x0.5 is better on clean fits, x1 on archives by more
    best, means = choose_factor([{"spaces": {"l2": space((0.9, 0.85), (0.5, 0.8))}}],
                                factors=(0.5, 1.0))
    assert best == 1.0 and means == pytest.approx({"x0.5": 0.7, "x1": 0.825})


def test_the_factor_with_the_best_mean_over_folds_and_spaces_wins_and_ties_go_to_the_smaller():
    def fold(a, b):
        return {"spaces": {"raw": {"auc": {"x0.5": a[0], "x1": b[0]}},
                           "l2": {"auc": {"x0.5": a[1], "x1": b[1]}}}}

    best, means = choose_factor([fold((0.6, 0.9), (0.7, 0.75)), fold((0.7, 0.7), (0.7, 0.7))],
                                factors=(0.5, 1.0))
    assert best == 0.5 and means == pytest.approx({"x0.5": 0.725, "x1": 0.7125})
    tied, means = choose_factor([fold((0.6, 0.8), (0.7, 0.7))], factors=(1.0, 0.5))
    assert tied == 0.5 and means == pytest.approx({"x0.5": 0.7, "x1": 0.7})


def test_a_tiny_run_trains_each_fold_once_and_writes_its_table(tmp_path):
    from envad.training.photodigits import generate

    data = generate(tmp_path / "pd", 32, 0, progress=False, train_per_camera=60,
                    test_per_camera=10)
    out = tmp_path / "kde.json"
    kde_bandwidth.main(["--data", str(data), "--runs-dir", str(tmp_path / "runs"), "--folds", "1",
                        "--size", "16", "--epochs", "1", "--factors", "0.25,1", "--out", str(out)])
    result = json.loads(out.read_text())
    (fold,) = result["folds"]
    assert set(fold["spaces"]) == set(kde_bandwidth.SPACES)
    assert all(0.0 <= v <= 1.0 for space in fold["spaces"].values()
               for v in space["auc"].values())
    assert result["chosen_factor"] == max((0.25, 1.0), key=lambda f: (
        round(result["mean_auc"][rule_name(f)], 6), -f))
    assert all(set(space["archive"]) == set(ARCHIVE_MIXES) for space in fold["spaces"].values())
    table = out.with_suffix(".md").read_text()
    assert "| center_l2 |" in table and f"Chosen factor: {result['chosen_factor']:g}" in table
    assert "Archive 2% in bursts of 4" in table and "Criterion" in table
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and (runs[0] / "encoder.onnx").is_file()
