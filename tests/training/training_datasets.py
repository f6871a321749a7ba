"""Helpers for training tests: write small folder-format datasets."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from PIL import Image


def write_folder_dataset(root: Path, rows: list[dict], *, spec=None, size: int = 12) -> Path:
    """Write a folder-format dataset: one small PNG per row (colour from its index)."""
    root.mkdir(parents=True, exist_ok=True)
    for k, row in enumerate(rows):
        if row.get("_write", True):
            path = root / row["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            pixels = np.full((size, size, 3), (k * 37) % 256, dtype=np.uint8)
            pixels[: size // 2, :, 1] = (k * 11) % 256
            Image.fromarray(pixels).save(path)
    columns = [c for c in rows[0] if not c.startswith("_")]
    with open(root / "metadata.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    spec = spec if spec is not None else {"normal_a": ["cat"], "normal_b": ["dog"]}
    (root / "ad_spec.json").write_text(json.dumps(spec))
    return root


def folder_rows() -> list[dict]:
    """Two training cameras with both buckets, one test camera with an anomaly."""
    rows = []
    for env in ("cam-a", "cam-b"):
        for k, label in enumerate(["cat", "cat", "dog", "dog", "cat"]):
            split = "val" if k == 4 else "train"
            rows.append({"path": f"img/{env}/{k}.png", "env": env, "label": label,
                         "split": split})
    for k, label in enumerate(["cat", "dog", "fox"]):
        rows.append({"path": f"img/cam-t/{k}.png", "env": "cam-t", "label": label,
                     "split": "test"})
    return rows


def write_fake_iwildcam(root: Path) -> Path:
    """A small directory in the WILDS iWildCam v2.0 layout (metadata.csv, RELEASE file,
    JPEGs under train/), every label 0..130 present as WILDS requires.

    Locations: 0 and 1 train with 10 images per normal bucket (kept); 2 train with bucket
    a only (dropped); 3 test with normals and anomalies; 4 test anomalies only (dropped);
    5 OOD val (not used). Two anomalies in location 0's train split never enter training.
    """
    data = root / "iwildcam_v2.0"
    (data / "train").mkdir(parents=True)
    (data / "RELEASE_v2.0.txt").write_text("fabricated for tests\n")
    plan = ([("train", 0, y) for y in [*range(0, 10), *range(62, 72), 125, 126]]
            + [("train", 1, y) for y in [*range(10, 20), *range(72, 82)]]
            + [("train", 2, y) for y in range(20, 30)]
            + [("id_val", 0, y) for y in [*range(30, 35), *range(82, 87)]]
            + [("id_val", 2, 35)]
            + [("test", 3, y) for y in [*range(36, 46), *range(87, 97), 127, 128]]
            + [("test", 4, y) for y in (129, 130)]
            + [("val", 5, y) for y in [*range(46, 62), *range(97, 125)]])
    rows = []
    for k, (split, location, y) in enumerate(plan):
        name = f"{k:08x}.jpg"
        pixels = np.full((24, 32, 3), (location * 40, y % 256, k % 256), dtype=np.uint8)
        Image.fromarray(pixels).save(data / "train" / name, quality=90)
        rows.append({"split": split, "location_remapped": location, "y": y, "filename": name,
                     "sequence_remapped": k, "location": 100 + location,
                     "datetime": f"2013-06-{1 + k % 28:02d} 12:{k % 60:02d}:05.000"})
    with open(data / "metadata.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return root
