"""The embedding probe (training/probe.py): class and camera k-NN accuracy per encoder,
on real ONNX files and a real PhotoDigits folder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from envad.errors import InvalidInput
from envad.training.data import load_folder
from envad.training.photodigits import generate
from envad.training.probe import main, probe
from tiny_encoder import build_tiny_encoder


@pytest.fixture(scope="module")
def photodigits(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("probe") / "pd", 32, 0, progress=False,
                    train_per_camera=60, test_per_camera=5)


def test_a_colour_statistics_encoder_holds_the_camera_not_the_class(photodigits, tmp_path):
    # the tiny encoder is one 3x3 convolution and a global average pool: what it keeps
    # of an image is mostly its colours, that is the camera's style
    encoder = build_tiny_encoder(tmp_path / "tiny.onnx", dim=16)
    ds = load_folder(photodigits)
    (result,) = probe(ds, [encoder])
    assert result.cameras == 6 and result.classes == 6
    assert result.val_rows == len(ds.indices("val", normal_only=True)) == 36
    assert result.reference_rows == len(ds.indices("train", normal_only=True)) == 324
    assert result.camera_knn_acc > 0.8
    assert result.class_knn_acc < 0.5 < result.camera_knn_acc


def test_encoders_are_probed_on_the_same_images_in_order(photodigits, tmp_path):
    first = build_tiny_encoder(tmp_path / "a.onnx", dim=16, seed=0)
    second = build_tiny_encoder(tmp_path / "b.onnx", dim=16, seed=1, model_id="tiny-b")
    ds = load_folder(photodigits)
    results = probe(ds, [first, second, first])
    assert [r.encoder for r in results] == [str(first), str(second), str(first)]
    assert results[0] == results[2]                      # deterministic
    smaller = probe(ds, [first], reference_rows=50)[0]
    assert smaller.reference_rows == 50 and smaller.val_rows == 36


def test_the_command_prints_a_table_and_writes_json(photodigits, tmp_path, capsys):
    encoder = build_tiny_encoder(tmp_path / "tiny.onnx", dim=16)
    assert main(["--data", str(photodigits), "--encoder", str(encoder),
                 "--json", str(tmp_path / "probe.json")]) == 0
    out = capsys.readouterr().out
    assert "| encoder | class k-NN acc | camera k-NN acc |" in out
    assert "36 val images voting among 324 train images (k = 10)" in out
    (row,) = json.loads((tmp_path / "probe.json").read_text())
    assert row["encoder"] == str(encoder) and 0 <= row["class_knn_acc"] <= 1
    assert f"| {encoder} | {100 * row['class_knn_acc']:.1f} |" in out


def test_a_dataset_without_val_normals_is_refused(photodigits, tmp_path):
    ds = load_folder(photodigits)
    no_val = ds.without(envs=sorted({r.env for r in ds.records}))
    with pytest.raises(InvalidInput, match="normal images in the train and val"):
        probe(no_val, [build_tiny_encoder(tmp_path / "tiny.onnx", dim=16)])
    assert np.isfinite(probe(ds, [tmp_path / "tiny.onnx"])[0].class_knn_acc)
