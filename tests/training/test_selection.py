"""`envad select`: folds, the fold scorer, the choosable detector sets, a tiny run."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.pipeline import Pipeline, resolve_pipeline
from envad.server.detectors import registry
from envad.training.data import load_folder
from envad.training.selection import (
    ARCHIVE_MIXES,
    ARCHIVE_SCORING,
    BURST_JITTER,
    ENSEMBLE_PREFIX,
    ORDER_SETS,
    POOLED_MIXES,
    SCORE_ADAPTATION_CANDIDATES,
    SPACE_CANDIDATES,
    TIE_MARGIN,
    QuerySet,
    SelectionSettings,
    archive_fit,
    archive_sets,
    choosable_scorers,
    choose,
    fold_criterion,
    format_selection,
    in_bursts,
    make_folds,
    mix_rows,
    order_lines,
    pick_adaptation,
    pick_best,
    pooled_means,
    reduced_fold,
    run_selection,
    score_fold,
    scorer_keys,
    selection_detectors,
    spaces_to_score,
    subsample,
    summarise,
    with_spaces,
)

#: the score adaptations of the tests whose subject is not the adaptation's choice
FEW_ADAPTATIONS = ("none", "frozen:64")
#: the detectors of the tests whose subject is not the detectors (the costly fits, the
#: isolation forests' hundred trees each, are left to the tiny selection's test)
FEW_DETECTORS = ("KNN", "KDE", "NORM")


def test_folds_are_seeded_and_use_cameras_and_classes_evenly(tiny_photodigits):
    ds = load_folder(tiny_photodigits)
    folds = make_folds(ds, 6, seed=0)
    assert folds == make_folds(ds, 6, seed=0) and folds != make_folds(ds, 6, seed=1)
    assert sorted(f.env for f in folds) == ds.envs("train")
    assert sorted(f.label for f in folds) == ["0", "1", "2", "3", "4", "5"]


def test_score_fold_finds_a_held_out_class_and_scores_every_set():
    rng = np.random.default_rng(0)
    envs = np.repeat(["a", "b", "c"], 60)
    X_fit = rng.normal(size=(180, 16)) + np.repeat(rng.normal(scale=3, size=(3, 16)), 60, 0)
    query = rng.normal(size=(40, 16)) + 7.0
    positive = np.zeros(40, dtype=bool)
    positive[:4] = True
    query[:4, 0] += 12.0                                     # new content
    out = score_fold(X_fit, envs, QuerySet(query, np.array(["new"] * 40), positive),
                     spaces=("raw", "center_l2"))
    assert set(out) == {"scores"}
    scores = out["scores"]
    assert set(scores) == {"raw", "center_l2"}
    assert scores["raw"]["KNN"] > 0.95
    assert max(scores["center_l2"][name] for name in registry.names()) > 0.95
    assert all(0.0 <= v <= 1.0 for row in scores.values() for v in row.values())
    n = len(registry.names())
    assert len([k for k in scores["raw"] if k.startswith(ENSEMBLE_PREFIX)]) == 2 ** n - 1


def test_score_fold_scores_the_pooled_set_under_each_score_adaptation():
    rng = np.random.default_rng(1)
    envs = np.repeat(["a", "b"], 100)
    X_fit = rng.normal(size=(200, 8))
    # the pooled set: a seen camera and an unseen one whose style shifts every embedding
    X, pooled_envs, positive = [], [], []
    for env, offset in (("a", 0.0), ("new", 3.0)):
        X += [rng.normal(size=(90, 8)) + offset, rng.normal(size=(30, 8)) * 2.5 + offset]
        pooled_envs += [env] * 120
        positive += [False] * 90 + [True] * 30
    order = rng.permutation(240)
    pooled = QuerySet(np.concatenate(X)[order], np.array(pooled_envs)[order],
                      np.array(positive)[order])
    new = pooled.envs == "new"
    query = QuerySet(pooled.X[new], pooled.envs[new], pooled.positive[new])
    out = score_fold(X_fit, envs, query, {"natural": pooled}, spaces=("raw",))
    assert set(out["pooled"]["natural"]["raw"]) == set(SCORE_ADAPTATION_CANDIDATES)
    knn = {a: row["KNN"] for a, row in out["pooled"]["natural"]["raw"].items()}
    assert knn["none"] + 0.1 < knn["camera:16"]
    # the held-out camera alone is ranked without adaptation
    assert out["scores"]["raw"]["KNN"] > 0.7


def _clusters(rng, centres: np.ndarray, n_per_class: int) -> np.ndarray:
    return np.concatenate([c + rng.normal(size=(n_per_class, centres.shape[1]))
                           for c in centres])


def test_in_bursts_repeats_each_kept_anomaly_as_near_identical_frames():
    from envad.server.detectors.exact import neighbour_scale

    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 8)).astype(np.float32)
    positive = np.zeros(60, dtype=bool)
    positive[:9] = True
    query = QuerySet(X, np.array(["c"] * 60), positive)
    burst = in_bursts(query, 4, seed=0)
    assert len(burst.X) == 51 + 2 * 4 and burst.positive.sum() == 8
    assert in_bursts(query, 1, seed=0) is query
    np.testing.assert_array_equal(in_bursts(query, 4, seed=0).X, burst.X)     # seeded
    normals = {row.tobytes() for row in X[~positive]}
    assert {row.tobytes() for row in burst.X[~burst.positive]} == normals
    frames = burst.X[burst.positive]
    # every frame lies about BURST_JITTER x the neighbour scale from one of the two kept
    # anomalies, far closer than any two distinct rows
    scale = neighbour_scale(X)
    nearest = np.min(np.linalg.norm(frames[:, None] - X[None, :2], axis=-1), axis=1)
    assert np.all(nearest < 3 * BURST_JITTER * scale) and np.all(nearest > 0)
    assert np.median(nearest) > 0.5 * BURST_JITTER * scale
    # a burst's frames are one event, or with one_event=False an event each; normal
    # rows are events of their own
    events = burst.event_codes()
    assert len(np.unique(events[~burst.positive])) == 51
    assert len(np.unique(events[burst.positive])) == 2
    assert not set(events[burst.positive]) & set(events[~burst.positive])
    apart = in_bursts(query, 4, seed=0, one_event=False)
    np.testing.assert_array_equal(apart.X, burst.X)
    assert len(np.unique(apart.event_codes())) == len(apart.X)


def test_an_archive_fit_exposes_a_detector_that_finds_repeated_new_content_dense(
        monkeypatch):
    """Fitted on clean rows, KDE and KNN both find new content. Fitted on rows that
    include it (as `envad scan` fits an archive) and scored as Score scores fit rows
    (each row without its own event): bursts whose frames are one event are found by
    both; the same content seen in 4 separate events is called dense by KDE with a
    narrow bandwidth (0.25 x spacing, the factor clean fits alone chose) while KNN (5
    neighbours) still flags it, and the criterion ranks KNN first."""
    monkeypatch.setattr(registry, "KDE_BANDWIDTH_FACTOR", 0.25)
    rng = np.random.default_rng(5)
    centres = rng.normal(scale=6.0, size=(5, 16))             # four known classes, one new
    X_fit = _clusters(rng, centres[:4], 100)
    envs = np.repeat(["a", "b"], 200)
    camera = _clusters(rng, centres[:4], 50)
    new = _clusters(rng, centres[4:], 40)
    X = np.concatenate([camera, new])
    positive = np.concatenate([np.zeros(200, bool), np.ones(40, bool)])
    query = QuerySet(X, np.array(["new"] * 240), positive)
    archives = archive_sets(query, "new", seed=0)
    assert set(archives) == set(ARCHIVE_MIXES)
    out = score_fold(X_fit, envs, query, spaces=("raw",), archives=archives,
                     detectors=("KNN", "KDE"))
    assert set(out["archive"]) == set(ARCHIVE_MIXES)
    assert out["scores"]["raw"]["KDE"] > 0.95 and out["scores"]["raw"]["KNN"] > 0.95
    bursts = out["archive"]["2% in bursts of 4"]["raw"]
    assert bursts["KDE"] > 0.95 and bursts["KNN"] > 0.95
    # 10% of the camera's images: two bursts of 8 frames, each one event
    herd = archives["10% in bursts of 8"]
    assert herd.positive.sum() == 16 and len(np.unique(herd.event_codes()[herd.positive])) == 2
    herds = out["archive"]["10% in bursts of 8"]["raw"]
    assert herds["KDE"] > 0.95 and herds["KNN"] > 0.95
    repeated = out["archive"]["2% seen in 4 events"]["raw"]
    assert repeated["KDE"] < 0.5 < 0.9 < repeated["KNN"]
    fold = {"scores": out["scores"], "archive": out["archive"]}
    assert fold_criterion(fold, "raw", "KNN") > fold_criterion(fold, "raw", "KDE")
    archive = np.mean([out["archive"][mix]["raw"]["KDE"] for mix in ARCHIVE_MIXES])
    assert fold_criterion(fold, "raw", "KDE") == 0.5 * (out["scores"]["raw"]["KDE"] + archive)
    assert fold_criterion({"scores": out["scores"]}, "raw", "KDE") == out["scores"]["raw"]["KDE"]


def test_archive_fits_know_their_rows_events():
    X_fit = np.zeros((3, 2))
    archive = QuerySet(np.ones((4, 2)), np.array(["c"] * 4), np.array([0, 1, 1, 0], bool),
                       np.array([0, 1, 1, 2]))
    rows, envs, ids, codes = archive_fit(X_fit, np.array(["a"] * 3), archive)
    assert rows.shape == (7, 2) and envs.tolist() == ["a"] * 3 + ["c"] * 4
    assert ids.tolist() == [str(n) for n in range(7)]
    assert codes.tolist() == [0, 1, 2, 3, 4, 4, 5]


def test_a_mix_gives_each_camera_its_anomaly_share():
    envs = np.repeat(["held", "a", "b"], [400, 100, 100])
    positive = np.zeros(600, dtype=bool)
    positive[:60] = positive[400:420] = positive[500:520] = True
    for shares in ((0.5, 0.05), (0.05, 0.5)):
        rows = mix_rows(envs, positive, "held", shares, seed=0)
        assert (rows == mix_rows(envs, positive, "held", shares, seed=0)).all()
        assert (np.diff(rows) > 0).all()
        for env, share in (("held", shares[0]), ("a", shares[1]), ("b", shares[1])):
            mine = positive[rows][envs[rows] == env]
            assert abs(mine.mean() - share) < 0.02 and len(mine) >= 20
    assert (mix_rows(envs, positive, "held", None, seed=0) == np.arange(600)).all()


def test_score_adaptation_needs_a_margin_to_beat_none():
    means = {"none": {"mean": 0.80}, "camera:16": {"mean": 0.80 + TIE_MARGIN},
             "camera:64": {"mean": 0.79}}
    assert pick_adaptation(means) == "none"
    means["camera:64"]["mean"] = 0.80 + TIE_MARGIN + 0.001
    assert pick_adaptation(means) == "camera:64"
    assert pick_adaptation({"camera:16": {"mean": 0.5}}) == "camera:16"


def test_the_shipped_adaptation_keeps_a_tie_and_loses_to_a_margin():
    """A candidate within TIE_MARGIN of the shipped default's adaptation (what the folds'
    noise does when the worst condition is one no adaptation moves) does not replace it;
    one beyond the margin does; "none" still wins a tie first."""
    means = {"frozen:64": {"worst": 0.632, "mean": 0.67},
             "frozen:16+shift": {"worst": 0.632 + TIE_MARGIN / 2, "mean": 0.67},
             "camera:64": {"worst": 0.60, "mean": 0.69}}
    assert pick_adaptation(means, incumbent="frozen:64") == "frozen:64"
    assert pick_adaptation(means, incumbent="camera:16") == "frozen:16+shift"
    means["frozen:16+shift"]["worst"] = 0.632 + TIE_MARGIN + 0.001
    assert pick_adaptation(means, incumbent="frozen:64") == "frozen:16+shift"
    means["none"] = {"worst": 0.632 + TIE_MARGIN / 2, "mean": 0.6}
    assert pick_adaptation(means, incumbent="frozen:64") == "none"


def test_each_detector_set_is_scored_by_its_members_mean_in_order():
    """Every set's score is the mean of its members' calibrated scores, summed in
    registry order as the bundle's ensemble sums them (bit for bit), ranked for its AUC."""
    from envad.server.detectors.bundle import BundleScores
    from envad.training.metrics import roc_auc
    from envad.training.selection import _scorer_aucs, detector_sets

    rng = np.random.default_rng(4)
    names = ["IsoForest", "OCSVM", "KNN", "KDE"]
    positive = rng.random(60) < 0.3
    calibrated = {n: rng.random(60) + positive * rng.random() for n in names}
    adapted = {n: rng.normal(size=60) for n in names}
    aucs = _scorer_aucs(names, BundleScores(raw=adapted, calibrated=calibrated,
                                            ensemble=np.zeros(60), adapted=adapted),
                        positive)
    sets = detector_sets(names)
    assert list(aucs) == names + [ENSEMBLE_PREFIX + "+".join(c) for c in sets]
    for name in names:
        assert aucs[name] == roc_auc(positive, adapted[name])
    for combo in sets:
        total = np.zeros(60)
        for name in combo:
            total = total + calibrated[name] if name != combo[0] else calibrated[name]
        assert aucs[ENSEMBLE_PREFIX + "+".join(combo)] == roc_auc(positive,
                                                                 total / len(combo))


