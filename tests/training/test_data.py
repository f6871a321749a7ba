"""Folder-format datasets: records, selection, decoding through the server's decoder, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from envad.errors import NotFound
from envad.server.images import decode_image
from envad.training.data import DatasetError, Record, load_dataset, load_folder
from training_datasets import folder_rows, write_folder_dataset


def test_records_carry_env_label_split_bucket(folder_dataset):
    ds = load_dataset(str(folder_dataset))
    assert ds.name == "ds" and len(ds) == 13
    first = ds.records[0]
    assert isinstance(first, Record)
    assert (first.env, first.label, first.split, first.bucket, first.is_anomaly) == \
        ("cam-a", "cat", "train", 0, False)
    assert first.id == first.path == "img/cam-a/0.png"   # id defaults to the path
    fox = [r for r in ds.records if r.label == "fox"]
    assert len(fox) == 1 and fox[0].bucket == -1 and fox[0].is_anomaly
    with pytest.raises(AttributeError):
        first.env = "other"   # frozen


def test_indices_and_envs_select(folder_dataset):
    ds = load_folder(folder_dataset)
    assert ds.envs() == ["cam-a", "cam-b", "cam-t"]
    assert ds.envs("train") == ["cam-a", "cam-b"]
    train = ds.indices("train", normal_only=True)
    assert len(train) == 8 and all(ds.records[i].split == "train" for i in train)
    assert list(ds.indices("test")) == [10, 11, 12]
    assert list(ds.indices("test", normal_only=True)) == [10, 11]
    assert list(ds.indices(envs=["cam-b"])) == list(range(5, 10))
    assert list(ds.buckets([0, 2, 12])) == [0, 1, -1]
    with pytest.raises(ValueError, match="unknown split"):
        ds.indices("holdout")


def test_images_are_decoded_by_the_server_decoder(folder_dataset):
    ds = load_folder(folder_dataset)
    batch = ds.images([3, 12], 8)
    assert batch.dtype == np.uint8 and batch.shape == (2, 8, 8, 3)
    np.testing.assert_array_equal(batch[1], decode_image(ds.read_bytes(12), 8))


def test_optional_columns_are_read(tmp_path):
    rows = folder_rows()
    for k, row in enumerate(rows):
        row.update(id=f"id{k}", timestamp=f"2024-01-0{1 + k % 9}T00:00:00",
                   is_anomaly=str(row["label"] == "fox").lower())
    ds = load_folder(write_folder_dataset(tmp_path / "ds", rows))
    assert ds.records[12].id == "id12" and ds.records[12].is_anomaly
    assert ds.records[0].timestamp == "2024-01-01T00:00:00"


@pytest.mark.parametrize("mutate, message", [
    (lambda rows: [{k: v for k, v in r.items() if k != "env"} for r in rows],
     r"missing column\(s\) \['env'\]"),
    (lambda rows: [dict(r, split="holdout") if i == 3 else r for i, r in enumerate(rows)],
     "line 5: unknown split 'holdout'"),
    (lambda rows: [dict(r, _write=False) if i == 0 else r for i, r in enumerate(rows)],
     r"1 image file\(s\) .* do not exist"),
    (lambda rows: rows + [{"path": "img/x.png", "env": "cam-x", "label": "fox",
                           "split": "test"}],
     r"environment\(s\) \['cam-x'\] have no normal images"),
    (lambda rows: [dict(r, label="") if i == 1 else r for i, r in enumerate(rows)],
     "line 3: empty 'label'"),
    (lambda rows: [dict(r, id="same") for r in rows], "duplicate ids"),
    (lambda rows: [dict(r, is_anomaly="true") for r in rows], "disagrees with ad_spec"),
    (lambda rows: [dict(r, split="test") for r in rows], "no normal images in split 'train'"),
])
def test_bad_folders_raise_clear_errors(tmp_path, mutate, message):
    root = write_folder_dataset(tmp_path / "ds", mutate(folder_rows()))
    with pytest.raises(DatasetError, match=message):
        load_folder(root)


@pytest.mark.parametrize("spec, message", [
    ({"normal_a": ["cat"]}, "non-empty lists"),
    ({"normal_a": ["cat"], "normal_b": ["cat", "dog"]}, "in both normal_a and normal_b"),
])
def test_bad_ad_spec(tmp_path, spec, message):
    root = write_folder_dataset(tmp_path / "ds", folder_rows(), spec=spec)
    with pytest.raises(DatasetError, match=message):
        load_folder(root)


def test_missing_files_and_folders(tmp_path, folder_dataset):
    with pytest.raises(NotFound):
        load_dataset(str(tmp_path / "nowhere"))
    (folder_dataset / "ad_spec.json").unlink()
    with pytest.raises(DatasetError, match="ad_spec.json is missing"):
        load_folder(folder_dataset)
    (folder_dataset / "ad_spec.json").write_text("{not json")
    with pytest.raises(DatasetError, match="not valid JSON"):
        load_folder(folder_dataset)
    (folder_dataset / "ad_spec.json").write_text(json.dumps({"normal_a": [1], "normal_b": [2]}))
    (folder_dataset / "metadata.csv").unlink()
    with pytest.raises(DatasetError, match="metadata.csv is missing"):
        load_folder(folder_dataset)
