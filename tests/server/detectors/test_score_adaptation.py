"""Per-camera score standardisation: the map onto the fit set's scale, its prior, specs."""

from __future__ import annotations

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.detectors.geometry import CameraStats
from envad.server.detectors.score_adaptation import (
    DEFAULT_PRIOR_ROWS,
    ReferenceMoments,
    ScoreAdaptation,
    parse_score_adaptation,
)
from envad.server.env_stats import EnvStatistics
from envad.training.metrics import roc_auc


@pytest.mark.parametrize("text, prior, spec, described", [
    ("none", None, "none", "none"),
    ("", None, "none", "none"),
    ("camera", DEFAULT_PRIOR_ROWS, f"camera:{DEFAULT_PRIOR_ROWS}",
     f"camera(prior_rows={DEFAULT_PRIOR_ROWS})"),
    ("camera:4", 4, "camera:4", "camera(prior_rows=4)"),
    ("median", DEFAULT_PRIOR_ROWS, f"median:{DEFAULT_PRIOR_ROWS}",
     f"median(prior_rows={DEFAULT_PRIOR_ROWS})"),
    ("gated:16", 16, "gated:16", "gated(prior_rows=16)"),
    ("frozen:8", 8, "frozen:8", "frozen(prior_rows=8)"),
    ("frozen:16:256", 16, "frozen:16:256", "frozen(prior_rows=16, rows=256)"),
    ("gated:64:1.5", 64, "gated:64:1.5", "gated(prior_rows=64, gate=1.5)"),
    ("low:16", 16, "low:16", "low(prior_rows=16)"),
    ("low:64:256", 64, "low:64:256", "low(prior_rows=64, rows=256)"),
    ("frozen:64+shift", 64, "frozen:64+shift", "frozen(prior_rows=64, location only)"),
    ("camera+unseen+shift", DEFAULT_PRIOR_ROWS, f"camera:{DEFAULT_PRIOR_ROWS}+unseen+shift",
     f"camera(prior_rows={DEFAULT_PRIOR_ROWS}, prior=unseen camera, location only)"),
])
def test_specs_parse_and_print_back(text, prior, spec, described):
    adaptation = parse_score_adaptation(text)
    assert adaptation.prior_rows == prior
    assert adaptation.spec() == spec
    assert adaptation.describe() == described
    assert parse_score_adaptation(adaptation.spec()) == adaptation


@pytest.mark.parametrize("text", ["camera:0", "camera:-3", "camera:1.5", "camera:x",
                                  "per-camera", "none:3", "frozen:0", "median:x",
                                  "frozen:16:0", "camera:16:256", "frozen:16:x",
                                  "gated:64:0", "gated:64:-1", "gated:64:nan",
                                  "frozen:16:1.5", "median:64:2", "low:0", "low:16:0",
                                  "low:16:1.5", "none+shift", "camera:64+shift+unseen"])
def test_bad_specs_are_refused_by_name(text):
    with pytest.raises(InvalidInput, match="score adaptation"):
        parse_score_adaptation(text)


def _stats_of(adaptation, detectors, raw_rows):
    """A camera's running statistics after `raw_rows` ({detector: scores})."""
    rows = adaptation.statistics_of(raw_rows, detectors)
    return CameraStats(len(rows), rows.mean(axis=0))


def knn_moments(reference):
    return ReferenceMoments.of(reference, ["KNN"])


def test_a_camera_with_many_images_is_mapped_onto_the_fit_scale():
    rng = np.random.default_rng(0)
    reference = {"KNN": np.sort(rng.normal(1.0, 0.1, 500))}
    camera_scores = 5.0 + 2.0 * rng.normal(size=5000)   # shifted and spread out
    adaptation = ScoreAdaptation(16)
    stats = _stats_of(adaptation, ["KNN"], {"KNN": camera_scores})
    adapted, weight = adaptation.adapt({"KNN": camera_scores}, knn_moments(reference), ["KNN"],
                                       ["cam"] * len(camera_scores), lambda env: stats)
    assert adapted["KNN"].mean() == pytest.approx(reference["KNN"].mean(), abs=0.01)
    assert adapted["KNN"].std() == pytest.approx(reference["KNN"].std(), rel=0.02)
    assert weight == pytest.approx(np.full(len(camera_scores), 5000 / 5016))
    # within the camera the order is kept
    assert (np.argsort(adapted["KNN"]) == np.argsort(camera_scores)).all()