def test_choosable_scorers_are_singles_all_and_the_best_few():
    means = {name: float(i) for i, name in enumerate(registry.names())}   # NORM best
    family = choosable_scorers(means)
    n = len(registry.names())
    assert family[:n] == registry.names()
    assert ENSEMBLE_PREFIX + "+".join(registry.names()) in family
    assert ENSEMBLE_PREFIX + "KNN+KDE+NORM" in family and len(family) == n + 4


def test_folds_scored_before_a_detector_existed_are_summarised_without_it():
    old = {"KNN": 0.7, "KDE": 0.6, ENSEMBLE_PREFIX + "KNN+KDE": 0.65}
    folds = [{"fold": {"env": "a", "label": "0"}, "scores": {"l2": dict(old)}}] * 2
    ranking = summarise({"older": folds})
    assert ranking[0]["scorer"] == "KNN" and ranking[0]["mean"] == 0.7
    assert {r["scorer"] for r in ranking} == {"KNN", "KDE", ENSEMBLE_PREFIX + "KNN+KDE"}
    table = format_selection({"data": "d", "seed": 0, "size": 32, "folds": [],
                              "chosen": {}, "best": ranking[0]}, {"older": folds})
    assert "| older | l2 | 0.650 | 0.700 | KNN | 0.700 | 0.700 | nan | nan |" in table


