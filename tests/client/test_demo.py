"""The whole demo (`make demo`) in a temporary workdir: minutes, so marked slow."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from envad.client.demo import run_demo
from envad.server.detectors.registry import PAPER_DETECTORS
from envad.server.detectors.registry import names as detector_names


@pytest.mark.slow
def test_demo_end_to_end(tmp_path) -> None:
    report = run_demo(tmp_path / "demo", epochs=1)
    assert report["n_test_images"] == 900 and report["n_anomalies"] == 360
    paper = {"IsoForest", "INNE", "LODA", "OCSVM", "PCA", "LOF5", "KNN", "KDE"}
    assert set(PAPER_DETECTORS) == paper
    assert set(report["roc_auc"]) == {"ensemble"} | set(report["pipeline"]["detectors"] or
                                                         paper)
    # the space pass scores every registered detector (NORM too); the raw pass is the
    # paper's setting, its eight detectors
    assert set(report["all_detectors"]["space"]["roc_auc"]) == \
        {"ensemble", *detector_names()} > paper | {"ensemble"}
    assert set(report["all_detectors"]["raw"]["roc_auc"]) == paper | {"ensemble"}
    assert all(0.0 <= v <= 1.0 for v in report["roc_auc"].values())
    # the arrival-order rows beside the archive's: each unseen camera as a stream
    assert set(report["arrival_orders"]) == {"shuffled", "normal-first"}
    assert all(0.0 <= v["roc_auc"] <= 1.0 for v in report["arrival_orders"].values())
    assert (tmp_path / "demo" / "roc.png").read_bytes()[:4] == b"\x89PNG"
    assert json.loads((tmp_path / "demo" / "report.json").read_text()) == report
    assert "stopped" in (tmp_path / "demo" / "server.log").read_text()


def test_demo_on_a_given_folder_dataset(tmp_path, capsys) -> None:
    """`python -m envad.client.demo --data DIR`: the same stages and table on any
    folder-format dataset (here a small PhotoDigits written beforehand)."""
    from envad.client.demo import main
    from envad.devices import resolve_device
    from envad.pipeline import DEFAULT_PIPELINE
    from envad.training.photodigits import generate
    from envad.training.run import resolved_hparams
    from envad.training.run_files import write_run

    data = generate(tmp_path / "pd", 32, 1, progress=False, train_per_camera=40,
                    test_per_camera=20)
    # a run cached before ERM's default lr moved: set aside and retrained, not refused
    pipeline = replace(DEFAULT_PIPELINE, epochs=1)
    stale = tmp_path / "w" / "runs" / pipeline.run_name(16, 0)
    now = resolved_hparams("erm", dict(pipeline.hparams))
    old = {**now, "lr": now["lr"] / 3}
    stale.mkdir(parents=True)
    write_run(stale, {"config": {}, "status": "done", "hparams": old, "epochs": []})
    assert main(["--data", str(data), "--workdir", str(tmp_path / "w"), "--epochs", "1",
                 "--size", "16", "--device", "auto"]) == 0
    assert json.loads((stale.parent / (stale.name + ".stale-1") / "run.json").read_text())[
        "hparams"] == old
    report = json.loads((tmp_path / "w" / "report.json").read_text())
    assert report["data"] == str(data) and report["n_test_images"] == 60
    assert report["pipeline"]["space"] and report["epochs"] == 1
    assert set(report["all_detectors"]["raw"]["roc_auc"]) >= set(report["roc_auc"])
    assert "ensemble" in report["roc_auc"]
    out = capsys.readouterr().out
    assert f"with space {report['pipeline']['space']}" in out and "raw (paper)" in out
    assert "The pipeline as served" in out
    assert f"(on {resolve_device('auto')})" in out
    assert f"earlier default (lr {old['lr']!r} (now {now['lr']!r})); moved to" in out
    raw = [json.loads(line) for line in (tmp_path / "w" / "scores-raw.jsonl").open()]
    assert {s["space"] for s in raw} == {"raw"} and len(raw[0]["detectors"]) == 8
    every = [json.loads(line) for line in (tmp_path / "w" / "scores-all.jsonl").open()]
    assert "NORM" in every[0]["detectors"] and "NORM" in report["all_detectors"]["space"][
        "roc_auc"]
    scores = [json.loads(line) for line in (tmp_path / "w" / "scores.jsonl").open()]
    assert {s["space"].split("(")[0] for s in scores} == {report["pipeline"]["space"].split(":")[0]}
    # the pipeline's score adaptation is served, the paper's pass is unadapted, and each
    # detector's ROC-AUC is that of the score its calibration ranks by (adapted)
    assert {s["score_adaptation"] for s in scores} == {"frozen(prior_rows=64)"}
    assert {s["score_adaptation"] for s in raw} == {"none"}
    # each unseen camera sends 20 test images: its last ones weigh 20 / (20 + 64)
    assert max(s["camera_weight"] for s in scores) == pytest.approx(20 / 84)
    from sklearn.metrics import roc_auc_score
    truth = [s["source"]["is_anomaly"] for s in scores]
    served = report["pipeline"]["detectors"][0]
    adapted = [s["detectors"][served]["adapted"] for s in scores]
    assert report["roc_auc"][served] == round(roc_auc_score(truth, adapted), 4)
    assert not (tmp_path / "w" / "photodigits").exists()    # nothing generated


def test_demo_refuses_a_folder_without_metadata(tmp_path) -> None:
    from envad.client.demo import main

    with pytest.raises(SystemExit):
        main(["--data", str(tmp_path), "--workdir", str(tmp_path / "w")])


def test_runs_trained_on_a_gpu_live_beside_the_cpu_run() -> None:
    from envad.client.demo import demo_run_name
    from envad.pipeline import DEFAULT_PIPELINE

    cpu = demo_run_name(DEFAULT_PIPELINE, 32, 0, "cpu")
    assert cpu == DEFAULT_PIPELINE.run_name(32, 0)
    assert demo_run_name(DEFAULT_PIPELINE, 32, 0, "cuda") == f"{cpu}-cuda"
    assert demo_run_name(DEFAULT_PIPELINE, 32, 0, "cuda:1") == f"{cpu}-cuda1"


def test_demo_selects_its_pipeline_on_the_training_cameras_first(tmp_path, capsys,
                                                                  one_archive_set) -> None:
    """`--select`: `envad select` within the budget (here one candidate, two folds, one
    space step, three detectors, one archive set: the selection's own tests score every
    one) on the dataset's training cameras, then the demo trains and serves what it
    chose."""
    from envad.client.demo import main
    from envad.pipeline import Pipeline
    from envad.training.photodigits import generate
    from envad.training.selection import DEFAULT_CANDIDATES

    data = generate(tmp_path / "pd", 32, 0, progress=False, train_per_camera=60,
                    test_per_camera=20)
    work = tmp_path / "w"
    assert main(["--data", str(data), "--workdir", str(work), "--epochs", "1",
                 "--size", "16", "--device", "cpu", "--select", "--select-candidates", "1",
                 "--select-folds", "2", "--select-spaces", "l2",
                 "--select-detectors", "NORM,KNN,KDE"]) == 0
    selection = json.loads((work / "select" / "selection.json").read_text())
    first = next(iter(DEFAULT_CANDIDATES))
    assert list(selection["candidates"]) == [first] and len(selection["folds"]) == 2
    folds = sorted((work / "select" / "folds").glob("*.json"))
    assert len(folds) == 2 and all(            # the spaces and detectors asked for
        set(json.loads(fold.read_text())["scores"]) == {"l2"}
        and set(json.loads(fold.read_text())["detector_settings"]) == {"KNN", "KDE", "NORM"}
        for fold in folds)
    assert selection["candidates"][first]["epochs"] == 1          # --epochs caps them
    chosen = Pipeline.from_json(selection["chosen"])
    report = json.loads((work / "report.json").read_text())
    assert report["pipeline"] == chosen.to_json()
    assert f"selected: {chosen.describe()}" in capsys.readouterr().out
    assert (work / "runs" / chosen.run_name(16, 0) / "encoder.onnx").is_file()
    with pytest.raises(SystemExit):
        main(["--data", str(data), "--workdir", str(work), "--select", "--pipeline", "paper"])
    with pytest.raises(SystemExit):
        main(["--data", str(data), "--workdir", str(work), "--select", "--select-spaces",
              "l2,white"])
    assert "--select-spaces: unknown space 'white'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--data", str(data), "--workdir", str(work), "--select", "--select-detectors",
              "KNN,knn"])
    assert "--select-detectors: unknown detector 'knn'" in capsys.readouterr().err
