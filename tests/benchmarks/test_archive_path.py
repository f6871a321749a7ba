"""The archive benchmark's folders: new content at its share, in bursts, with EXIF times."""

from __future__ import annotations

import csv
from pathlib import Path

from PIL import Image

from benchmarks.archive_path import build_archive, build_normals, chosen_scoring, shipped_scoring
from envad.client.sources.exif import exif_timestamp


def _dataset(root: Path) -> Path:
    """Two test cameras of 40 normal and 30 new images (3 classes), 10 train normals."""
    rows = []
    for env in ("cam-x", "cam-y"):
        for n in range(70):
            new = n >= 40
            path = f"images/{env}-{n}.png"
            (root / "images").mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), (n, 3 * n % 255, 0)).save(root / path)
            rows.append({"id": f"{env}-{n}", "path": path, "env": env,
                         "label": str(n % 3 if new else 9), "split": "test",
                         "is_anomaly": "true" if new else "false"})
    for n in range(10):
        path = f"images/train-{n}.png"
        Image.new("RGB", (8, 8), (0, n, 0)).save(root / path)
        rows.append({"id": f"train-{n}", "path": path, "env": "cam-t", "label": "9",
                     "split": "train", "is_anomaly": "false"})
    with open(root / "metadata.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return root


def test_the_archive_holds_its_share_of_new_content_in_timed_bursts(tmp_path):
    data = _dataset(tmp_path / "ds")
    archive = build_archive(data, tmp_path / "archive", share=0.1, burst=2, seed=0)
    for env in ("cam-x", "cam-y"):
        files = sorted((archive / env).iterdir())
        new = [f for f in files if f.name.startswith("NEW_")]
        assert len(files) - len(new) == 40 and len(new) == 4       # 10% of 44, bursts of 2
        times = {f.name: exif_timestamp(f.read_bytes()) for f in files}
        for f in new:                 # a burst's frames: 2 s apart, after a normal image
            place, frame = f.stem.split("_")[1:]
            assert (times[f.name] - times[f"IMG_{place}.JPG"]).total_seconds() == \
                60 + 2 * int(frame)
    assert build_archive(data, tmp_path / "again", share=0.1, burst=2, seed=0) and \
        sorted(p.name for p in (tmp_path / "again" / "cam-x").iterdir()) == \
        sorted(p.name for p in (archive / "cam-x").iterdir())
    normals = build_normals(data, tmp_path / "normals", "train")
    assert len(list((normals / "cam-t").iterdir())) == 10


def test_the_scoring_options_name_what_scan_fits_and_default_to_the_shipped_one():
    shipped = shipped_scoring()
    assert chosen_scoring("", "", "") == shipped
    named = chosen_scoring("center_l2", "IsoForest,KNN", "")
    assert named == {"space": "center_l2", "detectors": ["IsoForest", "KNN"],
                     "score_adaptation": shipped["score_adaptation"]}