def test_a_tiny_selection_writes_a_usable_pipeline(tmp_path, one_archive_set):
    """Every space and score adaptation; one archive set stands for all of them, and
    three detectors for all of them (score_fold's tests fit every one, in archive sets
    too)."""
    from envad.training.photodigits import generate

    archive_mixes = one_archive_set

    data = generate(tmp_path / "pd", 32, 0, progress=False, train_per_camera=60,
                    test_per_camera=10)
    candidates = {"erm-class": Pipeline(algorithm="erm", task="class", epochs=1)}
    summary = run_selection(str(data), candidates, tmp_path / "sel", n_folds=1,
                            size=16, progress=False, detectors=FEW_DETECTORS)
    fold = json.loads(next((tmp_path / "sel" / "folds").glob("*.json")).read_text())
    assert fold["n_positive"] > 0 and np.isfinite(summary["best"]["mean"])
    written = json.loads((tmp_path / "sel" / "selection.json").read_text())
    assert written["chosen"] == summary["chosen"]
    chosen = resolve_pipeline(str(tmp_path / "sel" / "selection.json"))
    assert chosen.algorithm == "erm" and chosen.task == "class"
    assert chosen.space in SPACE_CANDIDATES
    assert chosen.score_adaptation in SCORE_ADAPTATION_CANDIDATES
    assert set(summary["score_adaptation"]) == set(SCORE_ADAPTATION_CANDIDATES)
    assert set(fold["pooled"]) == set(POOLED_MIXES)
    assert all(set(fold["pooled"][mix][chosen.space]) == set(SCORE_ADAPTATION_CANDIDATES)
               for mix in POOLED_MIXES)
    assert fold["n_pooled"]["natural"] > fold["n_query"]
    assert set(fold["archive"]) == set(archive_mixes)
    assert all(set(fold["archive"][mix]) == set(SPACE_CANDIDATES) for mix in archive_mixes)
    # every arrival order of the natural mix and of the new-heavy one
    assert set(fold["orders"]) == set(ORDER_SETS)
    assert {"normal-first", "new-heavy normal-first"} <= set(fold["orders"])
    assert set(summary["score_adaptation"]["none"]["orders"]) == set(ORDER_SETS)
    assert np.isfinite(summary["best"]["clean"]) and np.isfinite(summary["best"]["archive"])
    assert set(summary["score_adaptation"]["none"]["mixes"]) == set(POOLED_MIXES)
    report = (tmp_path / "sel" / "selection.md").read_text()
    assert "| erm-class |" in report and "| score adaptation |" in report
    assert "| detector | clean | archive 10% in bursts of 8 |" in report
    again = run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                          progress=False, detectors=FEW_DETECTORS)  # resumes from folds/
    assert again["chosen"] == summary["chosen"]
    assert {k: again["best"][k] for k in ("candidate", "space", "scorer")} == \
        {k: summary["best"][k] for k in ("candidate", "space", "scorer")}


