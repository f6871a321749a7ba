"""Smoke evaluation (32 px, 1 seed, 2 algorithms, 1 epoch) and its guarantees."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from envad.server.detectors import registry
from envad.training.data import load_dataset
from envad.training.evaluate import EvalConfig, choose_stylist_fraction, run_evaluation
from envad.training.protocol import ENSEMBLE, fit_indices

ALGORITHMS = ("random", "erm")      # the smoke report's (conftest.py)


def test_report_files_and_structure(smoke_report):
    config, out = smoke_report
    for name in ("table.md", "table.csv", "results.json", "heatmap.png", "mean_ad.png",
                 "roc.png", "camera_histograms.png"):
        assert (out / name).stat().st_size > 0, name
    table = (out / "table.md").read_text()
    assert "| detector | random | erm |" in table and "**Mean AD**" in table
    assert "random+Stylist" in table and "raw pixels" in table and "content oracle" in table
    assert "## Summary: Mean AD per pretraining" in table and "| ID pooled |" in table
    for row in registry.names() + [ENSEMBLE]:
        assert f"| {row} |" in table
    results = json.loads((out / "results.json").read_text())
    assert {(r["algorithm"], r["seed"]) for r in results["runs"]} == {("random", 0), ("erm", 0)}
    run = results["runs"][0]
    ood = run["variants"]["plain"]["ood"]
    assert set(ood) == set(registry.names()) | {ENSEMBLE}
    for scores in ood.values():
        assert 0.0 <= scores["pooled"] <= 1.0
        assert set(scores["per_camera"]) == {"cam-rocket", "cam-moon", "cam-coins"}
    assert 0.0 <= run["stylist"]["fraction"] < 1.0
    assert set(run["stylist"]["val_scores"]) == {str(f) for f in config.stylist_fractions}
    assert set(run["variants"]["plain"]["id"]) == set(ood)  # the ID reference beside OOD
    assert 0.0 <= run["training"]["val_knn_acc"] <= 1.0 and run["seconds"]["evaluate"] > 0
    assert run["machine"]["cpu_count"] >= 1
    assert set(results["references"]) == {"raw pixels", "content oracle"}
    with open(out / "table.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["algorithm"] for r in rows} == set(ALGORITHMS)
    assert {r["detector"] for r in rows} >= set(registry.names()) | {ENSEMBLE, "Mean AD"}


def test_pooled_auc_matches_scikit_learn_on_the_same_scores(smoke_report):
    _, out = smoke_report
    results = json.loads((out / "results.json").read_text())
    for run in results["runs"]:
        archive = np.load(out / "results" / f"{run['algorithm']}-s{run['seed']}.npz")
        for name, value in run["variants"]["plain"]["ood"].items():
            expected = roc_auc_score(archive["labels"], archive[f"score:{name}"])
            assert value["pooled"] == pytest.approx(expected, abs=1e-12)


def test_detectors_never_see_test_or_anomalous_images(tiny_photodigits):
    dataset = load_dataset(str(tiny_photodigits))
    idx = fit_indices(dataset)
    records = [dataset.records[i] for i in idx]
    assert records and all(r.split == "train" and not r.is_anomaly for r in records)
    assert not {r.env for r in records} & set(dataset.envs("test"))


def test_fit_rows_are_exactly_the_normal_train_rows(smoke_report_copy, monkeypatch):
    """Spy on embedding and bundle fitting inside a run: every detector fit receives the
    embeddings of the training cameras' normal `train` rows, and of nothing else."""
    import envad.training.evaluate as evaluate

    config, _ = smoke_report_copy                # the run writes in its copy
    dataset = load_dataset(config.data)
    embedded, fitted = [], []
    real_embed, real_fit = evaluate.embed, evaluate.fit_bundle

    def embed_spy(encoder, data, indices, *args, **kwargs):
        X = real_embed(encoder, data, indices, *args, **kwargs)
        embedded.append((np.asarray(indices).copy(), X))
        return X

    def fit_spy(X, *args, **kwargs):
        fitted.append(np.asarray(X))
        return real_fit(X, *args, **kwargs)

    monkeypatch.setattr(evaluate, "embed", embed_spy)
    monkeypatch.setattr(evaluate, "fit_bundle", fit_spy)
    evaluate.evaluate_run(config, dataset, "random", 0, progress=False)
    assert len(fitted) == 2  # plain and Stylist
    test_envs = set(dataset.envs("test"))
    for X in fitted:
        sources = [idx for idx, E in embedded if E.shape == X.shape and np.array_equal(E, X)]
        assert len(sources) == 1
        rows = [dataset.records[i] for i in sources[0]]
        assert sorted(sources[0]) == sorted(fit_indices(dataset))
        assert all(r.split == "train" and not r.is_anomaly and r.env not in test_envs
                   for r in rows)
    scored = {dataset.records[i].split for idx, _ in embedded for i in idx}
    assert {"test", "id_test"} <= scored  # the other splits were embedded, only for scoring


