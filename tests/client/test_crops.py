"""Scoring the detector's boxes (`--crops`): crops cut the right pixels, a MegaDetector
source yields one item per animal detection, and a backfill through a real server writes
one record per crop, joined back to its image in the MegaDetector output."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from client_archives import megadetector_errors
from envad.client import EnvadClient
from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.sources import open_source
from envad.client.sources.crops import CropItem, crop_bytes
from envad.errors import InvalidInput


def quadrants_png(width: int = 64, height: int = 48) -> bytes:
    """Four flat quadrants: red, green / blue, white."""
    pixels = np.zeros((height, width, 3), dtype=np.uint8)
    pixels[: height // 2, : width // 2] = (255, 0, 0)
    pixels[: height // 2, width // 2:] = (0, 255, 0)
    pixels[height // 2:, : width // 2] = (0, 0, 255)
    pixels[height // 2:, width // 2:] = (255, 255, 255)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def test_crop_bytes_cuts_the_box() -> None:
    crop = Image.open(io.BytesIO(crop_bytes(quadrants_png(), (0.5, 0.5, 0.5, 0.5))))
    assert crop.size == (32, 24)
    assert set(crop.getcolors() or []) == {(32 * 24, (255, 255, 255))}
    green = Image.open(io.BytesIO(crop_bytes(quadrants_png(), (0.5, 0.0, 0.25, 0.25))))
    assert green.size == (16, 12) and green.getpixel((3, 3)) == (0, 255, 0)
    with pytest.raises(OSError, match="cannot crop"):
        crop_bytes(b"not an image", (0, 0, 1, 1))


def make_detections_archive(root: Path) -> Path:
    (root / "camA").mkdir(parents=True)
    for name in ("a1.png", "a2.png"):
        (root / "camA" / name).write_bytes(quadrants_png())
    results = {
        "info": {"format_version": "1.4", "detector": "md_v5a.0.0.pt"},
        "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
        "images": [
            {"file": "camA\\a1.png", "detections": [
                {"category": "1", "conf": 0.9, "bbox": [0.0, 0.0, 0.5, 0.5]},
                {"category": "2", "conf": 0.8, "bbox": [0.5, 0.0, 0.5, 0.5]},
                {"category": "1", "conf": 0.6, "bbox": [0.5, 0.5, 0.5, 0.5]},
                {"category": "1", "conf": 0.1, "bbox": [0.0, 0.5, 0.5, 0.5]}]},
            {"file": "camA/a2.png", "detections": [
                {"category": "3", "conf": 0.9, "bbox": [0.0, 0.0, 1.0, 1.0]}]},
        ],
    }
    path = root / "md.json"
    path.write_text(json.dumps(results))
    return path


def test_megadetector_source_yields_one_crop_per_animal_detection(tmp_path) -> None:
    path = make_detections_archive(tmp_path / "md")
    items = list(open_source(path, crops=True, crop_min_conf=0.5))
    assert [i.key for i in items] == ["camA\\a1.png#0", "camA\\a1.png#2", "camA/a2.png"]
    first, third, empty = items
    assert isinstance(first, CropItem) and first.bbox == (0.0, 0.0, 0.5, 0.5)
    assert first.extra["image"] == "camA\\a1.png" and first.extra["detection"] == 0
    red = Image.open(io.BytesIO(first.read_bytes()))
    assert red.getpixel((5, 5)) == (255, 0, 0)
    assert empty.skip_reason == "no animal detection >= 0.5"
    assert "crops" in open_source(path, crops=True).describe()
    assert "crops" not in open_source(path).describe()   # old checkpoints stay resumable
    bad = json.loads(path.read_text())
    bad["images"][0]["detections"][0]["bbox"] = [0.1, 0.1]
    path.write_text(json.dumps(bad))
    with pytest.raises(InvalidInput, match="bbox must be"):
        list(open_source(path, crops=True))


def test_crop_scores_are_joined_back_to_their_image(fitted_server, tmp_path) -> None:
    path = make_detections_archive(tmp_path / "md")
    source = open_source(path, crops=True, crop_min_conf=0.5)
    jsonl, md = tmp_path / "crops.jsonl", tmp_path / "crops.json"
    with EnvadClient(fitted_server.address) as client:
        for out in (jsonl, md):
            summary = run_backfill(client, source, tmp_path / f"{out.suffix}.ck",
                                   BackfillOptions(scores=True, store=False), scores_out=out,
                                   progress=False)
            assert (summary.ok, sum(summary.skipped.values())) == (2, 1)
    rows = [json.loads(x) for x in jsonl.read_text().splitlines()]
    crops = {r["key"]: r for r in rows if r["status"] == "ok"}
    assert set(crops) == {"camA\\a1.png#0", "camA\\a1.png#2"}
    assert {r["source"]["image"] for r in crops.values()} == {"camA\\a1.png"}
    assert crops["camA\\a1.png#0"]["id"] != crops["camA\\a1.png#2"]["id"]  # crops' own bytes

    assert megadetector_errors(md, source.image_root) == []
    doc = json.loads(md.read_text())
    images = {im["file"]: im for im in doc["images"]}
    assert sorted(images) == ["camA/a1.png", "camA/a2.png"]
    image = images["camA/a1.png"]
    anomaly = doc["info"]["envad"]["classification_category"]
    scores = {c["detection"]: round(c["ensemble"], 4) for c in image["envad"]["crops"]}
    assert set(scores) == {0, 2}
    detections = image["detections"]
    assert detections[0]["classifications"] == [[anomaly, scores[0]]]
    assert detections[2]["classifications"] == [[anomaly, scores[2]]]
    assert "classifications" not in detections[1] and "classifications" not in detections[3]
    assert detections[4]["conf"] == max(scores.values())   # image level: the top crop
    assert images["camA/a2.png"]["detections"][0]["category"] == "3"   # carried, unscored


def test_crops_flags(fitted_server, tmp_path, capsys) -> None:
    from envad.client.cli import main

    path = make_detections_archive(tmp_path / "md")
    out = tmp_path / "scores.jsonl"
    assert main(["backfill", str(path), "--server", fitted_server.address, "--no-store",
                 "--scores-out", str(out), "--crops", "--crop-min-conf", "0.05",
                 "--no-progress", "--checkpoint", str(tmp_path / "ck.jsonl")]) == 0
    keys = {json.loads(x)["key"] for x in out.read_text().splitlines()}
    assert keys == {"camA\\a1.png#0", "camA\\a1.png#2", "camA\\a1.png#3", "camA/a2.png"}
    with pytest.raises(SystemExit, match="--crops runs on --engine service only"):
        main(["backfill", str(path), "--crops", "--engine", "ray", "--no-progress",
              "--data-dir", str(tmp_path / "data"), "--model-file", str(tmp_path / "m.onnx")])