def test_a_finished_fold_is_rescored_for_a_new_space_with_its_cached_encoder(
        tmp_path, one_archive_set, monkeypatch):
    """What is rescored is the subject here, not the archive sets: one stands for all."""
    from envad.training import selection
    from envad.training.photodigits import generate

    scored_in = []                        # the spaces of each fold run, as they are asked
    real_run_fold = selection.run_fold

    def recording_run_fold(*args, **kwargs):
        scored_in.append(kwargs["spaces"])
        return real_run_fold(*args, **kwargs)

    monkeypatch.setattr(selection, "run_fold", recording_run_fold)

    archive_mixes = one_archive_set

    data = generate(tmp_path / "pd", 32, 0, progress=False, train_per_camera=60,
                    test_per_camera=10)
    candidates = {"erm-class": Pipeline(algorithm="erm", task="class", epochs=1)}
    # spaces, detector settings and archive sets are what is rescored here: two score
    # adaptations stand for the defaults (test_a_tiny_selection_writes_a_usable_pipeline
    # scores every one)
    first = run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                          progress=False, spaces=("l2",), score_adaptations=FEW_ADAPTATIONS,
                          detectors=FEW_DETECTORS)
    assert {r["space"] for r in first["ranking"]} == {"l2"}
    encoder = next((tmp_path / "sel" / "runs").glob("*/encoder.onnx"))
    trained_at = encoder.stat().st_mtime_ns
    second = run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                           progress=False, spaces=("l2", "white_l2"),
                           score_adaptations=FEW_ADAPTATIONS, detectors=FEW_DETECTORS)
    assert {r["space"] for r in second["ranking"]} == {"l2", "white_l2"}
    assert encoder.stat().st_mtime_ns == trained_at            # not trained again
    assert scored_in == [("l2",), ("white_l2",)]              # only the space it lacked
    fold = json.loads(next((tmp_path / "sel" / "folds").glob("*.json")).read_text())
    assert set(fold["scores"]) == {"l2", "white_l2"}
    assert all(set(fold[sets][mix]) == {"l2", "white_l2"}
               for sets in ("pooled", "orders", "archive") for mix in fold[sets])
    l2 = [r for r in second["ranking"] if r["space"] == "l2" and r["scorer"] == "KNN"]
    assert l2[0]["mean"] == [r for r in first["ranking"]
                             if r["space"] == "l2" and r["scorer"] == "KNN"][0]["mean"]
    # a detector whose settings changed since: the fold is scored again, not retrained
    stale = next((tmp_path / "sel" / "folds").glob("*.json"))
    saved = json.loads(stale.read_text())
    saved["detector_settings"]["KDE"]["params"]["bandwidth"] = 1.0
    saved["scores"]["l2"]["KDE"] = -1.0
    stale.write_text(json.dumps(saved))
    again = run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                          progress=False, spaces=("l2", "white_l2"),
                          score_adaptations=FEW_ADAPTATIONS, detectors=FEW_DETECTORS)
    assert encoder.stat().st_mtime_ns == trained_at
    assert scored_in[-1] == ("l2", "white_l2")               # every space, settings changed
    rescored = json.loads(stale.read_text())
    assert rescored["scores"]["l2"]["KDE"] >= 0.0
    assert rescored["detector_settings"]["KDE"]["params"]["bandwidth"] is None
    # a fold scored before archive sets existed: scored again, not retrained
    del rescored["archive"]
    stale.write_text(json.dumps(rescored))
    run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                  progress=False, spaces=("l2", "white_l2"), score_adaptations=FEW_ADAPTATIONS,
                  detectors=FEW_DETECTORS)
    assert encoder.stat().st_mtime_ns == trained_at
    assert set(json.loads(stale.read_text())["archive"]) == set(archive_mixes)
    assert {r["space"] for r in again["ranking"]} == {"l2", "white_l2"}
    # asking for fewer spaces reuses the fold as it is and ranks only those
    third = run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                          progress=False, spaces=("white_l2",),
                          score_adaptations=FEW_ADAPTATIONS, detectors=FEW_DETECTORS)
    assert {r["space"] for r in third["ranking"]} == {"white_l2"}
    assert set(third["score_adaptation"]) == set(FEW_ADAPTATIONS)
    # fewer detectors: the fold is reused as it is and only their sets are ranked
    runs = len(scored_in)
    fewer = run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                          progress=False, spaces=("l2", "white_l2"),
                          score_adaptations=FEW_ADAPTATIONS, detectors=("NORM", "KNN"))
    assert len(scored_in) == runs
    assert {r["scorer"] for r in fewer["ranking"]} == {"KNN", "NORM",
                                                       ENSEMBLE_PREFIX + "KNN+NORM"}
    assert fewer["detectors"] == ["KNN", "NORM"]                # in registry order
    assert "detectors KNN, NORM only" in (tmp_path / "sel" / "selection.md").read_text()
    # a detector the fold was not scored by: every space is scored again with it
    run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                  progress=False, spaces=("l2", "white_l2"), score_adaptations=FEW_ADAPTATIONS,
                  detectors=FEW_DETECTORS + ("PCA",))
    assert scored_in[-1] == ("l2", "white_l2") and encoder.stat().st_mtime_ns == trained_at
    assert "PCA" in json.loads(stale.read_text())["scores"]["white_l2"]
    # more score adaptations: the fold is scored again, not retrained, and the added ones
    # are chosen among
    added = ("low:64:256", "frozen:64+unseen")
    more = run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                         progress=False, spaces=("white_l2",),
                         score_adaptations=FEW_ADAPTATIONS + added,
                         detectors=FEW_DETECTORS)
    assert encoder.stat().st_mtime_ns == trained_at
    assert set(more["score_adaptation"]) == set(FEW_ADAPTATIONS + added)
    assert set(added) <= set(json.loads(stale.read_text())["pooled"]["natural"]["white_l2"])
    # detectors fitted on fewer rows: a fold of its own, the same encoder
    few = run_selection(str(data), candidates, tmp_path / "sel", n_folds=1, size=16,
                        progress=False, spaces=("l2",), fit_rows=40,
                        score_adaptations=FEW_ADAPTATIONS, detectors=FEW_DETECTORS)
    assert encoder.stat().st_mtime_ns == trained_at
    small = json.loads(next((tmp_path / "sel" / "folds").glob("*-fit40.json")).read_text())
    assert small["n_fit"] == 40 and fold["n_fit"] > 40
    assert few["fit_rows"] == 40
    assert "detectors fitted on 40 rows per fold" in (tmp_path / "sel" / "selection.md").read_text()


