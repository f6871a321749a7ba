"""PhotoDigits: deterministic, in the folder format, with the BENCHMARK.md recipe."""

from __future__ import annotations

import csv
import filecmp
import json
from collections import Counter

import numpy as np
import pytest

from envad.training.data import load_folder
from envad.training.photodigits import (
    ANOMALIES,
    TEST_CAMERAS,
    TRAIN_CAMERAS,
    generate,
    load_content,
)


def _files(root):
    return sorted(p.relative_to(root) for p in root.rglob("*") if p.is_file())


def test_layout_and_loader(tiny_photodigits):
    ds = load_folder(tiny_photodigits)
    assert ds.envs("train") == sorted(c.env for c in TRAIN_CAMERAS)
    assert ds.envs("test") == sorted(c.env for c in TEST_CAMERAS) == \
        ["cam-coins", "cam-moon", "cam-rocket"]
    assert len(ds) == 6 * 20 + 3 * 10 + 6 * 3   # + id_test: a third of test_per_camera
    # training cameras: normals only in train/val, 10% val; test cameras: 40% anomalies
    assert not any(r.is_anomaly for r in ds.records if r.split in ("train", "val"))
    id_test = [r for r in ds.records if r.split == "id_test"]
    assert {r.env for r in id_test} == set(ds.envs("train"))
    assert sum(r.is_anomaly for r in id_test) == 6 * 1
    assert Counter(r.split for r in ds.records if r.env == "cam-grass") == \
        {"train": 18, "val": 2, "id_test": 3}
    test = [r for r in ds.records if r.split == "test"]
    assert sum(r.is_anomaly for r in test) == 3 * 4
    assert all((int(r.label) in ANOMALIES) == r.is_anomaly for r in ds.records)
    assert ds.images([0], 32).shape == (1, 32, 32, 3)
    meta = json.loads((tiny_photodigits / "photodigits.json").read_text())
    assert meta["name"] == "photodigits-32" and meta["seed"] == 0


def test_content_side_file_matches_ids(tiny_photodigits):
    content = load_content(tiny_photodigits)
    with open(tiny_photodigits / "metadata.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert set(content) == {r["id"] for r in rows}
    digit = content[rows[0]["id"]]
    assert digit.shape == (8, 8) and digit.max() <= 16
    from sklearn.datasets import load_digits

    digits = load_digits()
    matches = np.flatnonzero((digits.images == digit).all(axis=(1, 2)))
    assert str(digits.target[matches[0]]) == rows[0]["label"]


def test_test_cameras_never_reuse_training_digits(tiny_photodigits):
    content = load_content(tiny_photodigits)
    ds = load_folder(tiny_photodigits)
    train = {content[r.id].tobytes() for r in ds.records if r.split in ("train", "val")}
    test = {content[r.id].tobytes() for r in ds.records if r.split in ("test", "id_test")}
    assert train and test and not train & test


def test_deterministic_for_a_seed(tmp_path, tiny_photodigits):
    again = generate(tmp_path / "again", 32, 0, progress=False, train_per_camera=20,
                     test_per_camera=10)
    files = _files(tiny_photodigits)
    assert files == _files(again)
    _, mismatch, errors = filecmp.cmpfiles(tiny_photodigits, again, [str(f) for f in files],
                                           shallow=False)
    assert not mismatch and not errors
    other = generate(tmp_path / "other", 32, 1, progress=False, train_per_camera=20,
                     test_per_camera=10)
    assert (other / "metadata.csv").read_bytes() != (again / "metadata.csv").read_bytes()


def test_camera_bucket_mix_is_skewed(tmp_path):
    root = generate(tmp_path / "pd", 32, 3, progress=False, train_per_camera=200,
                    test_per_camera=5)
    ds = load_folder(root)
    for camera in TRAIN_CAMERAS:
        buckets = ds.buckets(ds.indices(envs=[camera.env]))
        assert abs((buckets == 0).mean() - camera.p_a) < 0.1, camera.env


def test_size_64_and_bad_arguments(tmp_path):
    root = generate(tmp_path / "pd64", 64, 0, progress=False, train_per_camera=10,
                    test_per_camera=5)
    assert load_folder(root).images([0], 64).shape == (1, 64, 64, 3)
    from PIL import Image

    assert Image.open(root / load_folder(root).records[0].path).size == (64, 64)
    with pytest.raises(ValueError, match="32 or 64"):
        generate(tmp_path / "x", 48)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("user data")
    with pytest.raises(FileExistsError):
        generate(tmp_path / "busy", 32)
