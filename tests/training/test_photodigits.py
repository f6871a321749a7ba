"""PhotoDigits: deterministic, in the folder format, with the BENCHMARK.md recipe (and
the holdout recipe beside it)."""

from __future__ import annotations

import csv
import filecmp
import hashlib
import json
from collections import Counter

import numpy as np
import pytest

from envad.training.data import load_folder
from envad.training.photodigits import HOLDOUT, RECIPES, STANDARD, generate, load_content

TRAIN_CAMERAS, TEST_CAMERAS, ANOMALIES = (STANDARD.train_cameras, STANDARD.test_cameras,
                                          STANDARD.anomalies)


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


def test_the_standard_recipe_stays_the_benchmark(tiny_photodigits):
    """The standard recipe draws exactly what it drew when every reported number was
    measured: the same images, labels and splits (sha256 of metadata.csv and of the
    digits behind the images, for seed 0 at the tiny counts)."""
    assert STANDARD.anomalies == (6, 7, 8, 9)
    metadata = hashlib.sha256((tiny_photodigits / "metadata.csv").read_bytes()).hexdigest()
    assert metadata == "ee3086c2198f4f117198a1d314272b83b1ddb697fc6150da17804de8629c204c"
    with np.load(tiny_photodigits / "digits.npz") as data:
        digits = hashlib.sha256(data["digits"].tobytes()).hexdigest()
    assert digits == "943dcc8536746c4b8e0182e2c404d96a41d86007a6b8f54514d258ff249fcdb5"


def test_the_holdout_recipe_shares_nothing_but_the_layout(tmp_path):
    root = generate(tmp_path / "holdout", 32, 0, progress=False, train_per_camera=20,
                    test_per_camera=10, recipe="holdout")
    ds = load_folder(root)
    assert ds.envs("train") == sorted(c.env for c in HOLDOUT.train_cameras)
    assert ds.envs("test") == sorted(c.env for c in HOLDOUT.test_cameras)
    standard_photos = {c.photo for c in STANDARD.cameras}
    assert len({c.photo for c in HOLDOUT.cameras}) == 9
    assert not standard_photos & {c.photo for c in HOLDOUT.cameras}
    assert set(HOLDOUT.normal_a + HOLDOUT.normal_b).isdisjoint(HOLDOUT.anomalies)
    assert len(HOLDOUT.anomalies) == 4 and HOLDOUT.anomalies != STANDARD.anomalies
    # the folder says which digits are normal: loaders need no recipe
    spec = json.loads((root / "ad_spec.json").read_text())
    assert spec == {"normal_a": ["1", "4", "7"], "normal_b": ["0", "8", "9"]}
    assert not any(r.is_anomaly for r in ds.records if r.split in ("train", "val"))
    assert all((int(r.label) in HOLDOUT.anomalies) == r.is_anomaly for r in ds.records)
    assert sum(r.is_anomaly for r in ds.records if r.split == "test") == 3 * 4
    buckets = ds.buckets(ds.indices("train", normal_only=True))
    labels = np.array([int(ds.records[i].label) for i in ds.indices("train", normal_only=True)])
    assert set(labels[buckets == 0]) <= set(HOLDOUT.normal_a)
    assert set(labels[buckets == 1]) <= set(HOLDOUT.normal_b)
    meta = json.loads((root / "photodigits.json").read_text())
    assert meta["recipe"] == "holdout" and meta["name"] == "photodigits-holdout-32"
    assert ds.images([0], 32).shape == (1, 32, 32, 3)
    again = generate(tmp_path / "again", 32, 0, progress=False, train_per_camera=20,
                     test_per_camera=10, recipe="holdout")
    assert (again / "metadata.csv").read_bytes() == (root / "metadata.csv").read_bytes()


def test_an_unknown_recipe_is_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown PhotoDigits recipe 'nope'; known: "
                                         + ", ".join(RECIPES)):
        generate(tmp_path / "x", 32, recipe="nope")
    assert not (tmp_path / "x").exists()
