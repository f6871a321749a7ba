"""Score outputs: every registered writer renders the same records; formats are valid."""

from __future__ import annotations

import csv
import json

import pytest

from envad.client.writers import WRITERS, format_for, write_scores
from envad.errors import InvalidInput

RECORDS = [
    {"key": "camA/a1.png", "id": "aa", "env": "camA", "label": "", "split": "archive",
     "uri": "/x/camA/a1.png", "timestamp": "2024-01-01T00:00:00+00:00", "status": "ok",
     "code": "", "reason": "", "ensemble": 0.9, "is_anomaly": True, "threshold": 0.8,
     "detectors": {"KNN": {"raw": 3.5, "calibrated": 0.95},
                   "LOF5": {"raw": 1.2, "calibrated": 0.85}},
     "model_id": "m1", "bundle_id": "b1",
     "source": {"detections": [{"category": "1", "conf": 0.9, "bbox": [0, 0, 1, 1]}]}},
    {"key": "camA/a2.png", "id": "bb", "env": "camA", "label": "", "split": "archive",
     "uri": "/x/camA/a2.png", "timestamp": None, "status": "failed", "code": "INVALID_ARGUMENT",
     "reason": "cannot decode image", "ensemble": None, "is_anomaly": None, "threshold": None,
     "detectors": None, "model_id": "", "bundle_id": "", "source": {"is_anomaly": False}},
    {"key": "camB/b1.png", "id": "", "env": "camB", "label": "", "split": "archive",
     "uri": "/x/camB/b1.png", "timestamp": None, "status": "skipped", "code": "",
     "reason": "no detection >= 0.2", "ensemble": None, "is_anomaly": None, "threshold": None,
     "detectors": None, "model_id": "", "bundle_id": "", "source": {"detections": []}},
]


def render(tmp_path, fmt):
    suffix = {"jsonl": ".jsonl", "csv": ".csv", "megadetector": ".json"}[fmt]
    path = tmp_path / f"scores{suffix}"
    n = write_scores(path, lambda: iter(RECORDS),
                     info={"megadetector_info": {"detector": "md_v5a.0.0.pt"}})
    assert n == len(RECORDS)
    assert not list(tmp_path.glob("*.partial"))
    return path


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_every_writer_writes_every_record(tmp_path, fmt) -> None:
    path = render(tmp_path, fmt)
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
    assert doc["detection_categories"] == {"1": "animal", "2": "person", "3": "vehicle"}
    ok, failed, skipped = doc["images"]
    assert ok["detections"][0]["conf"] == 0.9
    assert ok["envad"]["ensemble"] == 0.9 and ok["envad"]["detectors"]["KNN"]["calibrated"] == 0.95
    assert failed == {"file": "camA/a2.png", "failure": "cannot decode image", "detections": None}
    assert skipped == {"file": "camB/b1.png", "detections": []}


def test_unknown_suffix_is_a_clear_error(tmp_path) -> None:
    with pytest.raises(InvalidInput, match="scores format"):
        format_for(tmp_path / "scores.xlsx")
    with pytest.raises(InvalidInput, match="unknown scores format"):
        format_for(tmp_path / "scores.csv", "xml")
