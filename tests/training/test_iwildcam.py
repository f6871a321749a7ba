"""iWildCam through `wilds` with the paper's AD split, on a fabricated directory."""

from __future__ import annotations

from collections import Counter

import pytest

from envad.errors import NotFound
from envad.training.data import DatasetError, load_dataset
from envad.training.iwildcam import IWildCamSplit, kept_locations
from training_datasets import write_fake_iwildcam


@pytest.fixture(scope="module")
def fake_root(tmp_path_factory):
    return write_fake_iwildcam(tmp_path_factory.mktemp("wilds"))


def test_ad_split(fake_root):
    ds = load_dataset(f"iwildcam:{fake_root}?min_per_bucket=5")
    assert ds.name == "iwildcam"
    assert ds.envs("train") == ["loc-0", "loc-1"]           # loc-2 lacks bucket b
    assert ds.envs("val") == ["loc-0"]
    assert ds.envs("test") == ["loc-3"]                     # loc-4 has no normals
    assert Counter(r.split for r in ds.records) == {"train": 40, "val": 10, "test": 22}
    train = [r for r in ds.records if r.split != "test"]
    assert not any(r.is_anomaly for r in train)             # anomalies never train
    assert Counter(r.bucket for r in train if r.split == "train") == {0: 20, 1: 20}
    test = [r for r in ds.records if r.split == "test"]
    assert {r.label for r in test if r.is_anomaly} == {"127", "128"}
    for r in ds.records:
        y = int(r.label)
        assert r.bucket == (0 if y < 62 else 1 if y < 125 else -1)
    first = ds.records[0]
    assert first.timestamp.startswith("2013-06-") and first.env == "loc-0"
    assert ds.images([0], 16).shape == (1, 16, 16, 3)


def test_options_change_the_split(fake_root):
    ds = load_dataset(f"iwildcam:{fake_root}?min_per_bucket=5&bucket_boundary=20")
    by_label = {r.label: r for r in ds.records}
    assert by_label["5"].bucket == 0 and by_label["36"].bucket == 1   # 36 was normal_a
    ds = load_dataset(f"iwildcam:{fake_root}?min_per_bucket=5&normal_max=128")
    assert not {r.label: r for r in ds.records}["127"].is_anomaly


def test_errors(fake_root, tmp_path):
    with pytest.raises(DatasetError, match="lower min_per_bucket"):
        load_dataset(f"iwildcam:{fake_root}")               # default 20 keeps nothing
    with pytest.raises(DatasetError, match="unknown iwildcam option"):
        load_dataset(f"iwildcam:{fake_root}?min_samples=3")
    with pytest.raises(DatasetError, match="must be an integer"):
        load_dataset(f"iwildcam:{fake_root}?min_per_bucket=many")
    with pytest.raises(DatasetError, match="bucket_boundary"):
        IWildCamSplit(bucket_boundary=200)
    with pytest.raises(NotFound, match="RELEASE_v2.0.txt"):
        load_dataset(f"iwildcam:{tmp_path}")


def test_kept_locations():
    import numpy as np

    locations = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])
    buckets = np.array([0, 1, 1, 0, 0, 0, 1, 0, 1])
    assert kept_locations(locations, buckets, 1) == [0, 2]
    assert kept_locations(locations, buckets, 2) == [2]