def test_the_prior_holds_a_camera_with_few_images_near_the_fit_scale():
    reference = {"KNN": np.sort(np.linspace(0.0, 2.0, 101))}
    raw = {"KNN": np.array([10.0, 10.0])}
    adaptation = ScoreAdaptation(1000)
    stats = _stats_of(adaptation, ["KNN"], raw)
    adapted, weight = adaptation.adapt(raw, knn_moments(reference), ["KNN"], ["cam", "cam"],
                                       lambda env: stats)
    assert weight == pytest.approx([2 / 1002] * 2)
    # two rows against a prior of 1000: the camera's mean barely moves, its spread is
    # the fit set's, so the adapted score stays far above the fit scale (still unusual)
    assert adapted["KNN"][0] > reference["KNN"].max()


def test_unknown_cameras_rows_without_a_camera_and_none_are_left_alone():
    reference = {"KNN": np.sort(np.linspace(0.0, 1.0, 11))}
    raw = {"KNN": np.array([3.0, 4.0])}
    stats = _stats_of(ScoreAdaptation(4), ["KNN"], {"KNN": np.array([100.0, 200.0])})
    for adaptation, envs, running in [
        (ScoreAdaptation(4), ["", ""], lambda env: stats),          # no camera named
        (ScoreAdaptation(4), ["new", "new"], lambda env: None),     # never seen
        (ScoreAdaptation(None), ["cam", "cam"], lambda env: stats),  # adaptation off
        (ScoreAdaptation(4), ["cam", "cam"], None),                 # no statistics kept
    ]:
        adapted, weight = adaptation.adapt(raw, knn_moments(reference), ["KNN"], envs, running)
        assert adapted["KNN"].tolist() == [3.0, 4.0]
        assert weight.tolist() == [0.0, 0.0]


def test_a_camera_whose_scores_are_all_alike_does_not_blow_up():
    reference = {"KNN": np.sort(np.linspace(0.0, 1.0, 11))}
    raw = {"KNN": np.full(50, 0.7)}
    adaptation = ScoreAdaptation(1)
    stats = _stats_of(adaptation, ["KNN"], raw)
    adapted, _ = adaptation.adapt(raw, knn_moments(reference), ["KNN"], ["cam"] * 50,
                                  lambda env: stats)
    assert np.isfinite(adapted["KNN"]).all()