def test_a_space_added_to_a_fold_keeps_what_the_fold_held():
    held = {"n_fit": 40, "scores": {"l2": {"KNN": 0.7}},
            "pooled": {"natural": {"l2": {"none": {"KNN": 0.6}}}},
            "archive": {"2%": {"l2": {"KNN": 0.5}}, "5%": {"l2": {"KNN": 0.4}}}}
    added = {"n_fit": 40, "scores": {"white_l2": {"KNN": 0.8}},
             "pooled": {"natural": {"white_l2": {"none": {"KNN": 0.9}}}},
             "archive": {"2%": {"white_l2": {"KNN": 0.3}}}, "orders": {}}
    merged = with_spaces(held, added)
    assert merged["scores"] == {"l2": {"KNN": 0.7}, "white_l2": {"KNN": 0.8}}
    assert merged["pooled"]["natural"] == {"l2": {"none": {"KNN": 0.6}},
                                           "white_l2": {"none": {"KNN": 0.9}}}
    assert merged["archive"] == {"2%": {"l2": {"KNN": 0.5}, "white_l2": {"KNN": 0.3}},
                                 "5%": {"l2": {"KNN": 0.4}}}
    assert held["scores"] == {"l2": {"KNN": 0.7}}                # not changed in place


def test_a_score_adaptation_that_does_not_parse_fails_before_any_training(tmp_path):
    with pytest.raises(InvalidInput, match="score adaptation"):
        run_selection(str(tmp_path / "no-data"), {}, tmp_path / "sel",
                      score_adaptations=("none", "frozen:64:x"))
    assert not (tmp_path / "sel").exists()


def test_a_space_that_does_not_parse_fails_before_any_training(tmp_path):
    with pytest.raises(InvalidInput, match="unknown space 'white'"):
        run_selection(str(tmp_path / "no-data"), {}, tmp_path / "sel",
                      spaces=("l2", "white"))
    assert not (tmp_path / "sel").exists()


