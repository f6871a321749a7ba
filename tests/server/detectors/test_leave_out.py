"""Fit rows' groups (server/detectors/leave_out.py): membership, persistence arrays, and
what a bundle fitted with ids does when it scores its own rows (the event rule itself:
tests/test_event_rule.py)."""

from __future__ import annotations

import numpy as np
import pytest
from event_times import times
from sklearn.metrics import roc_auc_score

from envad.errors import InvalidInput
from envad.server.detectors import registry
from envad.server.detectors.bundle import FitSpec, fit_bundle
from envad.server.detectors.leave_out import (
    CROSS_FIT_FOLDS,
    NO_GROUP,
    FitGroups,
    cross_fit_folds,
    fit_groups_of,
)


def test_groups_look_up_ids_and_know_their_fit_rows():
    # codes are renumbered 0..groups-1 in their order (5 -> 0, 7 -> 1)
    groups = FitGroups.of_members(["r3", "r1", "r2"], [7, 5, 7], 60).with_fit_rows(["r2", "r1"])
    assert groups.codes_of(["r1", "r3", "unknown", "r2"]).tolist() == [0, 1, NO_GROUP, 1]
    assert groups.fit_codes.tolist() == [1, 0]
    assert groups.leave_out(["unknown", "other"]) is None     # no member: nothing to do
    assert groups.leave_out(None) is None
    codes, fit_codes = groups.leave_out(["r3", "unknown"])
    assert codes.tolist() == [1, NO_GROUP] and fit_codes.tolist() == [1, 0]
    assert "<= 60 s apart): 3 rows in 2 events, largest 2" in groups.describe()
    assert FitGroups.of_members(["a"], [0], 0).describe() == (
        "scoring a fit row leaves that row out (1 rows)")
    again = FitGroups.from_arrays(groups.arrays())
    assert again.codes_of(["r3"]).tolist() == [1] and again.gap_s == 60.0
    assert again.fit_codes.tolist() == [1, 0]


def test_groups_refuse_repeated_ids_and_unknown_fit_rows():
    with pytest.raises(InvalidInput, match="repeat"):
        FitGroups.of_members(["a", "a"], [0, 1], 60)
    with pytest.raises(InvalidInput, match="not among"):
        FitGroups.of_members(["a"], [0], 60).with_fit_rows(["b"])


def test_a_sampled_fit_keeps_the_other_frames_of_its_rows_events():
    ids = ["s0", "s1", "s2", "s3", "s4"]
    envs = ["a"] * 5
    # s0-s2 one event, s3 and s4 one each; only s1 and s3 were sampled
    groups = fit_groups_of(ids, envs, times(0, 5, 10, 500, 1000), ["s1", "s3"], 60)
    assert groups.ids.tolist() == ["s0", "s1", "s2", "s3"]
    codes = groups.codes_of(ids)
    assert codes[0] == codes[1] == codes[2] != codes[3] and codes[4] == NO_GROUP


def burst_archive(seed=0):
    """400 normal rows and a burst of 12 near-identical frames far from them."""
    rng = np.random.default_rng(seed)
    normal = rng.normal(size=(400, 16))
    burst = 3.0 + rng.normal(scale=0.01, size=(12, 16))
    X = np.concatenate([normal, burst])
    ids = np.array([f"row-{n}" for n in range(len(X))])
    codes = np.arange(len(X))
    codes[400:] = 400
    return X, ids, codes, np.r_[np.zeros(400), np.ones(12)]


def test_a_burst_fitted_on_hides_from_knn_and_kde_unless_its_event_is_left_out():
    X, ids, codes, positive = burst_archive()
    detectors = ["KNN", "KDE"]

    def aucs(bundle, query_ids):
        scores = bundle.score(X, ids=query_ids)
        return {n: roc_auc_score(positive, scores.raw[n]) for n in detectors}

    without = aucs(fit_bundle(X, FitSpec(detectors=tuple(detectors))), None)
    alone = aucs(fit_bundle(X, FitSpec(detectors=tuple(detectors)), ids=ids), ids)
    events = fit_bundle(X, FitSpec(detectors=tuple(detectors)), ids=ids,
                        groups=FitGroups.of_members(ids, codes, 60))
    assert max(without.values()) < 0.5 and max(alone.values()) < 0.5
    assert min(aucs(events, ids).values()) > 0.99
    # the calibration part was scored the same way: the burst's frames held out for
    # calibration are far from every fit row outside their event
    assert events.score(X, ids=ids).ensemble[400:].min() > 0.9


def near_burst_archive(seed=0):
    """400 normal rows in 8 dimensions and a burst of 20 near-identical frames (5%) five
    standard deviations out along one axis: a lone frame there is far from every normal
    row, the burst together is a dense cluster."""
    rng = np.random.default_rng(seed)
    burst = np.zeros(8)
    burst[0] = 5.0
    X = np.concatenate([rng.normal(size=(400, 8)),
                        burst + rng.normal(scale=0.01, size=(20, 8))])
    ids = np.array([f"row-{n}" for n in range(len(X))])
    codes = np.arange(len(X))
    codes[400:] = 400
    return X, ids, codes, np.r_[np.zeros(400), np.ones(20)]