def _two_cameras(rng, n=300):
    """Fit rows of camera a; queries of a and of an unseen camera b whose style adds an
    offset to every embedding; one anomaly in four, far from the normal cluster."""
    fit = rng.normal(size=(n, 8))
    queries, envs, positive = [], [], []
    for env, offset in (("cam-a", 0.0), ("cam-b", 3.0)):
        normal = rng.normal(size=(n, 8)) + offset
        anomalous = rng.normal(size=(n // 3, 8)) * 2.5 + offset
        queries += [normal, anomalous]
        envs += [env] * (n + n // 3)
        positive += [False] * n + [True] * (n // 3)
    order = rng.permutation(len(envs))
    return (fit, np.concatenate(queries)[order], np.array(envs)[order],
            np.array(positive)[order])


@pytest.mark.parametrize("statistic", ["camera", "median", "gated"])
def test_camera_adaptation_ranks_two_cameras_together_better_than_none(statistic):
    rng = np.random.default_rng(3)
    fit, X, envs, positive = _two_cameras(rng)
    aucs = {}
    adapted_spec = f"{statistic}:16"
    for spec in ("none", adapted_spec):
        bundle = fit_bundle(fit, FitSpec(detectors=("KNN",), score_adaptation=spec),
                            envs=np.array(["cam-a"] * len(fit)))
        scores = bundle.score_stream(X, envs)
        aucs[spec] = roc_auc(positive, scores.calibrated["KNN"])
        # within one camera the adapted score keeps the raw order but for the drift of
        # the camera's statistics as it sends images
        for env in ("cam-a", "cam-b"):
            own = envs == env
            assert abs(roc_auc(positive[own], scores.adapted["KNN"][own])
                       - roc_auc(positive[own], scores.raw["KNN"][own])) < 0.03
    # each camera's first chunk is scored before any of its rows is stored (unadapted)
    assert aucs["none"] < 0.75 < 0.85 < aucs[adapted_spec]


def test_scoring_reads_the_statistics_and_only_stored_rows_change_them():
    rng = np.random.default_rng(4)
    bundle = fit_bundle(rng.normal(size=(200, 4)), FitSpec(detectors=("KNN", "PCA"),
                                                           score_adaptation="camera:10"))
    stats = bundle.new_score_statistics()
    assert isinstance(stats, EnvStatistics) and stats.dim == 4
    X = rng.normal(size=(10, 4)) + 2.0
    unseen = bundle.score(X, ["cam"] * 10, score_stats=stats)
    for _ in range(20):                      # any number of Score calls: nothing moves
        again = bundle.score(X, ["cam"] * 10, score_stats=stats)
        np.testing.assert_array_equal(again.ensemble, unseen.ensemble)
    assert stats.counts() == {}
    assert unseen.camera_weight.tolist() == [0.0] * 10
    bundle.observe(X, ["cam"] * 10, score_stats=stats)
    assert stats.counts() == {"cam": 10}
    first = bundle.score(X, ["cam"] * 10, score_stats=stats)
    assert first.camera_weight.tolist() == pytest.approx([0.5] * 10)
    bundle.observe(X, ["cam"] * 10, score_stats=stats)
    second = bundle.score(X, ["cam"] * 10, score_stats=stats)
    assert second.camera_weight.tolist() == pytest.approx([20 / 30] * 10)
    # raw scores are the detectors' own, the camera's statistics pull the adapted ones down
    assert second.raw["KNN"] == pytest.approx(first.raw["KNN"])
    assert (second.adapted["KNN"] < first.raw["KNN"]).all()
    # without statistics the bundle scores unadapted
    plain = bundle.score(X, ["cam"] * 10)
    assert plain.adapted["KNN"] == pytest.approx(plain.raw["KNN"])
    assert plain.camera_weight.tolist() == [0.0] * 10


def test_a_bundle_takes_its_reference_moments_once(monkeypatch):
    """The fit set's scale is fixed for a bundle: not recomputed over the reference
    scores at every Score."""
    rng = np.random.default_rng(5)
    bundle = fit_bundle(rng.normal(size=(200, 4)), FitSpec(detectors=("KNN", "PCA"),
                                                           score_adaptation="camera:10"))
    taken = []
    original = ReferenceMoments.of.__func__
    monkeypatch.setattr(ReferenceMoments, "of", classmethod(
        lambda cls, reference, detectors, unseen=None: taken.append(detectors) or original(
            cls, reference, detectors, unseen)))
    stats = bundle.new_score_statistics()
    X = rng.normal(size=(10, 4)) + 2.0
    bundle.observe(X, ["cam"] * 10, score_stats=stats)
    first = bundle.score(X, ["cam"] * 10, score_stats=stats)
    bundle.score(X, ["cam"] * 10, score_stats=stats)
    assert taken == [["KNN", "PCA"]]
    # the scores are those of the moments taken afresh
    fresh = bundle.new_score_statistics()
    fresh.update(["cam"] * 10, bundle.score_adaptation.statistics_of(first.raw, bundle.detectors))
    expected, _ = bundle.score_adaptation.adapt(
        first.raw, original(ReferenceMoments, bundle.reference, bundle.detectors),
        bundle.detectors, ["cam"] * 10, fresh.get)
    for name in bundle.detectors:
        np.testing.assert_array_equal(first.adapted[name], expected[name])


def test_frozen_statistics_keep_a_cameras_first_rows_only():
    rng = np.random.default_rng(6)
    reference = {"KNN": np.sort(rng.normal(1.0, 0.1, 500))}
    fit = knn_moments(reference)
    adaptation = parse_score_adaptation("frozen:4")          # the first 16 rows
    stats = EnvStatistics(None, adaptation.dim(1))
    first = {"KNN": 2.0 + 0.1 * rng.normal(size=10)}
    keep, rows = adaptation.observations(first, fit, ["KNN"], ["c"] * 10, stats.get)
    assert keep.all()
    stats.update(np.array(["c"] * 10)[keep], rows)
    later = {"KNN": np.concatenate([2.0 + 0.1 * rng.normal(size=6), np.full(20, 9.0)])}
    keep, rows = adaptation.observations(later, fit, ["KNN"], ["c"] * 26, stats.get)
    assert keep.tolist() == [True] * 6 + [False] * 20       # 16 rows, then kept as they are
    stats.update(np.array(["c"] * 26)[keep], rows)
    location, _ = adaptation.location_scale(stats.get("c"), fit)
    assert stats.counts() == {"c": 16} and location[0] < 2.0


def _stream_auc(bundle, X, envs, positive, order, history):
    """ROC-AUC of one camera's images in `order`, each chunk scored with the statistics
    of the rows stored before it; the camera already has `history` stored."""
    from envad.arrival_orders import arrange

    stats = bundle.new_score_statistics()
    bundle.observe(history, ["cam"] * len(history), score_stats=stats)
    rows = arrange(envs, positive, order, seed=0)
    scores = []
    for start in range(0, len(rows), 16):
        chunk = rows[start:start + 16]
        scores.append(bundle.score(X[chunk], envs[chunk], score_stats=stats).ensemble)
        bundle.observe(X[chunk], envs[chunk], score_stats=stats)
    return roc_auc(positive[rows], np.concatenate(scores))


def test_a_run_of_new_content_after_the_normal_images_scores_as_shuffled():
    """A camera in service (256 normal images stored) then sends 200 normal images and
    a run of 100 of new content: the shipped adaptation scores the run as it scores the
    same images shuffled. An adaptation whose statistics follow every stored row (the
    running mean) lets the run lower its own later frames."""
    from envad.pipeline import DEFAULT_PIPELINE

    rng = np.random.default_rng(0)
    fit = rng.normal(size=(400, 8))
    history = rng.normal(size=(256, 8)) + 1.5           # the camera's style: an offset
    X = np.concatenate([rng.normal(size=(200, 8)) + 1.5,
                        rng.normal(size=(100, 8)) * 1.6 + 1.5])
    positive = np.array([False] * 200 + [True] * 100)
    envs = np.array(["cam"] * 300)
    aucs = {}
    for spec in (DEFAULT_PIPELINE.score_adaptation, "camera:64"):
        bundle = fit_bundle(fit, FitSpec(detectors=("KNN",), score_adaptation=spec),
                            envs=np.array(["cam-a"] * 400))
        aucs[spec] = {order: _stream_auc(bundle, X, envs, positive, order, history)
                      for order in ("shuffled", "normal-first")}
    shipped = aucs[DEFAULT_PIPELINE.score_adaptation]
    assert abs(shipped["normal-first"] - shipped["shuffled"]) <= 0.01
    moving = aucs["camera:64"]
    assert moving["shuffled"] - moving["normal-first"] > 0.03


def test_a_lower_gate_keeps_a_run_two_deviations_up_out_of_the_statistics():
    """Once a camera has P rows, `gated:P:Z` leaves out of its statistics the rows it
    scores more than Z robust standard deviations above its normal: a run 2 sd up is
    left out at Z = 1.5 and joins at the default gate (3)."""
    rng = np.random.default_rng(3)
    fit = knn_moments({"KNN": np.sort(rng.normal(1.0, 0.1, 500))})
    run = {"KNN": np.full(30, 1.2)}                          # 2 sd above the normal
    left_out = {}
    for spec in ("gated:16:1.5", "gated:16"):
        adaptation = parse_score_adaptation(spec)
        stats = EnvStatistics(None, adaptation.dim(1))
        normal = {"KNN": rng.normal(1.0, 0.1, 64)}
        _, rows = adaptation.observations(normal, fit, ["KNN"], ["c"] * 64, stats.get)
        stats.update(np.array(["c"] * 64), rows)
        _, rows = adaptation.observations(run, fit, ["KNN"], ["c"] * 30, stats.get)
        left_out[spec] = int((rows.sum(axis=1) == 0).sum())
    assert left_out == {"gated:16:1.5": 30, "gated:16": 0}


def _camera_location(spec, fit, scores):
    adaptation = parse_score_adaptation(spec)
    stats = EnvStatistics(None, adaptation.dim(1))
    keep, rows = adaptation.observations({"KNN": scores}, fit, ["KNN"],
                                         ["c"] * len(scores), stats.get)
    stats.update(np.array(["c"] * int(keep.sum())), rows)
    return adaptation.location_scale(stats.get("c"), fit)


def test_low_quantiles_map_a_clean_camera_onto_the_fit_scale():
    """A camera whose scores are the reference's, moved and spread out: `low` maps its
    images onto the reference's distribution."""
    rng = np.random.default_rng(8)
    reference = {"KNN": np.sort(rng.normal(1.0, 0.2, 4000))}
    fit = knn_moments(reference)
    camera = 1.5 + 1.5 * (rng.normal(1.0, 0.2, 4000) - 1.0)
    adaptation = parse_score_adaptation("low:16")
    stats = EnvStatistics(None, adaptation.dim(1))
    stats.update(np.array(["c"] * len(camera)),
                 adaptation.statistics_of({"KNN": camera}, ["KNN"], fit))
    adapted, _ = adaptation.adapt({"KNN": camera}, fit, ["KNN"], ["c"] * len(camera),
                                  stats.get)
    assert adapted["KNN"].mean() == pytest.approx(reference["KNN"].mean(), abs=0.02)
    assert adapted["KNN"].std() == pytest.approx(reference["KNN"].std(), rel=0.05)


def test_half_new_content_moves_lows_location_far_less_than_the_means():
    """A camera whose stored images are half new content (scored well above its normal
    ones): the mean's location climbs toward the new content, `low`'s stays near the
    normal images'."""
    rng = np.random.default_rng(9)
    fit = knn_moments({"KNN": np.sort(rng.normal(1.0, 0.2, 2000))})
    normal = rng.normal(1.5, 0.2, 300)
    scores = np.concatenate([normal, rng.normal(2.5, 0.2, 300)])
    clean_low, _ = _camera_location("low:16", fit, normal)
    mixed_low, _ = _camera_location("low:16", fit, scores)
    clean_mean, _ = _camera_location("camera:16", fit, normal)
    mixed_mean, _ = _camera_location("camera:16", fit, scores)
    assert mixed_mean[0] - clean_mean[0] > 0.4
    assert mixed_low[0] - clean_low[0] < 0.2


def test_low_with_rows_keeps_a_cameras_first_rows_only():
    rng = np.random.default_rng(10)
    fit = knn_moments({"KNN": np.sort(rng.normal(1.0, 0.1, 500))})
    adaptation = parse_score_adaptation("low:4:16")
    stats = EnvStatistics(None, adaptation.dim(1))
    scores = {"KNN": np.concatenate([rng.normal(2.0, 0.1, 16), np.full(20, 9.0)])}
    keep, rows = adaptation.observations(scores, fit, ["KNN"], ["c"] * 36, stats.get)
    assert keep.tolist() == [True] * 16 + [False] * 20
    assert adaptation.rows_per_camera == 16


def test_a_bundle_with_another_adaptation_shares_its_calibrations(monkeypatch):
    """`adapting` scores as a plain copy with that adaptation does, without building
    the calibrations and the reference moments again."""
    from dataclasses import replace

    from envad.server.detectors.calibration import Calibration

    rng = np.random.default_rng(11)
    bundle = fit_bundle(rng.normal(size=(300, 6)), FitSpec(detectors=("KNN", "PCA")))
    X, envs = rng.normal(size=(40, 6)) + 0.5, np.array(["new"] * 40)
    bundle.score_stream(X, envs)                  # builds the calibrations once
    built = []
    original = Calibration.of.__func__
    monkeypatch.setattr(Calibration, "of", classmethod(
        lambda cls, *args: built.append(args) or original(cls, *args)))
    adaptation = parse_score_adaptation("frozen:8")
    shared = bundle.adapting(adaptation).score_stream(X, envs)
    assert built == []
    plain = replace(bundle, score_adaptation=adaptation).score_stream(X, envs)
    assert len(built) == 2                         # a plain copy builds its own
    for name in bundle.detectors:
        np.testing.assert_array_equal(shared.adapted[name], plain.adapted[name])
    np.testing.assert_array_equal(shared.ensemble, plain.ensemble)


def test_shift_moves_a_cameras_scores_onto_the_fit_location_and_keeps_their_spread():
    """`+shift`: a camera's scores are moved by the difference of its location and the
    fit set's, never rescaled: the distances between a camera's scores stay as they are,
    where the full map rescales them by the camera's spread (pooled with the prior's)."""
    rng = np.random.default_rng(11)
    reference = {"KNN": np.sort(rng.normal(1.0, 0.2, 2000))}
    fit = knn_moments(reference)
    first = rng.normal(3.0, 0.01, 64)                  # a camera's first images, alike
    later = np.array([3.0, 3.2, 4.0])
    for spec, spread in (("frozen:16", None), ("frozen:16+shift", 1.0)):
        adaptation = parse_score_adaptation(spec)
        stats = EnvStatistics(None, adaptation.dim(1))
        stats.update(np.array(["c"] * 64), adaptation.statistics_of({"KNN": first}, ["KNN"]))
        adapted, _ = adaptation.adapt({"KNN": later}, fit, ["KNN"], ["c"] * 3, stats.get)
        gaps = np.diff(adapted["KNN"]) / np.diff(later)
        if spread is None:
            assert (np.abs(gaps - 1.0) > 0.5).all()    # rescaled by the camera's spread
        else:
            np.testing.assert_allclose(gaps, spread)   # moved, not stretched
            location = (64 * first.mean() + 16 * reference["KNN"].mean()) / 80
            assert adapted["KNN"][0] == pytest.approx(
                reference["KNN"].mean() + 3.0 - location)
