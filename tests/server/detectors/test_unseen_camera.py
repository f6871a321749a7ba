"""The unseen-camera prior: measured by leaving the fit set's cameras out, kept with the
bundle, and taken by the `+unseen` score adaptations for cameras outside the fit set."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.detectors.persistence import load_bundle, save_bundle
from envad.server.detectors.score_adaptation import parse_score_adaptation
from envad.server.detectors.unseen_camera import UnseenCameraPrior, measure
from envad.training.metrics import roc_auc

DIM = 16


def _cameras(rng, n_cameras: int, rows: int, style: float):
    """Rows of `n_cameras` cameras, each the same content cloud moved by its own style
    offset of norm about `style`."""
    X, envs = [], []
    for c in range(n_cameras):
        offset = rng.normal(0.0, style / np.sqrt(DIM), DIM)
        X.append(rng.normal(0.0, 1.0, (rows, DIM)) + offset)
        envs += [f"cam-{c}"] * rows
    return np.vstack(X), np.asarray(envs)


def _knn_fitter(rows):
    def score(queries):
        distances = np.linalg.norm(queries[:, None, :] - rows[None, :, :], axis=2)
        return np.sort(distances, axis=1)[:, 4]
    return score


def test_cameras_with_their_own_style_measure_a_positive_shift():
    rng = np.random.default_rng(0)
    X, envs = _cameras(rng, 5, 60, style=4.0)
    cal = rng.random(len(X)) < 0.2
    prior = measure([_knn_fitter], [(X[~cal], X[cal])], envs[~cal], envs[cal], seed=0)
    assert prior is not None
    assert prior.cameras == tuple(f"cam-{c}" for c in range(5))
    assert prior.shift[0] > 1.0          # a left-out camera scores well above the others
    # cameras that differ in nothing: no shift to speak of
    same, _ = _cameras(np.random.default_rng(1), 5, 60, style=0.0)
    flat = measure([_knn_fitter], [(same[~cal], same[cal])], envs[~cal], envs[cal], seed=0)
    assert flat is not None and abs(flat.shift[0]) < 0.5


def test_one_camera_gives_no_prior():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, DIM))
    envs = np.asarray(["only"] * 100)
    assert measure([_knn_fitter], [(X[:80], X[80:])], envs[:80], envs[80:], seed=0) is None


@pytest.mark.parametrize("text, described", [
    ("frozen:64+unseen", "frozen(prior_rows=64, prior=unseen camera)"),
    ("camera:16+unseen", "camera(prior_rows=16, prior=unseen camera)"),
    ("frozen:16:256+unseen", "frozen(prior_rows=16, rows=256, prior=unseen camera)"),
])
def test_unseen_specs_parse_and_print_back(text, described):
    adaptation = parse_score_adaptation(text)
    assert adaptation.unseen_prior and adaptation.spec() == text
    assert adaptation.describe() == described
    assert parse_score_adaptation(adaptation.spec()) == adaptation


@pytest.mark.parametrize("text", ["median:64+unseen", "gated:16+unseen", "none+unseen",
                                  "+unseen"])
def test_the_unseen_prior_goes_with_the_mean_statistics_only(text):
    with pytest.raises(InvalidInput, match="score adaptation"):
        parse_score_adaptation(text)


@pytest.fixture(scope="module")
def styled_bundle():
    """A bundle fitted on six styled cameras that measures the unseen prior."""
    rng = np.random.default_rng(3)
    X, envs = _cameras(rng, 6, 120, style=6.0)
    return fit_bundle(X, FitSpec(detectors=("KNN",), score_adaptation="frozen:64+unseen"),
                      envs=envs)


def test_a_new_cameras_first_images_are_scored_as_an_unseen_cameras(styled_bundle):
    """Before its own statistics weigh, a new camera's normal images score near the fit
    scale with the unseen prior and far above it with the fit set's."""
    rng = np.random.default_rng(4)
    new = rng.normal(0.0, 1.0, (8, DIM)) + rng.normal(0.0, 6.0 / np.sqrt(DIM), DIM)
    envs = np.asarray(["cam-new"] * len(new))
    fit_prior = replace(styled_bundle, score_adaptation=parse_score_adaptation("frozen:64"))
    with_unseen = styled_bundle.score_stream(new, envs, chunk=1)
    without = fit_prior.score_stream(new, envs, chunk=1)
    reference = styled_bundle.reference["KNN"]
    assert styled_bundle.unseen_camera is not None
    assert styled_bundle.unseen_camera.shift[0] > 1.0
    assert with_unseen.adapted["KNN"][0] < without.adapted["KNN"][0]
    assert abs(np.median(with_unseen.adapted["KNN"]) - np.median(reference)) < abs(
        np.median(without.adapted["KNN"]) - np.median(reference))


def test_a_fit_set_camera_keeps_the_fit_sets_prior(styled_bundle):
    rng = np.random.default_rng(5)
    rows = rng.normal(size=(10, DIM))
    envs = np.asarray(["cam-0"] * len(rows))
    fit_prior = replace(styled_bundle, score_adaptation=parse_score_adaptation("frozen:64"))
    assert np.array_equal(styled_bundle.score_stream(rows, envs).adapted["KNN"],
                          fit_prior.score_stream(rows, envs).adapted["KNN"])


def test_normal_first_streams_score_closer_to_shuffled_with_the_unseen_prior(styled_bundle):
    """Three new cameras, each its normal images first and then a run of new content:
    the pooled ROC-AUC with the unseen prior is nearer to that of the shuffled order."""
    rng = np.random.default_rng(6)
    parts, envs, positive = [], [], []
    for c in range(3):
        offset = rng.normal(0.0, 6.0 / np.sqrt(DIM), DIM)
        normal = rng.normal(0.0, 1.0, (120, DIM)) + offset
        new = rng.normal(0.0, 1.0, (60, DIM)) + offset + 1.5
        parts += [normal, new]
        envs += [f"new-{c}"] * 180
        positive += [False] * 120 + [True] * 60
    X, envs, positive = np.vstack(parts), np.asarray(envs), np.asarray(positive)
    shuffled = np.concatenate([rng.permutation(np.arange(c * 180, (c + 1) * 180))
                               for c in range(3)])

    def auc(bundle, order):
        scores = bundle.score_stream(X[order], envs[order])
        return roc_auc(positive[order], scores.ensemble)

    fit_prior = replace(styled_bundle, score_adaptation=parse_score_adaptation("frozen:64"))
    in_order = np.arange(len(X))
    gap_unseen = auc(styled_bundle, shuffled) - auc(styled_bundle, in_order)
    gap_fit = auc(fit_prior, shuffled) - auc(fit_prior, in_order)
    assert gap_unseen < gap_fit


def test_the_prior_is_saved_and_loaded_with_the_bundle(styled_bundle, tmp_path):
    loaded = load_bundle(save_bundle(styled_bundle, tmp_path), tmp_path)
    assert isinstance(loaded.unseen_camera, UnseenCameraPrior)
    assert loaded.unseen_camera.cameras == styled_bundle.unseen_camera.cameras
    assert np.array_equal(loaded.unseen_camera.shift, styled_bundle.unseen_camera.shift)
    assert np.array_equal(loaded.unseen_camera.spread, styled_bundle.unseen_camera.spread)


def test_a_bundle_without_the_unseen_adaptation_measures_nothing():
    rng = np.random.default_rng(7)
    X, envs = _cameras(rng, 3, 40, style=2.0)
    bundle = fit_bundle(X, FitSpec(detectors=("KNN",), score_adaptation="frozen:64"),
                        envs=envs)
    assert bundle.unseen_camera is None