def test_a_selection_chooses_among_every_registered_detector_unless_told():
    assert SelectionSettings().detectors == tuple(registry.names())
    assert selection_detectors(None) == selection_detectors(()) == tuple(registry.names())
    assert selection_detectors(["NORM", "IsoForest"]) == ("IsoForest", "NORM")


def test_an_unknown_detector_fails_before_any_training(tmp_path):
    with pytest.raises(InvalidInput, match="unknown detector 'KNNN'; known: IsoForest"):
        run_selection(str(tmp_path / "no-data"), {}, tmp_path / "sel",
                      detectors=("KNN", "KNNN"))
    assert not (tmp_path / "sel").exists()


def _scored_fold(detectors: tuple[str, ...], spaces=("l2",)) -> dict:
    """A complete fold result (every mix, order and archive set) scored by `detectors`
    with today's settings, each scorer's AUC 0.5."""
    keys = dict.fromkeys(scorer_keys(detectors), 0.5)
    per_space = {space: dict(keys) for space in spaces}
    return {"detector_settings": registry.settings_of(detectors),
            "archive_scoring": ARCHIVE_SCORING, "scores": per_space,
            "archive": {mix: {s: dict(keys) for s in spaces} for mix in ARCHIVE_MIXES},
            **{sets: {mix: {s: {a: dict(keys) for a in FEW_ADAPTATIONS} for s in spaces}
                      for mix in mixes}
               for sets, mixes in (("pooled", POOLED_MIXES), ("orders", ORDER_SETS))}}


def test_a_fold_scored_by_more_detectors_is_complete_for_fewer_and_ranks_only_theirs():
    fold = _scored_fold(("KNN", "KDE", "NORM"), spaces=("l2", "white_l2"))
    fewer = SelectionSettings(spaces=("l2", "white_l2"), score_adaptations=FEW_ADAPTATIONS,
                              detectors=("KNN", "NORM"))
    assert spaces_to_score(fold, fewer) == ()
    more = replace(fewer, detectors=("PCA", "KNN", "NORM"))
    assert spaces_to_score(fold, more) == ("l2", "white_l2")
    # a space scored since by the fewer detectors alone lacks the others
    fold["scores"]["white_l2"] = {"KNN": 0.5, "NORM": 0.5, ENSEMBLE_PREFIX + "KNN+NORM": 0.5}
    every = replace(fewer, detectors=("KNN", "KDE", "NORM"))
    assert spaces_to_score(fold, every) == ("white_l2",)
    reduced = reduced_fold(_scored_fold(("KNN", "KDE", "NORM")), ("l2",), FEW_ADAPTATIONS,
                           ("KNN", "NORM"))
    wanted = set(scorer_keys(("KNN", "NORM")))
    assert ENSEMBLE_PREFIX + "KNN+NORM" in wanted and not any("KDE" in k for k in wanted)
    assert set(reduced["scores"]["l2"]) == wanted
    assert all(set(reduced["archive"][mix]["l2"]) == wanted for mix in ARCHIVE_MIXES)
    assert all(set(reduced[sets][mix]["l2"][a]) == wanted
               for sets in ("pooled", "orders") for mix in reduced[sets]
               for a in FEW_ADAPTATIONS)


def test_a_tie_goes_to_the_candidate_that_trains_fewer_epochs():
    candidates = {"long": Pipeline(epochs=30), "short": Pipeline(epochs=15)}
    ranking = [{"candidate": "long", "space": "l2", "scorer": "KNN", "mean": 0.758},
               {"candidate": "short", "space": "l2", "scorer": "KNN", "mean": 0.754},
               {"candidate": "short", "space": "raw", "scorer": "KNN", "mean": 0.700}]
    assert pick_best(ranking, candidates)["candidate"] == "short"
    ranking[1]["mean"] = 0.758 - TIE_MARGIN - 0.001              # a real gap: the best wins
    assert pick_best(ranking, candidates)["candidate"] == "long"
    ranking[0]["mean"] = float("nan")                            # nothing finite: the first
    assert pick_best(ranking[:1], candidates)["candidate"] == "long"


def test_subsample_is_seeded_ordered_and_keeps_everything_when_asked_for_more():
    indices = np.arange(100, 200)
    picked = subsample(indices, 10, 0)
    assert len(picked) == 10 and list(picked) == sorted(picked)
    assert set(picked) <= set(indices)
    np.testing.assert_array_equal(picked, subsample(indices, 10, 0))
    assert not np.array_equal(picked, subsample(indices, 10, 1))
    np.testing.assert_array_equal(subsample(indices, None, 0), indices)
    np.testing.assert_array_equal(subsample(indices, 500, 0), indices)


def test_archive_sets_without_an_anomaly_leave_the_clean_value():
    fold = {"scores": {"l2": {"KNN": 0.8}},
            "archive": {"2%": {"l2": {"KNN": float("nan")}}, "5%": {"l2": {"KNN": 0.6}}}}
    assert fold_criterion(fold, "l2", "KNN") == 0.5 * (0.8 + 0.6)
    fold["archive"]["5%"]["l2"]["KNN"] = float("nan")
    assert fold_criterion(fold, "l2", "KNN") == 0.8


def _fold_with_orders(aucs: dict[str, dict[str, float]]) -> dict:
    """A fold result holding only pooled and order AUCs of KNN in one space:
    {adaptation: {order: AUC}} (the pooled mix: each adaptation's shuffled AUC)."""
    space = "white_l2"
    orders = next(iter(aucs.values()))
    return {"pooled": {"natural": {space: {a: {"KNN": v["shuffled"]}
                                           for a, v in aucs.items()}}},
            "orders": {o: {space: {a: {"KNN": v[o]} for a, v in aucs.items()}}
                       for o in orders}}