def test_interrupted_evaluation_resumes_from_finished_runs(smoke_report_copy, monkeypatch):
    import envad.training.evaluate as evaluate

    config, out = smoke_report_copy
    (out / "table.md").unlink()

    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished run was evaluated again")

    monkeypatch.setattr(evaluate, "evaluate_run", must_not_run)
    run_evaluation(config, progress=False)
    assert (out / "table.md").is_file()


def test_cached_results_of_a_run_trained_with_other_hyperparameters_are_refused(
        smoke_report_copy):
    import json

    from envad.errors import FailedPrecondition
    from envad.training.evaluate import _run_dir

    moved, _ = smoke_report_copy
    run_dir = _run_dir(moved, "erm", 0)
    run = json.loads((run_dir / "run.json").read_text())
    run["hparams"]["lr"] = 0.5          # as if trained before a default changed
    (run_dir / "run.json").write_text(json.dumps(run))
    with pytest.raises(FailedPrecondition, match="erm's now: lr 0.5"):
        run_evaluation(moved, progress=False)


def test_cached_results_scored_before_a_detector_default_changed_are_scored_again(
        smoke_report_copy, monkeypatch):
    """The runs are reused (no training), but every detector is fitted and scored again
    with its settings of now, and the cache records them."""
    import dataclasses

    import envad.training.evaluate as evaluate
    from envad.server.detectors.exact import ExactKDE

    config, copy = smoke_report_copy
    moved = dataclasses.replace(config, algorithms=("erm",), detectors=("KNN", "KDE"))
    run_evaluation(moved, progress=False)               # cached under these settings
    monkeypatch.setitem(registry._REGISTRY, "KDE", dataclasses.replace(
        registry.get("KDE"), factory=lambda seed: ExactKDE(bandwidth=7.5, random_state=seed)))
    run_file = evaluate._run_dir(moved, "erm", 0) / "run.json"
    trained = run_file.read_bytes()
    scored = []
    real_evaluate_run = evaluate.evaluate_run
    monkeypatch.setattr(evaluate, "evaluate_run",
                        lambda *a, **k: scored.append(a[2]) or real_evaluate_run(*a, **k))
    run_evaluation(moved, progress=False)
    assert scored == ["erm"] and run_file.read_bytes() == trained   # scored, not trained
    result = json.loads((copy / "results" / "erm-s0.json").read_text())
    assert result["config"]["detector_settings"]["KDE"]["params"]["bandwidth"] == 7.5


def _camera_embeddings(rng, style_dims: int, per_camera: int):
    """6 cameras with skewed bucket mixes; 8 content dims follow the bucket, `style_dims`
    dims are the camera's style: its own offset plus strong per-image variation."""
    X, envs, buckets = [], [], []
    offsets = np.random.default_rng(42).normal(0, 4.0, (6, style_dims))
    for camera, p_a in enumerate((0.9, 0.8, 0.7, 0.3, 0.2, 0.1)):
        b = (rng.random(per_camera) > p_a).astype(int)
        content = 2.0 * b[:, None] + rng.normal(0, 0.5, (per_camera, 8))
        style = offsets[camera] + rng.normal(0, 2.0, (per_camera, style_dims))
        X.append(np.hstack([content, style]))
        envs += [f"cam{camera}"] * per_camera
        buckets.append(b)
    return np.vstack(X), np.array(envs), np.concatenate(buckets)


