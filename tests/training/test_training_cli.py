"""`envad data`, `envad train`, `envad export` on the command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from envad.client.cli import build_parser, main
from envad.training.algorithms import names
from envad.training.cli import ALGORITHMS, parse_hparams
from envad.training.run import read_run


def test_cli_lists_the_registry():
    assert list(ALGORITHMS) == names()


def test_cli_lists_the_tasks_and_augmentations():
    from envad.training.algorithms.base import AUX_LOSSES
    from envad.training.augment import STYLE_AUGMENTS
    from envad.training.batches import TASKS
    from envad.training.cli import AUGMENTS, AUX
    from envad.training.cli import TASKS as CLI_TASKS

    assert CLI_TASKS == TASKS and list(AUGMENTS) == list(STYLE_AUGMENTS)
    assert AUX == AUX_LOSSES


def test_cli_lists_the_photodigits_recipes():
    from envad.training.cli import RECIPE_NAMES
    from envad.training.photodigits import RECIPES

    assert list(RECIPE_NAMES) == list(RECIPES)


def test_help_does_not_import_torch():
    code = ("import sys; from envad.client.cli import build_parser; build_parser(); "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
    for command in ("data", "train", "export"):
        result = subprocess.run([sys.executable, "-m", "envad.client.cli", command, "--help"],
                                capture_output=True, text=True, check=True)
        assert "usage: envad " + command in result.stdout


def test_parse_hparams():
    assert parse_hparams(["lr=1e-4", "momentum_cosine=false", "name=abc"]) == \
        {"lr": 1e-4, "momentum_cosine": False, "name": "abc"}
    with pytest.raises(Exception, match="KEY=VALUE"):
        parse_hparams(["lr"])


def test_data_photodigits_command(tmp_path, capsys):
    """A small PhotoDigits (the benchmark's 800 and 300 images per camera are the
    defaults, those of `generate`, whose own tests check what it writes)."""
    import inspect

    from envad.training.data import load_folder
    from envad.training.photodigits import generate

    assert main(["data", "photodigits", "--out", str(tmp_path / "pd"), "--seed", "2",
                 "--train-per-camera", "30", "--test-per-camera", "10", "--quiet"]) == 0
    assert "written to" in capsys.readouterr().out
    ds = load_folder(tmp_path / "pd")
    assert len(ds.indices(split="train")) + len(ds.indices(split="val")) == 6 * 30
    assert len(ds.indices(split="test")) == 3 * 10
    defaults = build_parser().parse_args(["data", "photodigits", "--out", "x"])
    wanted = inspect.signature(generate).parameters
    assert (defaults.train_per_camera, defaults.test_per_camera) == (
        wanted["train_per_camera"].default, wanted["test_per_camera"].default) == (800, 300)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["data", "photodigits", "--out", "x", "--size", "48"])
    parsed = build_parser().parse_args(["data", "photodigits", "--out", "x"])
    assert parsed.recipe == "standard"
    parsed = build_parser().parse_args(["data", "photodigits", "--out", "x", "--recipe",
                                        "holdout"])
    assert parsed.recipe == "holdout"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["data", "photodigits", "--out", "x", "--recipe", "nope"])


def test_train_resume_and_export(tiny_photodigits, tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--data", str(tiny_photodigits), "--algorithm", "groupdro",
            "--out", str(run), "--size", "16", "--epochs", "1", "--batch-size", "16",
            "--seed", "4", "--hparam", "eta=0.05", "--quiet"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "encoder:" in out and "groupdro-photodigits-16px-e1-s4" in out
    config = read_run(run)["config"]
    assert config["hparams"] == {"eta": 0.05} and config["seed"] == 4
    assert main(argv + ["--resume"]) == 0                 # finished: nothing to do
    assert main(["export", str(run), "--out", str(tmp_path / "m.onnx")]) == 0
    assert "max abs diff" in capsys.readouterr().out
    assert (tmp_path / "m.onnx").is_file()


def test_errors_are_reported_cleanly(tiny_photodigits, tmp_path, capsys):
    assert main(["train", "--data", str(tmp_path / "missing"), "--algorithm", "erm",
                 "--out", str(tmp_path / "r"), "--quiet"]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert main(["train", "--data", str(tiny_photodigits), "--algorithm", "erm",
                 "--out", str(tmp_path / "r2"), "--hparam", "nope=1", "--quiet"]) == 1
    assert "unknown" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "none"), "--out", str(tmp_path / "x.onnx")]) == 1
    with pytest.raises(SystemExit):
        main(["train", "--data", "x", "--algorithm", "vrex", "--out", "y"])