def test_the_score_adaptation_is_chosen_by_its_worst_arrival_order():
    """Two adaptations: the one best when shuffled loses a run of new content that
    arrives after the normal images; the one that holds in every order is chosen."""
    folds = [_fold_with_orders({
        "none": {"shuffled": 0.70, "normal-first": 0.70},
        "camera:64": {"shuffled": 0.90 + d, "normal-first": 0.72 + d},
        "gated:16": {"shuffled": 0.86 + d, "normal-first": 0.84 + d}})
        for d in (0.0, 0.01)]
    means = pooled_means(folds, "white_l2", "KNN")
    assert means["camera:64"]["mean"] > means["gated:16"]["mean"]   # best shuffled
    assert means["gated:16"]["worst_order"] == pytest.approx(0.845)
    assert means["gated:16"]["worst"] == pytest.approx(0.845)
    assert means["camera:64"]["orders"]["normal-first"]["folds"] == pytest.approx([0.72, 0.73])
    assert pick_adaptation(means) == "gated:16"
    assert "| gated:16 | 0.845 | 0.845 |" in "\n".join(order_lines(means))


def test_a_mix_that_is_worse_than_every_order_decides_too():
    """The worst condition spans the anomaly-share mixes as well as the orders."""
    folds = [_fold_with_orders({
        "none": {"shuffled": 0.70, "normal-first": 0.70},
        "camera:64": {"shuffled": 0.86, "normal-first": 0.85},
        "frozen:16": {"shuffled": 0.88, "normal-first": 0.88}})]
    folds[0]["pooled"]["new-heavy"] = {"white_l2": {"none": {"KNN": 0.70},
                                                    "camera:64": {"KNN": 0.84},
                                                    "frozen:16": {"KNN": 0.80}}}
    means = pooled_means(folds, "white_l2", "KNN")
    assert means["frozen:16"]["worst_order"] > means["camera:64"]["worst_order"]
    assert means["frozen:16"]["worst"] == pytest.approx(0.80)
    assert pick_adaptation(means) == "camera:64"


def _pipeline_fold(clean: float, orders: dict[str, dict[str, float]]) -> dict:
    """A fold of one (space, KNN) pipeline: its clean and archive ROC-AUC `clean`, and
    its pooled ROC-AUC per adaptation and arrival order ({adaptation: {order: AUC}}),
    every value for KNN alone and its one-member ensemble."""
    def both(value: float) -> dict[str, float]:
        return {"KNN": value, ENSEMBLE_PREFIX + "KNN": value}
    fold = _fold_with_orders(orders)
    for sets in ("pooled", "orders"):
        for mix in fold[sets].values():
            mix["white_l2"] = {a: both(v["KNN"]) for a, v in mix["white_l2"].items()}
    return {"fold": {"env": "a", "label": "0"}, "scores": {"white_l2": both(clean)},
            "archive": {"5%": {"white_l2": both(clean)}}, **fold}


def test_a_pipeline_is_chosen_by_its_worst_arrival_order():
    """Two pipelines: the one best fitted clean and scored shuffled falls apart when a
    camera's new content arrives after its normal images; the one that holds in every
    order is chosen, and the summary says which adaptation and worst stream it has."""
    fragile = [_pipeline_fold(0.84, {"none": {"shuffled": 0.70, "normal-first": 0.70},
                                     "frozen:64": {"shuffled": 0.90, "normal-first": 0.69}})
               for _ in range(2)]
    steady = [_pipeline_fold(0.80, {"none": {"shuffled": 0.70, "normal-first": 0.70},
                                    "frozen:64": {"shuffled": 0.82, "normal-first": 0.80}})
              for _ in range(2)]
    ranking = summarise({"fragile": fragile, "steady": steady})
    by_name = {(r["candidate"], r["scorer"]): r for r in ranking}
    assert by_name["fragile", "KNN"]["mean"] > by_name["steady", "KNN"]["mean"]
    assert by_name["fragile", "KNN"]["stream"] == pytest.approx(0.70)     # `none` holds
    assert by_name["fragile", "KNN"]["score_adaptation"] == "none"
    assert by_name["steady", "KNN"]["stream"] == pytest.approx(0.80)
    assert by_name["steady", "KNN"]["score_adaptation"] == "frozen:64"
    assert by_name["steady", "KNN"]["criterion"] == pytest.approx(0.5 * (0.80 + 0.80))
    candidates = {"fragile": Pipeline(epochs=10), "steady": Pipeline(epochs=10)}
    assert pick_best(ranking, candidates)["candidate"] == "steady"
    chosen = choose(ranking, {"fragile": fragile, "steady": steady}, candidates)
    assert chosen["chosen"]["score_adaptation"] == "frozen:64"
    table = format_selection({"data": "d", "seed": 0, "size": 32, "folds": [], **chosen},
                             {"fragile": fragile, "steady": steady})
    assert "| steady | white_l2 | 0.800 | 0.800 | KNN | 0.800 | 0.800 | 0.800 | 0.800 |" in table
    assert "worst stream condition 0.800" in table
    # folds scored without pooled sets keep the fold criterion alone
    for fold in steady:
        del fold["pooled"], fold["orders"]
    assert summarise({"steady": steady})[0]["criterion"] == pytest.approx(0.80)


