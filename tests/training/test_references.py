"""Reference rows: content oracle (clean digits) and raw pixels, cached per settings."""

from __future__ import annotations

import json

import numpy as np

from envad.training.data import load_dataset
from envad.training.protocol import fit_indices
from envad.training.references import cached_reference_rows, reference_rows


def test_content_oracle_beats_raw_pixels(tiny_photodigits):
    dataset = load_dataset(str(tiny_photodigits))
    rows = reference_rows(dataset, fit_indices(dataset), dataset.indices(split="test"), 32)
    assert set(rows) == {"raw pixels", "content oracle"}
    for row in rows.values():
        assert 0.0 <= row["pooled"] <= 1.0 and 0.0 <= row["per_camera"] <= 1.0
    assert rows["content oracle"]["pooled"] > 0.8
    assert rows["content oracle"]["pooled"] > rows["raw pixels"]["pooled"] + 0.2


def test_fit_rows_are_capped(tiny_photodigits):
    dataset = load_dataset(str(tiny_photodigits))
    fit, test = fit_indices(dataset), dataset.indices(split="test")
    full = reference_rows(dataset, fit, test, 32)
    capped = reference_rows(dataset, fit, test, 32, max_fit=30)
    assert capped != full  # a 30-row sample is not the full reference set
    assert capped == reference_rows(dataset, fit, test, 32, max_fit=30)  # seeded


def test_rows_are_cached_per_settings(tiny_photodigits, tmp_path):
    dataset = load_dataset(str(tiny_photodigits))
    fit, test = fit_indices(dataset), dataset.indices(split="test")
    path = tmp_path / "references.json"
    first = cached_reference_rows(dataset, fit, test, 32, path)
    cached = json.loads(path.read_text())
    assert cached["rows"] == first and cached["key"]["size"] == 32
    cached["rows"]["raw pixels"]["pooled"] = -1.0  # marks the cached copy
    path.write_text(json.dumps(cached))
    assert cached_reference_rows(dataset, fit, test, 32, path)["raw pixels"]["pooled"] == -1.0
    again = cached_reference_rows(dataset, fit, test, 16, path)  # other settings: recomputed
    assert again["raw pixels"]["pooled"] != -1.0
    assert json.loads(path.read_text())["key"]["size"] == 16
    assert np.isclose(first["content oracle"]["pooled"], again["content oracle"]["pooled"])
