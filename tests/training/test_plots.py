"""Evaluation plots are written as readable PNGs from synthetic results."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from envad.training import plots
from envad.training.protocol import MEAN_AD

ALGORITHMS = ["erm", "ea_mocov3"]
ROWS = ["KNN", "KDE", MEAN_AD]


def _tables():
    cells = {(r, a): (0.5 + 0.1 * i + 0.05 * j, 0.02, 3)
             for i, r in enumerate(ROWS) for j, a in enumerate(ALGORITHMS)}
    return {(v, "ood", "pooled"): cells for v in ("plain", "stylist")}


def _runs():
    rng = np.random.default_rng(0)
    labels = rng.random(120) < 0.4
    envs = np.array(["cam-rocket", "cam-moon", "cam-coins"] * 40)
    return {a: {"labels": labels, "envs": envs,
                "scores": np.clip(rng.random(120) * 0.8 + 0.2 * labels, 0, 1)}
            for a in ALGORITHMS}


def _png(path):
    with Image.open(path) as image:
        assert image.format == "PNG" and image.width > 200 and image.height > 200


def test_every_plot_is_a_png(tmp_path):
    tables, runs = _tables(), _runs()
    plots.heatmap(tmp_path / "h.png", tables[("plain", "ood", "pooled")], ROWS, ALGORITHMS)
    plots.mean_ad_bars(tmp_path / "m.png", tables, ALGORITHMS)
    plots.roc_curves(tmp_path / "r.png", {a: (d["labels"], d["scores"]) for a, d in runs.items()})
    plots.camera_histograms(tmp_path / "c.png", runs)
    for name in ("h.png", "m.png", "r.png", "c.png"):
        _png(tmp_path / name)


def test_histogram_grid_has_a_panel_per_algorithm_and_camera(tmp_path):
    runs = _runs()
    plots.camera_histograms(tmp_path / "one.png", {"erm": runs["erm"]})
    plots.camera_histograms(tmp_path / "two.png", runs)
    with Image.open(tmp_path / "one.png") as one, Image.open(tmp_path / "two.png") as two:
        assert two.height > one.height and two.width == one.width


def test_mean_ad_bars_hold_one_series_per_variant_raw_first():
    cells = {(r, a): (0.5 + 0.1 * j, 0.02, 3) for r in ROWS for j, a in enumerate(ALGORITHMS)}
    shifted = {key: (value[0] + 0.3, value[1], value[2]) for key, value in cells.items()}
    tables = {("space:pca_l2+camera:64", "ood", "pooled"): shifted,
              ("plain", "ood", "pooled"): cells,
              ("plain", "id", "pooled"): shifted,
              ("space:l2", "ood", "pooled"): cells}
    series = plots.mean_ad_series(tables, ALGORITHMS)
    assert [label for label, _, _ in series] == ["embedding", "pca_l2+camera:64", "l2"]
    label, means, stds = series[1]
    assert means == pytest.approx([80.0, 90.0]) and stds == pytest.approx([2.0, 2.0])


def test_mean_ad_bars_widen_for_many_space_steps(tmp_path):
    cells = _tables()[("plain", "ood", "pooled")]
    one = {("plain", "ood", "pooled"): cells}
    six = {**one, **{(f"space:{s}", "ood", "pooled"): cells
                     for s in ("l2", "pca_l2", "center_l2", "white_l2", "raw")}}
    plots.mean_ad_bars(tmp_path / "one.png", one, ALGORITHMS)
    plots.mean_ad_bars(tmp_path / "six.png", six, ALGORITHMS)
    with Image.open(tmp_path / "one.png") as a, Image.open(tmp_path / "six.png") as b:
        assert b.width > a.width


def test_mean_ad_bars_draw_nothing_without_a_complete_variant(tmp_path):
    partial = {("plain", "ood", "pooled"): {(MEAN_AD, "erm"): (0.6, 0.01, 3)}}
    assert plots.mean_ad_series(partial, ALGORITHMS) == []
    plots.mean_ad_bars(tmp_path / "none.png", partial, ALGORITHMS)
    assert not (tmp_path / "none.png").exists()
