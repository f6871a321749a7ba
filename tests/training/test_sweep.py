"""`envad sweep`: the sweep registry, the choice rule, a real tiny sweep."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest

from envad.errors import InvalidInput
from envad.pipeline import Pipeline
from envad.training.algorithms import get, names
from envad.training.run import read_run, resolved_hparams
from envad.training.sweep import (
    SWEEP_JSON,
    SWEEP_MD,
    SWEEP_POINTS,
    SweepConfig,
    check_points,
    choose,
    point_label,
    point_record,
    run_record,
    run_sweep,
    selection_metric,
    sweep_markdown,
    tie_tolerance,
)

#: two points, the second one unable to learn (lr 0): a sweep whose evidence is clear
TINY_POINTS: dict[str, tuple[dict[str, Any], ...]] = {"erm": ({}, {"lr": 0.0})}
TINY_RECIPE = Pipeline(algorithm="erm", task="class", epochs=2, hparams={"weight_decay": 1e-5})


def test_every_training_algorithm_has_four_points_or_more_default_first() -> None:
    trained = [name for name in names() if get(name).trains]
    assert sorted(SWEEP_POINTS) == sorted(trained)
    for name in trained:
        points = SWEEP_POINTS[name]
        assert len(points) >= 4, name
        assert points[0] == {}, name
    check_points(SWEEP_POINTS)


@pytest.mark.parametrize("points, message", [
    ({"erm": ({}, {"learning_rate": 0.1})}, "learning_rate"),
    ({"erm": ({}, {"lr": 0.1}, {"lr": 0.1})}, "same hyperparameters"),
    ({"erm": ({}, {"lr": get("erm").hparams_class().lr})},          # the default spelt out
     "same hyperparameters"),
    ({"erm": ({"lr": 0.1}, {})}, "first sweep point"),
    ({"random": ({}, {"lr": 0.1})}, "does not train"),
    ({"sgd": ({},)}, "unknown algorithm"),
])
def test_a_sweep_that_cannot_say_anything_is_refused(points, message) -> None:
    with pytest.raises(InvalidInput, match=message):
        check_points(points)


def test_the_default_wins_ties_and_a_clear_winner_replaces_it() -> None:
    tolerance = 0.01
    assert choose([0.900, 0.909, 0.88], tolerance) == 0
    assert choose([0.90, 0.92, 0.93], tolerance) == 2
    assert choose([0.90, 0.95, 0.95], tolerance) == 1            # the first of equals
    assert choose([math.nan, 0.5], tolerance) == 1               # a run without the metric
    assert choose([0.7], tolerance) == 0


def test_the_tie_tolerance_is_the_sampling_error_of_a_difference_of_accuracies() -> None:
    assert tie_tolerance(0.98, 480) == pytest.approx(math.sqrt(2 * 0.98 * 0.02 / 480))
    assert 0.008 < tie_tolerance(0.98, 480) < 0.01                # PhotoDigits' val split
    assert tie_tolerance(0.98, 4000) < tie_tolerance(0.98, 480)   # more images, finer
    assert tie_tolerance(0.5, 480) > tie_tolerance(0.98, 480)
    # a perfect default still leaves room for one image's worth of noise
    assert tie_tolerance(1.0, 480) == pytest.approx(math.sqrt(2 * (1 / 480) * (479 / 480)
                                                              / 480))
    assert tie_tolerance(0.9, 1) > 0


def test_supervised_algorithms_are_chosen_on_their_classifier_others_on_k_nn() -> None:
    assert selection_metric("erm") == selection_metric("coral") == "val_acc"
    assert selection_metric("mocov3") == selection_metric("ea_mocov3") == "val_knn_acc"


def test_point_labels_name_the_overrides() -> None:
    assert point_label({}) == "default"
    assert point_label({"lr": 3e-4}) == "lr=0.0003"
    assert point_label({"p_sel": 0.25, "alpha": 0.5}) == "alpha=0.5, p_sel=0.25"


@pytest.fixture(scope="module")
def tiny_sweep(tiny_photodigits, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    config = SweepConfig(data=str(tiny_photodigits), out=out, algorithms=("erm",),
                         pipeline=TINY_RECIPE, size=16, points=TINY_POINTS)
    return config, run_sweep(config, progress=False)


def test_a_sweep_trains_every_point_and_chooses_on_val_metrics(tiny_sweep) -> None:
    config, summary = tiny_sweep
    assert json.loads((config.out / SWEEP_JSON).read_text()) == summary
    erm = summary["algorithms"]["erm"]
    assert erm["metric"] == "val_acc"
    assert [p["label"] for p in erm["points"]] == ["default", "lr=0"]
    for record, point in zip(erm["points"], TINY_POINTS["erm"], strict=True):
        assert [r["seed"] for r in record["runs"]] == [0]
        run = read_run(Path(record["runs"][0]["run_dir"]))
        # the recorded metric is the run's last epoch, trained with the recipe + the point
        assert record["val_acc"] == run["epochs"][-1]["val_acc"]
        assert len(run["epochs"]) == TINY_RECIPE.epochs
        assert run["config"]["task"] == "class"
        assert run["hparams"] == resolved_hparams("erm", {**TINY_RECIPE.hparams, **point})
    assert erm["points"][1]["hparams"]["lr"] == 0.0        # the point over the recipe
    assert {p["hparams"]["weight_decay"] for p in erm["points"]} == {1e-5}
    assert erm["n_val"] == 12          # tiny PhotoDigits: 2 normal val images per camera
    assert erm["tie_tolerance"] == pytest.approx(
        tie_tolerance(erm["points"][0]["val_acc"], erm["n_val"]), abs=1e-6)
    assert erm["chosen"] == choose([p["val_acc"] for p in erm["points"]],
                                   erm["tie_tolerance"])
    assert erm["chosen_hparams"] == erm["points"][erm["chosen"]]["hparams"]
    markdown = (config.out / SWEEP_MD).read_text()
    assert markdown.count("**chosen**") == 1 and "## erm" in markdown


def test_sweep_runs_are_named_as_evaluate_and_the_demo_name_them(tiny_sweep) -> None:
    config, summary = tiny_sweep
    default_run = Path(summary["algorithms"]["erm"]["points"][0]["runs"][0]["run_dir"])
    assert default_run == config.out / "runs" / TINY_RECIPE.run_name(16, 0)
    other = Path(summary["algorithms"]["erm"]["points"][1]["runs"][0]["run_dir"])
    assert other.name == Pipeline(algorithm="erm", task="class", epochs=2,
                                  hparams={"weight_decay": 1e-5, "lr": 0.0}).run_name(16, 0)


def test_a_sweep_again_reuses_its_runs(tiny_sweep) -> None:
    from envad.client.cli import main

    config, summary = tiny_sweep
    stamps = {r["run_dir"]: (Path(r["run_dir"]) / "encoder.onnx").stat().st_mtime_ns
              for result in summary["algorithms"].values() for p in result["points"]
              for r in p["runs"]}
    points = config.out / "points.json"
    points.write_text(json.dumps({"erm": TINY_POINTS["erm"]}))
    code = main(["sweep", "--data", config.data, "--points", str(points), "--epochs", "2",
                 "--size", "16", "--out", str(config.out / "again"), "--runs-dir",
                 str(config.out / "runs"), "--pipeline", str(_recipe_file(config.out))])
    assert code == 0
    again = json.loads((config.out / "again" / SWEEP_JSON).read_text())
    assert again["algorithms"]["erm"]["points"] == summary["algorithms"]["erm"]["points"]
    assert all((Path(run) / "encoder.onnx").stat().st_mtime_ns == stamp
               for run, stamp in stamps.items())


def _recipe_file(out: Path) -> Path:
    path = out / "recipe.json"
    path.write_text(json.dumps(TINY_RECIPE.to_json()))
    return path


def test_a_dataset_without_val_images_is_refused_before_anything_trains(tmp_path) -> None:
    from training_datasets import folder_rows, write_folder_dataset

    rows = [row for row in folder_rows() if row["split"] != "val"]
    data = write_folder_dataset(tmp_path / "ds", rows)
    config = SweepConfig(data=str(data), out=tmp_path / "out", algorithms=("erm",))
    with pytest.raises(InvalidInput, match="no normal val images"):
        run_sweep(config, progress=False)
    assert not (tmp_path / "out").exists()


def _seed_run(seed: int, val_acc: float, low: float, high: float) -> dict:
    return {"seed": seed, "run_dir": f"r{seed}", "hparams": {"lr": 0.003},
            "val_acc": val_acc, "val_knn_acc": val_acc - 0.01,
            "tail": {"epochs": 5, "min": low, "max": high}, "train_seconds": 700.0}


def test_a_point_over_several_seeds_is_judged_on_its_mean() -> None:
    record = point_record({"lr": 0.003}, [_seed_run(0, 0.98, 0.97, 0.98),
                                          _seed_run(1, 0.96, 0.95, 0.97)])
    assert record["val_acc"] == pytest.approx(0.97)
    assert record["val_knn_acc"] == pytest.approx(0.96)
    assert record["tail"] == {"epochs": 5, "min": 0.95, "max": 0.98}
    assert record["train_seconds"] == 1400.0 and record["label"] == "lr=0.003"
    summary = {"data": "pd", "size": 32, "seeds": [0, 1], "device": "cpu",
               "recipe": Pipeline(algorithm="*").to_json(),
               "algorithms": {"erm": {"metric": "val_acc", "n_val": 480,
                                      "tie_tolerance": tie_tolerance(0.97, 960),
                                      "points": [record], "chosen": 0,
                                      "chosen_label": "lr=0.003", "chosen_hparams": {},
                                      "changes_default": {}}}}
    markdown = sweep_markdown(summary)
    assert "| lr=0.003 | 97.0 (98.0 / 96.0) | 96.0 (97.0 / 95.0) | 95.0-98.0 (5) |" in markdown
    assert "seeds 0, 1" in markdown and "480 val images x 2 seed(s)" in markdown


def test_a_run_without_its_selection_metric_on_val_is_refused(tmp_path) -> None:
    from envad.training.run_files import write_run

    write_run(tmp_path, {"config": {"seed": 0}, "status": "done", "hparams": {"lr": 0.001},
                         "epochs": [{"epoch": 1, "val_acc": 0.9, "val_knn_acc": None,
                                     "seconds": 1.0}]})
    assert run_record(tmp_path, "val_acc")["val_acc"] == 0.9
    with pytest.raises(InvalidInput, match="no val_knn_acc on the val split"):
        run_record(tmp_path, "val_knn_acc")


def test_a_sweep_with_jobs_trains_its_runs_in_parallel_then_reads_them_in_order(
        tiny_sweep, tmp_path) -> None:
    """Two points at two seeds, two at a time in spawned workers: the seed-0 runs, kept
    from the module's serial sweep, are reused, the seed-1 ones trained; every run is
    trained once (a serial sweep afterwards retrains nothing and reads the same
    records), and the summary lists the points and seeds in the order the serial sweep
    does."""
    serial, _ = tiny_sweep
    shutil.copytree(serial.out / "runs", tmp_path / "parallel" / "runs")
    kept = {d.name: (d / "encoder.onnx").stat().st_mtime_ns
            for d in (tmp_path / "parallel" / "runs").iterdir()}
    config = dataclasses.replace(serial, out=tmp_path / "parallel", seeds=(0, 1), jobs=2)
    summary = run_sweep(config, progress=False)
    erm = summary["algorithms"]["erm"]
    assert [p["label"] for p in erm["points"]] == ["default", "lr=0"]
    run_dirs = [Path(r["run_dir"]) for p in erm["points"] for r in p["runs"]]
    assert [r["seed"] for p in erm["points"] for r in p["runs"]] == [0, 1, 0, 1]
    assert all(read_run(d)["status"] == "done" for d in run_dirs)
    stamps = {d: (d / "encoder.onnx").stat().st_mtime_ns for d in run_dirs}
    assert len(kept) == 2 and {d.name: stamp for d, stamp in stamps.items()
                               if d.name in kept} == kept          # not trained again
    again = run_sweep(dataclasses.replace(config, out=tmp_path / "serial", jobs=1,
                                          runs_dir=tmp_path / "parallel" / "runs"),
                      progress=False)
    assert again["algorithms"]["erm"]["points"] == erm["points"]
    assert all((d / "encoder.onnx").stat().st_mtime_ns == stamp
               for d, stamp in stamps.items())


def test_a_sweep_refuses_fewer_than_one_job(tiny_photodigits, tmp_path) -> None:
    config = SweepConfig(data=str(tiny_photodigits), out=tmp_path / "out",
                         algorithms=("erm",), points=TINY_POINTS, jobs=0)
    with pytest.raises(InvalidInput, match="jobs must be at least 1"):
        run_sweep(config, progress=False)
