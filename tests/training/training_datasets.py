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
