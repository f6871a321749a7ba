"""Fixtures for training tests: tiny PhotoDigits and a tiny hand-written folder dataset."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from built_once import built_once
from tiny_algorithms import tiny_config
from training_datasets import folder_rows, write_folder_dataset


@pytest.fixture(scope="session")
def tiny_photodigits(tmp_path_factory) -> Path:
    """PhotoDigits at 32 px with 20 images per training camera and 10 per test camera
    (one folder for every worker: the runs and reports built once name it)."""
    from envad.training.photodigits import generate

    def build(folder: Path) -> None:
        generate(folder / "photodigits", 32, 0, progress=False, train_per_camera=20,
                 test_per_camera=10)

    return built_once(tmp_path_factory, "tiny-photodigits", build) / "photodigits"


@pytest.fixture(scope="session")
def smoke_report(tiny_photodigits, tmp_path_factory):
    """(config, out) of a smoke evaluation: random and ERM (1 epoch), seed 0, every
    detector, 32 px, on tiny PhotoDigits."""
    from envad.server.detectors import registry
    from envad.training.evaluate import EvalConfig, run_evaluation

    def configured(out: Path) -> EvalConfig:
        return EvalConfig(data=str(tiny_photodigits), algorithms=("random", "erm"),
                          detectors=tuple(registry.names()), seeds=(0,), out=out, size=32,
                          epochs=1, batch_size=16)

    out = built_once(tmp_path_factory, "smoke-report",
                     lambda folder: run_evaluation(configured(folder), progress=False))
    return configured(out), out


@pytest.fixture
def smoke_report_copy(smoke_report, tmp_path):
    """(config, out) of a copy of the smoke report in the test's folder (TMP/report), for
    tests that write in it: the shared one is read by tests on other workers."""
    config, out = smoke_report
    copy = tmp_path / "report"
    shutil.copytree(out, copy)
    return dataclasses.replace(config, out=copy), copy


@pytest.fixture
def folder_dataset(tmp_path) -> Path:
    return write_folder_dataset(tmp_path / "ds", folder_rows())


@pytest.fixture(scope="session")
def tiny_train_data(tiny_photodigits):
    """The tiny PhotoDigits training images at 16 px (108 images, 6 cameras)."""
    from envad.training.batches import TrainData
    from envad.training.data import load_folder

    ds = load_folder(tiny_photodigits)
    return TrainData(ds, ds.indices("train", normal_only=True), 16, ds.envs("train"))


@pytest.fixture(scope="session")
def finished_run(tiny_photodigits, tmp_path_factory):
    """A finished 2-epoch ERM run on tiny PhotoDigits (16 px)."""
    from envad.training.run import train

    runs = built_once(tmp_path_factory, "finished-run", lambda folder: train(
        tiny_config(tiny_photodigits, folder / "erm"), progress=False))
    return runs / "erm"
