"""Score outputs: every registered writer renders the same records; formats are valid."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from client_archives import (
    make_camtrap_dp,
    make_folder_dataset,
    make_image_tree,
    make_megadetector_json,
    make_windows_megadetector_json,
    megadetector_errors,
)
from envad.client import EnvadClient
from envad.client.backfill import run_backfill
from envad.client.backfill_plan import BackfillOptions
from envad.client.sources import open_source
from envad.client.writers import WRITERS, format_for, write_scores
from envad.client.writers_megadetector import image_file
from envad.errors import InvalidInput

RECORDS: list[dict] = [
    {"key": "camA/a1.png", "id": "aa", "env": "camA", "label": "", "split": "archive",
     "uri": "/x/camA/a1.png", "timestamp": "2024-01-01T00:00:00+00:00", "status": "ok",
     "code": "", "reason": "", "ensemble": 0.9, "is_anomaly": True, "threshold": 0.8,
     "detectors": {"KNN": {"raw": 3.5, "calibrated": 0.95},
                   "LOF5": {"raw": 1.2, "calibrated": 0.85}},
     "model_id": "m1", "bundle_id": "b1",
     "source": {"detections": [{"category": "1", "conf": 0.9, "bbox": [0, 0, 1, 1]}],
                "deploymentID": "dep1", "mediaID": "a1"}},
    {"key": "camA/a2.png", "id": "bb", "env": "camA", "label": "", "split": "archive",
     "uri": "/x/camA/a2.png", "timestamp": None, "status": "failed", "code": "INVALID_ARGUMENT",
     "reason": "cannot decode image", "ensemble": None, "is_anomaly": None, "threshold": None,
     "detectors": None, "model_id": "", "bundle_id": "", "source": {"is_anomaly": False}},
    {"key": "camB/b1.png", "id": "", "env": "camB", "label": "", "split": "archive",
     "uri": "/x/camB/b1.png", "timestamp": None, "status": "skipped", "code": "",
     "reason": "no detection >= 0.2", "ensemble": None, "is_anomaly": None, "threshold": None,
     "detectors": None, "model_id": "", "bundle_id": "", "source": {"detections": []}},
]


SUFFIX = {"jsonl": ".jsonl", "csv": ".csv", "megadetector": ".json", "camtrap-dp": ".csv"}


def render(tmp_path, fmt):
    path = tmp_path / f"scores{SUFFIX[fmt]}"
    n = write_scores(path, lambda: iter(RECORDS), fmt,
                     info={"megadetector_info": {"detector": "md_v5a.0.0.pt"},
                           "image_root": "/x"})
    assert n == len(RECORDS)
    assert not list(tmp_path.glob("*.partial"))
    return path


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_every_writer_writes_every_record(tmp_path, fmt) -> None:
    path = render(tmp_path, fmt)
    if fmt == "camtrap-dp":  # one observation per scored image only
        assert "dep1" in path.read_text() and "camB" not in path.read_text()
        return
    assert format_for(path) == fmt
    assert "camB/b1.png" in path.read_text()


def test_jsonl_round_trips(tmp_path) -> None:
    lines = render(tmp_path, "jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == RECORDS


def test_csv_columns(tmp_path) -> None:
    with render(tmp_path, "csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows[0]["raw_KNN"] == "3.5" and rows[0]["cal_LOF5"] == "0.85"
    assert rows[0]["is_anomaly"] == "true"
    assert rows[1]["status"] == "failed" and rows[1]["raw_KNN"] == ""
    assert rows[1]["source_is_anomaly"] == "false"
    assert "source_detections" not in rows[0]  # lists are left out of CSV


def test_megadetector_format(tmp_path) -> None:
    doc = json.loads(render(tmp_path, "megadetector").read_text())
    assert doc["info"]["format_version"] == "1.4"
    assert doc["info"]["detector"] == "md_v5a.0.0.pt"
    assert doc["info"]["envad"]["detectors"] == ["KNN", "LOF5"]
    assert doc["detection_categories"] == {"1": "animal", "2": "person", "3": "vehicle",
                                           "4": "envad anomaly"}
    assert doc["classification_categories"] == {"1": "envad anomaly"}
    ok, failed, skipped = doc["images"]
    animal, image_level = ok["detections"]
    assert animal["conf"] == 0.9 and animal["classifications"] == [["1", 0.9]]
    assert image_level == {"category": "4", "conf": 0.9, "bbox": [0.0, 0.0, 1.0, 1.0],
                           "classifications": [["1", 0.9]]}
    assert ok["envad"]["ensemble"] == 0.9 and ok["envad"]["detectors"]["KNN"]["calibrated"] == 0.95
    assert failed == {"file": "camA/a2.png", "failure": "cannot decode image", "detections": None}
    assert skipped == {"file": "camB/b1.png", "detections": []}


def test_megadetector_anomaly_category_takes_a_free_id_and_keeps_the_source_ones(
        tmp_path) -> None:
    path = tmp_path / "scores.json"
    write_scores(path, lambda: iter(RECORDS[:1]), info={
        "detection_categories": {"1": "animal", "2": "person", "3": "vehicle"},
        "classification_categories": {"1": "red fox", "7": "badger"}, "image_root": "/x"})
    doc = json.loads(path.read_text())
    assert doc["classification_categories"] == {"1": "red fox", "7": "badger",
                                                "8": "envad anomaly"}
    assert doc["images"][0]["detections"][0]["classifications"] == [["8", 0.9]]


@pytest.mark.parametrize(("uri", "root", "expected"), [
    ("/data/cams/camA/a1.png", "/data/cams", "camA/a1.png"),
    ("/elsewhere/a1.png", "/data/cams", "/elsewhere/a1.png"),
    ("https://example.org/m/a1.jpg", "/data/cams", "https://example.org/m/a1.jpg"),
    ("", "/data/cams", "camA/a1.png"),
])
def test_megadetector_file_is_relative_to_the_image_root(uri, root, expected) -> None:
    assert image_file({"key": "camA/a1.png", "uri": uri}, root) == expected


def test_unknown_suffix_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(InvalidInput, match="scores format"):
        format_for(tmp_path / "scores.xlsx")
    with pytest.raises(InvalidInput, match="unknown scores format"):
        format_for(tmp_path / "scores.csv", "xml")


# ------------------------------------------------------------------ through a real server

ARCHIVES: dict[str, Callable[[Path], Path]] = {
    "folder": make_folder_dataset,
    "image-tree": make_image_tree,
    "camtrap-dp": make_camtrap_dp,
    "megadetector": make_megadetector_json,
    "megadetector-windows": make_windows_megadetector_json,
}


@pytest.mark.parametrize("kind", sorted(ARCHIVES))
def test_megadetector_validator_accepts_the_output_and_every_file_resolves(
        fitted_server, tmp_path, kind) -> None:
    source = open_source(ARCHIVES[kind](tmp_path / "archive"))
    out = tmp_path / "scores.json"
    with EnvadClient(fitted_server.address) as client:
        summary = run_backfill(client, source, tmp_path / "ck.jsonl",
                               BackfillOptions(scores=True, store=False), scores_out=out,
                               progress=False)
    assert summary.ok >= 3 and summary.failed == 0
    assert megadetector_errors(out) == []
    from PIL import ImageFile

    assert ImageFile.LOAD_TRUNCATED_IMAGES is False   # the validator's import left no trace
    doc = json.loads(out.read_text())
    scored = [im for im in doc["images"] if "envad" in im]
    assert len(scored) == summary.ok
    anomaly_class = doc["info"]["envad"]["classification_category"]
    assert doc["classification_categories"][anomaly_class] == "envad anomaly"
    for image in doc["images"]:
        if image.get("failure"):
            continue
        assert (source.image_root / image["file"]).is_file(), image["file"]
        assert "\\" not in image["file"]
    for image in scored:
        assert image["detections"], image     # never an empty frame to Timelapse / AddaxAI
        for detection in image["detections"]:
            assert [anomaly_class, round(image["envad"]["ensemble"], 4)] in \
                detection["classifications"]
    if kind != "megadetector":  # no missing image: MegaDetector's own existence check too
        assert megadetector_errors(out, source.image_root) == []
    if kind == "megadetector-windows":  # the detections came over, the score beside them
        fox = next(im for im in scored if im["file"] == "dep-A1/IMG_0001.png")
        assert fox["detections"][0]["classifications"][0] == ["1", 0.8]
        assert doc["classification_categories"]["1"] == "red fox"
