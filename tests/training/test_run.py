"""`train()`: run dir contents, per-epoch metrics, cache, determinism, resume."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import onnx
import pytest
import torch

from envad.errors import FailedPrecondition, InvalidInput
from envad.training import checkpoint as ckpt
from envad.training.export import export_onnx, parity_tolerance
from envad.training.run import read_run, resolved_hparams, train, trained_hparams
from tiny_algorithms import FAST, tiny_config


def _weights(run_dir, epoch):
    return ckpt.load_checkpoint(ckpt.checkpoint_path(run_dir, epoch))["state"]["model"]


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_run_dir_holds_metrics_checkpoints_and_the_encoder(finished_run):
    run = read_run(finished_run)
    assert run["status"] == "done" and run["dataset"] == "photodigits"
    assert run["train_envs"] == ["cam-astronaut", "cam-brick", "cam-camera", "cam-coffee",
                                 "cam-grass", "cam-gravel"]
    assert run["config"]["algorithm"] == "erm" and run["n_train"] == 108
    assert [e["epoch"] for e in run["epochs"]] == [1, 2]
    for entry in run["epochs"]:
        assert 0 <= entry["val_knn_acc"] <= 1 and 0 <= entry["val_acc"] <= 1
        assert entry["train"]["loss"] > 0 and entry["images_per_s"] > 0
    assert [e for e, _ in ckpt.checkpoints(finished_run)] == [1, 2]
    assert (finished_run / "encoder.onnx").is_file()
    assert (finished_run / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert run["export"]["max_abs_diff"] <= parity_tolerance(run["export"]["scale"])
    assert run["export"]["scale"] > 0
    assert run["export"]["model_id"] == "erm-photodigits-16px-e2-s0"
    phases = run["phase_seconds"]
    assert set(phases) == {"data", "model", "prepare", "epochs", "validation", "checkpoints",
                           "curves", "export"}
    assert all(seconds >= 0 for seconds in phases.values())
    # the epochs' phase is the per-epoch seconds the run reports, summed
    assert phases["epochs"] >= 0.9 * sum(e["seconds"] for e in run["epochs"])


def test_finished_run_is_cached_and_other_configs_refused(finished_run, tiny_photodigits):
    before = {p.name: p.stat().st_mtime_ns for p in finished_run.iterdir()}
    config = tiny_config(tiny_photodigits, finished_run)
    assert train(config, progress=False) == finished_run
    assert {p.name: p.stat().st_mtime_ns for p in finished_run.iterdir()} == before
    with pytest.raises(FailedPrecondition, match="different config"):
        train(tiny_config(tiny_photodigits, finished_run, seed=1), progress=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto is cuda on this machine")
def test_device_auto_is_resolved_before_the_run_is_named(finished_run, tiny_photodigits):
    """`auto` on a machine without CUDA is the CPU: the finished CPU run is this run,
    and the run records the device it resolved to, never `auto`."""
    before = {p.name: p.stat().st_mtime_ns for p in finished_run.iterdir()}
    assert train(tiny_config(tiny_photodigits, finished_run, device="auto"),
                 progress=False) == finished_run
    assert {p.name: p.stat().st_mtime_ns for p in finished_run.iterdir()} == before
    assert read_run(finished_run)["config"]["device"] == "cpu"
    with pytest.raises(InvalidInput, match="device must be one of cpu, cuda, auto"):
        train(tiny_config(tiny_photodigits, finished_run, device="tpu"), progress=False)


def test_a_finished_run_trained_with_other_hyperparameters_is_refused(finished_run,
                                                                       tiny_photodigits,
                                                                       tmp_path):
    """The run's identity names only the hyperparameters given; a default that changed
    since the run was trained must not reuse it silently."""
    copy = tmp_path / "erm"
    shutil.copytree(finished_run, copy)
    config = tiny_config(tiny_photodigits, copy)
    run = read_run(copy)
    assert run["hparams"] == resolved_hparams("erm", config.hparams)
    assert trained_hparams(copy) == resolved_hparams("erm", config.hparams)
    assert train(config, progress=False) == copy
    # a hyperparameter added since the run was trained: not recorded, not a difference
    run["hparams"] = {key: value for key, value in resolved_hparams("erm", config.hparams)
                      .items() if key != "head"}
    (copy / "run.json").write_text(json.dumps(run))
    assert train(config, progress=False) == copy
    run["hparams"] = {**resolved_hparams("erm", config.hparams), "lr": 0.5}
    (copy / "run.json").write_text(json.dumps(run))
    with pytest.raises(FailedPrecondition, match=r"other hyperparameters .* lr 0\.5 \(now "):
        train(config, progress=False)


def test_a_run_of_an_unknown_older_format_is_refused_naming_the_retrain(finished_run,
                                                                        tiny_photodigits,
                                                                        tmp_path):
    """run.json written by a development version before envad 0.1.0 (no hparams, or an
    identity without settings added since): a clear error, not a silent reuse."""
    copy = tmp_path / "erm"
    shutil.copytree(finished_run, copy)
    config = tiny_config(tiny_photodigits, copy)
    run = read_run(copy)
    no_hparams = {key: value for key, value in run.items() if key != "hparams"}
    (copy / "run.json").write_text(json.dumps(no_hparams))
    with pytest.raises(FailedPrecondition, match=r"unknown older format .*no hparams.*"
                                                 r"delete the run directory to retrain"):
        train(config, progress=False)
    older = {**run, "config": {k: v for k, v in run["config"].items()
                               if k not in ("task", "augment")}}
    (copy / "run.json").write_text(json.dumps(older))
    with pytest.raises(FailedPrecondition, match=r"unknown older format .*no augment, task"
                                                 r".*delete the run directory"):
        train(config, progress=False)


def test_the_dataset_path_may_be_spelled_relative_or_absolute(finished_run, tiny_photodigits,
                                                               monkeypatch):
    import dataclasses

    before = {p.name: p.stat().st_mtime_ns for p in finished_run.iterdir()}
    data = Path(tiny_config(tiny_photodigits, finished_run).data).resolve()
    monkeypatch.chdir(data.parent)
    relative = dataclasses.replace(tiny_config(tiny_photodigits, finished_run),
                                   data=data.name)
    assert relative.data != str(data)
    assert train(relative, progress=False) == finished_run          # cached, not refused
    assert {p.name: p.stat().st_mtime_ns for p in finished_run.iterdir()} == before


def test_same_seed_gives_identical_weights(finished_run, tiny_photodigits, tmp_path):
    again = train(tiny_config(tiny_photodigits, tmp_path / "again"), progress=False)
    for epoch in (1, 2):
        assert _same(_weights(again, epoch), _weights(finished_run, epoch))
    assert read_run(again)["epochs"][1]["val_knn_acc"] == \
        read_run(finished_run)["epochs"][1]["val_knn_acc"]


def test_resume_continues_after_the_last_complete_epoch(finished_run, tiny_photodigits,
                                                        tmp_path):
    interrupted = tmp_path / "interrupted"
    shutil.copytree(finished_run, interrupted)
    (interrupted / "checkpoint-epoch002.pt").unlink()
    (interrupted / "encoder.onnx").unlink()
    run = json.loads((interrupted / "run.json").read_text())
    run.update(status="running", epochs=run["epochs"][:1])
    run.pop("export")
    (interrupted / "run.json").write_text(json.dumps(run))
    config = tiny_config(tiny_photodigits, interrupted)
    with pytest.raises(FailedPrecondition, match="unfinished run"):
        train(config, progress=False)
    train(config, progress=False, resume=True)
    assert _same(_weights(interrupted, 2), _weights(finished_run, 2))
    assert [e["epoch"] for e in read_run(interrupted)["epochs"]] == [1, 2]
    assert (interrupted / "encoder.onnx").is_file()


def test_the_last_epoch_s_checkpoint_holds_the_model_without_its_optimizer(finished_run):
    earlier, last = (ckpt.load_checkpoint(ckpt.checkpoint_path(finished_run, epoch))
                     for epoch in (1, 2))
    assert set(earlier["state"]) == {"model", "optimizer"}       # epoch 2 resumes from it
    assert set(last["state"]) == {"model"}                       # nothing resumes past it


def _graph(path):
    return onnx.load(str(path)).graph.SerializeToString()


def test_the_run_exports_the_model_its_newest_checkpoint_holds(finished_run, tmp_path):
    """The run exports the algorithm it holds without reading its checkpoint back:
    the same graph and weights, to the byte, as `envad export` of that checkpoint."""
    again = export_onnx(finished_run, tmp_path / "again.onnx")
    assert _graph(again.path) == _graph(finished_run / "encoder.onnx")
    assert again.model_id == read_run(finished_run)["export"]["model_id"]


def test_a_run_stopped_before_its_export_resumes_to_it(finished_run, tiny_photodigits,
                                                       tmp_path):
    stopped = tmp_path / "stopped"
    shutil.copytree(finished_run, stopped)
    (stopped / "encoder.onnx").unlink()
    run = json.loads((stopped / "run.json").read_text())
    run.update(status="running")
    run.pop("export")
    (stopped / "run.json").write_text(json.dumps(run))
    train(tiny_config(tiny_photodigits, stopped), progress=False, resume=True)
    assert read_run(stopped)["status"] == "done"
    assert [e["epoch"] for e in read_run(stopped)["epochs"]] == [1, 2]
    assert _graph(stopped / "encoder.onnx") == _graph(finished_run / "encoder.onnx")


def test_random_takes_no_steps(tiny_photodigits, tmp_path):
    run_dir = train(tiny_config(tiny_photodigits, tmp_path / "random", "random"),
                    progress=False)
    run = read_run(run_dir)
    assert [e["epoch"] for e in run["epochs"]] == [0] and run["epochs"][0]["train"] == {}
    assert "val_knn_acc" in run["epochs"][0] and "val_acc" not in run["epochs"][0]
    assert [e for e, _ in ckpt.checkpoints(run_dir)] == [0]
    assert (run_dir / "encoder.onnx").is_file()


def test_ea_mocov3_run_prepares_positives(tiny_photodigits, tmp_path):
    run_dir = train(tiny_config(tiny_photodigits, tmp_path / "ea", "ea_mocov3", epochs=1,
                                hparams=FAST["ea_mocov3"], keep_checkpoints=1),
                    progress=False)
    weights = _weights(run_dir, 1)
    assert len(weights["positives"]) == 108
    assert "val_acc" not in read_run(run_dir)["epochs"][0]


def test_bad_settings(tiny_photodigits, tmp_path):
    with pytest.raises(InvalidInput, match="unknown algorithm"):
        train(tiny_config(tiny_photodigits, tmp_path / "x", "vrex"), progress=False)
    with pytest.raises(InvalidInput, match="batch_size"):
        train(tiny_config(tiny_photodigits, tmp_path / "x", batch_size=1), progress=False)
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    with pytest.raises(FailedPrecondition, match="not empty"):
        train(tiny_config(tiny_photodigits, busy), progress=False)
