"""Smoke evaluation (32 px, 1 seed, 2 algorithms, 1 epoch) and its guarantees."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from sklearn.metrics import roc_auc_score

from envad.server.detectors import registry
from envad.training.data import load_dataset
from envad.training.evaluate import ENSEMBLE, EvalConfig, fit_indices, run_evaluation

ALGORITHMS = ("random", "erm")


@pytest.fixture(scope="module")
def smoke_report(tiny_photodigits, tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    config = EvalConfig(data=str(tiny_photodigits), algorithms=ALGORITHMS,
                        detectors=tuple(registry.names()), seeds=(0,), out=out, size=32,
                        epochs=1, batch_size=16)
    run_evaluation(config, progress=False)
    return config, out


def test_report_files_and_structure(smoke_report):
    config, out = smoke_report
    for name in ("table.md", "table.csv", "results.json", "heatmap.png", "mean_ad.png",
                 "roc.png", "camera_histograms.png"):
        assert (out / name).stat().st_size > 0, name
    table = (out / "table.md").read_text()
    assert "| detector | random | erm |" in table and "**Mean AD**" in table
    assert "random+Stylist" in table and "raw pixels" in table and "content oracle" in table
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


def test_fit_rows_are_exactly_the_normal_train_rows(smoke_report, monkeypatch):
    """Spy on the bundle fit inside a run: it receives the train normals and nothing else."""
    import envad.training.evaluate as evaluate

    config, out = smoke_report
    dataset = load_dataset(config.data)
    seen = []
    real_fit = evaluate.fit_bundle

    def spy(X, **kwargs):
        seen.append(len(X))
        return real_fit(X, **kwargs)

    monkeypatch.setattr(evaluate, "fit_bundle", spy)
    evaluate.evaluate_run(config, dataset, "random", 0, progress=False)
    assert seen and set(seen) == {len(fit_indices(dataset))}


def test_interrupted_evaluation_resumes_from_finished_runs(smoke_report, monkeypatch):
    import envad.training.evaluate as evaluate

    config, out = smoke_report
    (out / "table.md").unlink()

    def must_not_run(*args, **kwargs):
        raise AssertionError("a finished run was evaluated again")

    monkeypatch.setattr(evaluate, "evaluate_run", must_not_run)
    run_evaluation(config, progress=False)
    assert (out / "table.md").is_file()