@pytest.mark.parametrize("style_dims", [8, 0])
def test_stylist_fraction_is_chosen_on_training_cameras_only(style_dims):
    """Camera-style dimensions hide content from a camera left out: the criterion drops
    some when present, and drops nothing when every dimension carries content."""
    rng = np.random.default_rng(0)
    X_fit, fit_envs, fit_b = _camera_embeddings(rng, style_dims, 60)
    X_val, val_envs, val_b = _camera_embeddings(rng, style_dims, 20)
    best, scores = choose_stylist_fraction(X_fit, fit_envs, fit_b, X_val, val_envs, val_b,
                                           (0.0, 0.25, 0.5))
    assert set(scores) == {0.0, 0.25, 0.5}
    assert scores[best] == max(scores.values())
    if style_dims:
        assert best > 0.0 and scores[best] > scores[0.0] + 0.05
    else:
        assert best == 0.0


def test_evaluate_the_default_pipeline_from_the_command_line(tiny_photodigits, tmp_path,
                                                             capsys):
    """`envad evaluate --data DIR --pipeline default`: the pipeline's training settings,
    detectors, space step and score adaptation, scored as a variant of its own."""
    import json

    from envad.client.cli import main
    from envad.pipeline import DEFAULT_PIPELINE

    out = tmp_path / "report"
    assert main(["evaluate", "--data", str(tiny_photodigits), "--pipeline", "default",
                 "--epochs", "1", "--size", "16", "--seeds", "0", "--stylist-fractions", "",
                 "--orders", "shuffled,normal-first", "--out", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    config = report["config"]
    assert config["algorithms"] == [DEFAULT_PIPELINE.algorithm]
    assert config["task"] == DEFAULT_PIPELINE.task and config["augment"] == "style"
    assert config["spaces"] == [DEFAULT_PIPELINE.space]
    assert config["detectors"] == list(DEFAULT_PIPELINE.detectors)
    assert config["score_adaptation"] == DEFAULT_PIPELINE.score_adaptation
    run = report["runs"][0]
    shipped = f"{DEFAULT_PIPELINE.space}+{DEFAULT_PIPELINE.score_adaptation}"
    assert set(run["variants"]) == {"plain", f"space:{shipped}"}
    table = (out / "table.md").read_text()
    assert f"[{shipped}]" in table
    # one row per arrival order asked for, and the worst of them
    orders = run["variants"][f"space:{shipped}"]["orders"]
    assert set(orders) == {"shuffled", "normal-first", "worst"}
    assert orders["worst"]["pooled"] == min(orders["shuffled"]["pooled"],
                                            orders["normal-first"]["pooled"])
    assert "| pipeline | shuffled | normal-first |" in table
    assert f"| {DEFAULT_PIPELINE.algorithm} [space:{shipped}] |" in table


def test_runs_are_named_as_the_demo_names_them_with_every_training_setting(tmp_path):
    """One name per training: the demo's run is reused by an evaluation of the same
    pipeline, and runs that differ in epochs or batch size never share a directory."""
    import dataclasses

    from envad.pipeline import DEFAULT_PIPELINE

    pipeline = DEFAULT_PIPELINE
    config = EvalConfig(data="d", algorithms=("erm",), detectors=("KNN",), seeds=(0,),
                        out=tmp_path, epochs=pipeline.epochs, task=pipeline.task,
                        augment=pipeline.augment, aux=pipeline.aux,
                        hparams=dict(pipeline.hparams))
    assert config.run_name("erm", 0) == pipeline.run_name(32, 0) == \
        "erm-class-style-cosine-e30-32px-s0"
    names = {config.run_name("erm", 0), dataclasses.replace(config, epochs=5).run_name("erm", 0),
             dataclasses.replace(config, batch_size=32).run_name("erm", 0),
             config.run_name("groupdro", 0), config.run_name("erm", 1)}
    assert len(names) == 5
    assert dataclasses.replace(config, batch_size=32).run_name("erm", 0).endswith("-s0-b32")
    paper = EvalConfig(data="d", algorithms=("erm",), detectors=("KNN",), seeds=(0,),
                       out=tmp_path)
    assert paper.run_name("irm", 2) == "irm-bucket-none-constant-e5-32px-s2"