def test_a_selection_over_two_datasets_chooses_by_the_mean_over_all_their_folds(tmp_path):
    from envad.training.photodigits import generate

    digits = generate(tmp_path / "photodigits", 32, 0, progress=False, train_per_camera=60,
                      test_per_camera=10)
    shapes = generate(tmp_path / "shapes", 32, 0, progress=False, train_per_camera=60,
                      test_per_camera=10, recipe="shapes")
    candidates = {"erm-class": Pipeline(algorithm="erm", task="class", epochs=1)}
    out = tmp_path / "sel"
    summary = run_selection([str(digits), str(shapes)], candidates, out, n_folds=1,
                            size=16, progress=False, spaces=("l2",), jobs=2,
                            score_adaptations=FEW_ADAPTATIONS, detectors=FEW_DETECTORS)
    assert [d["tag"] for d in summary["datasets"]] == ["photodigits", "shapes"]
    assert summary["data"] == [str(digits), str(shapes)] and len(summary["folds"]) == 2
    shape_envs = {r.env for r in load_folder(shapes).records}
    assert summary["datasets"][1]["folds"][0]["env"] in shape_envs
    for tag in ("photodigits", "shapes"):               # each dataset's folds and runs
        assert len(list((out / "folds" / tag).glob("*.json"))) == 1
        assert len(list((out / "runs" / tag).glob("*/encoder.onnx"))) == 1
    best = summary["best"]
    per_dataset = best["datasets"]
    assert set(per_dataset) == {"photodigits", "shapes"}
    assert best["folds"] == per_dataset["photodigits"]["folds"] + per_dataset["shapes"]["folds"]
    assert best["mean"] == pytest.approx(np.mean([per_dataset[t]["mean"] for t in per_dataset]))
    report = (out / "selection.md").read_text()
    assert ("| candidate | space | set | criterion | mean fold criterion | photodigits | shapes |"
            in report)
    assert f"`{shapes}` (shapes): " in report
    # the parallel run left complete folds: a serial rerun trains and scores nothing
    encoders = sorted((out / "runs").glob("*/*/encoder.onnx"))
    trained_at = [e.stat().st_mtime_ns for e in encoders]
    fold_files = sorted((out / "folds").glob("*/*.json"))
    scored_at = [f.stat().st_mtime_ns for f in fold_files]
    again = run_selection([str(digits), str(shapes)], candidates, out, n_folds=1, size=16,
                          progress=False, spaces=("l2",), score_adaptations=FEW_ADAPTATIONS,
                          detectors=FEW_DETECTORS)
    assert [e.stat().st_mtime_ns for e in encoders] == trained_at
    assert [f.stat().st_mtime_ns for f in fold_files] == scored_at
    assert again["best"] == best and again["chosen"] == summary["chosen"]
    with pytest.raises(ValueError, match="jobs must be at least 1"):
        run_selection(str(digits), candidates, out, jobs=0)


def test_select_takes_several_datasets_and_jobs_on_the_command_line():
    from envad.client.cli import build_parser

    parsed = build_parser().parse_args(["select", "--data", "a", "--data", "b", "--jobs",
                                        "4", "--out", "x"])
    assert parsed.data == ["a", "b"] and parsed.jobs == 4
    one = build_parser().parse_args(["select", "--data", "a", "--out", "x"])
    assert one.data == ["a"] and one.jobs == 1 and one.detectors is None
    few = build_parser().parse_args(["select", "--data", "a", "--detectors", "KNN,NORM",
                                     "--out", "x"])
    assert few.detectors == ["KNN", "NORM"]


def test_a_camera_too_small_for_a_mix_gives_an_empty_archive_set_not_an_error():
    """30 normal images cannot hold one anomaly at a 2% share: every 2% mix (in bursts
    too) is empty, and scores as missing (the criterion leaves it out)."""
    rng = np.random.default_rng(0)
    positive = np.array([False] * 30 + [True] * 10)
    query = QuerySet(rng.normal(size=(40, 8)).astype(np.float32), np.array(["c"] * 40),
                     positive)
    sets = archive_sets(query, "c", seed=0)
    assert {mix: len(s.X) for mix, s in sets.items() if mix.startswith("2%")} == {
        mix: 0 for mix in ARCHIVE_MIXES if mix.startswith("2%")}
    assert sets["5%"].positive.sum() == 1


def test_a_mix_without_new_content_is_scored_as_missing_not_fitted():
    rng = np.random.default_rng(1)
    X_fit, envs = rng.normal(size=(60, 8)).astype(np.float32), np.array(["a", "b"] * 30)
    query = QuerySet(rng.normal(size=(40, 8)).astype(np.float32), np.array(["c"] * 40),
                     np.array([False] * 30 + [True] * 10))
    out = score_fold(X_fit, envs, query, spaces=("l2",), archives=archive_sets(query, "c", 0))
    empty = out["archive"]["2% in bursts of 4"]["l2"]            # every detector by default
    assert set(empty) == set(scorer_keys(registry.names()))
    assert all(np.isnan(v) for v in empty.values())
    assert not np.isnan(out["archive"]["5%"]["l2"]["KNN"])