CROSS_FITTED = ("OCSVM", "LOF5", "INNE", "PCA")


def test_detectors_that_cannot_leave_rows_out_are_cross_fitted_on_events():
    """OCSVM, LOF, INNE and PCA have no leave-out of their own: fitted with the burst's
    event, a fit that never saw the event scores its frames (they stand out); fitted
    with each row its own group, every fold saw most of the burst (it hides)."""
    X, ids, codes, positive = near_burst_archive()
    spec = FitSpec(detectors=CROSS_FITTED)
    events = fit_bundle(X, spec, ids=ids, groups=FitGroups.of_members(ids, codes, 60))
    alone = fit_bundle(X, spec, ids=ids)
    for name in CROSS_FITTED:
        assert not events.fitted[name].leaves_out
        assert len(events.fitted[name].folds_) == CROSS_FIT_FOLDS
    by_event = events.score(X, ids=ids)
    by_row = alone.score(X, ids=ids)
    for name in CROSS_FITTED:
        assert roc_auc_score(positive, by_event.raw[name]) > 0.95, name
    for name in ("OCSVM", "LOF5"):
        assert roc_auc_score(positive, by_row.raw[name]) < 0.6, name
    # the same images as new ones (ids that are no fit rows) are scored by the whole
    # fit, which saw the burst: as without ids
    as_new = events.score(X, ids=[f"new-{n}" for n in range(len(X))])
    without_ids = events.score(X)
    for name in CROSS_FITTED:
        np.testing.assert_array_equal(as_new.raw[name], without_ids.raw[name])
    assert roc_auc_score(positive, as_new.raw["OCSVM"]) < 0.6


def test_a_fold_too_small_to_fit_keeps_its_groups_on_the_whole_fit():
    """Every fit row in one group: its fold's other rows are none, so that fold is not
    fitted and the group is scored by the whole fit; the other folds leave no row out
    (they would be the whole fit again) and are not fitted either."""
    X = np.random.default_rng(2).normal(size=(60, 4))
    codes = np.zeros(60, dtype=np.int64)
    detector = registry.Detector("OCSVM").fit(X, codes)
    assert detector.folds_ == [None] * CROSS_FIT_FOLDS
    np.testing.assert_array_equal(detector.score(X[:9], (codes[:9], codes)),
                                  detector.score(X[:9]))
    with pytest.raises(InvalidInput, match="59 group codes for 60 rows"):
        registry.Detector("OCSVM").fit(X, codes[:59])


def test_only_folds_that_leave_groups_out_are_fitted():
    """Two groups, four folds: folds 0 and 1 leave a group out and are fitted on the other
    group; folds 2 and 3 hold no group and are not fitted."""
    X = np.random.default_rng(3).normal(size=(60, 4))
    codes = np.repeat(np.arange(2, dtype=np.int64), 30)
    detector = registry.Detector("OCSVM").fit(X, codes)
    assert [fold is None for fold in detector.folds_] == [False, False, True, True]
    without_group_0 = registry.Detector("OCSVM").fit(X[30:])
    np.testing.assert_array_equal(detector.score(X[:5], (codes[:5], codes)),
                                  without_group_0.score(X[:5]))


def test_cross_fit_folds_spread_consecutive_groups():
    assert cross_fit_folds(np.arange(9)).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0]


def test_queries_that_are_no_fit_rows_score_as_without_ids():
    """New images get the same raw scores; with each row its own group the calibration
    part (held out, so nothing of its group is in the fit part) is unchanged too, and
    so is every calibrated score. With events, held-out frames whose event has fit rows
    are scored without them, so the calibration changes (the test above)."""
    X, ids, codes, _ = burst_archive(seed=1)
    queries = np.random.default_rng(5).normal(size=(30, 16))
    new_ids = [f"new-{n}" for n in range(30)]
    plain = fit_bundle(X, FitSpec(detectors=("KNN", "KDE", "PCA"))).score(queries)
    alone = fit_bundle(X, FitSpec(detectors=("KNN", "KDE", "PCA")), ids=ids).score(queries,
                                                                                   ids=new_ids)
    events = fit_bundle(X, FitSpec(detectors=("KNN", "KDE", "PCA")), ids=ids,
                        groups=FitGroups.of_members(ids, codes, 60)).score(queries, ids=new_ids)
    for name in ("KNN", "KDE", "PCA"):
        np.testing.assert_array_equal(alone.raw[name], plain.raw[name])
        np.testing.assert_array_equal(events.raw[name], plain.raw[name])
    np.testing.assert_array_equal(alone.ensemble, plain.ensemble)


def test_ids_must_match_the_rows():
    X = np.random.default_rng(0).normal(size=(50, 4))
    with pytest.raises(InvalidInput, match="49 ids for 50 rows"):
        fit_bundle(X, FitSpec(detectors=("KNN",)), ids=[str(n) for n in range(49)])
    with pytest.raises(InvalidInput, match="need the fit rows' ids"):
        fit_bundle(X, FitSpec(detectors=("KNN",)), groups=FitGroups.of_members(["a"], [0], 60))
