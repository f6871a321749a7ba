"""MegaDetector batch output (format 1.4) with envad's scores, for Timelapse and AddaxAI.

`info`, `detection_categories`, `classification_categories` and `images`; `file` is the
image's path relative to the source's image root (the writer's `info["image_root"]`),
with `/` separators, so it resolves for every source kind; an image that could not be
processed has a `failure` string and `detections: null`; videos (skipped by the sources)
are left out, as the format lists a video with its frames.

The anomaly score reaches the tools as a classification category "envad anomaly":
every detection carried over from a MegaDetector source gets the classification
`[id, ensemble]`, and every scored image gets one image-level detection of the detection
category "envad anomaly" (box = the whole image, `conf` = the ensemble score) classified
the same way, so the tools can filter images on the score whether or not a detector
found an animal. When crops were scored (`--crops`), each crop's score classifies its own
detection and the image-level detection carries the highest crop score.

envad's detail is in extension fields that MegaDetector tools ignore: `images[].envad` =
{"id", "env", "ensemble", "is_anomaly", "threshold", "detectors": {name: {"raw",
"calibrated"}}, "bundle_id", "crops" (with --crops: per crop "detection", "id", "ensemble",
"is_anomaly", "detectors", or "failure"), "event" (with --group-events: "id", "size",
"ensemble", "is_anomaly" of the image's event), "file_public" (only when false)} and
`info.envad` = {"model_id", "bundle_id", "detectors", "score_semantics", "image_root",
"detection_category", "classification_category"}.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from envad.client.writers import SCORE_SEMANTICS, ScoreRecord, register_writer

MEGADETECTOR_FORMAT_VERSION = "1.4"
DEFAULT_DETECTION_CATEGORIES = {"1": "animal", "2": "person", "3": "vehicle"}
ANOMALY_CATEGORY = "envad anomaly"
VIDEO_SUFFIXES = frozenset({".mp4", ".avi", ".mov", ".mkv", ".wmv", ".m4v", ".mpg", ".mpeg",
                            ".asf", ".mts", ".webm"})
WHOLE_IMAGE_BOX = [0.0, 0.0, 1.0, 1.0]


@dataclass(frozen=True)
class _AnomalyIds:
    """The category ids the anomaly score is written under."""

    detection: str
    classification: str


@register_writer("megadetector")
def write_megadetector(
    path: Path, records: Callable[[], Iterable[ScoreRecord]], info: dict
) -> int:
    """MegaDetector batch-output JSON (see the module docstring); returns the number of
    image entries."""
    detection_categories = {str(k): str(v) for k, v in (
        info.get("detection_categories") or DEFAULT_DETECTION_CATEGORIES).items()}
    classification_categories = {str(k): str(v) for k, v in (
        info.get("classification_categories") or {}).items()}
    anomaly = _AnomalyIds(
        detection=_category_id(detection_categories, ANOMALY_CATEGORY),
        classification=_category_id(classification_categories, ANOMALY_CATEGORY),
    )
    detection_categories[anomaly.detection] = ANOMALY_CATEGORY
    classification_categories[anomaly.classification] = ANOMALY_CATEGORY
    image_root = info.get("image_root")
    by_file: dict[str, list[ScoreRecord]] = {}   # crops join their image, in first-seen order
    detectors: dict[str, None] = {}
    model_ids: dict[str, None] = {}
    bundle_ids: dict[str, None] = {}
    for record in records():
        if Path(record.get("uri") or record["key"]).suffix.lower() in VIDEO_SUFFIXES:
            continue  # never read (not an image); MegaDetector lists videos with frames
        by_file.setdefault(image_file(record, image_root), []).append(record)
        detectors.update(dict.fromkeys(record.get("detectors") or {}))
        if record.get("model_id"):
            model_ids[record["model_id"]] = None
        if record.get("bundle_id"):
            bundle_ids[record["bundle_id"]] = None
    images = [_image_entry(file, group, anomaly) for file, group in by_file.items()]
    document = {
        "info": {
            **dict(info.get("megadetector_info") or {}),
            "format_version": MEGADETECTOR_FORMAT_VERSION,
            "envad_completion_time": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            "envad": {
                "model_id": ",".join(model_ids),
                "bundle_id": ",".join(bundle_ids),
                "detectors": list(detectors),
                "score_semantics": SCORE_SEMANTICS,
                "image_root": str(image_root or ""),
                "detection_category": anomaly.detection,
                "classification_category": anomaly.classification,
            },
        },
        "detection_categories": detection_categories,
        "classification_categories": classification_categories,
        "images": images,
    }
    with path.open("w", encoding="utf-8") as f:
        json.dump(document, f, indent=1, default=str)
        f.write("\n")
    return len(images)


def image_file(record: ScoreRecord, image_root: str | Path | None) -> str:
    """The record's image as a path relative to `image_root` with `/` separators (a URL
    stays a URL; a path outside the root stays absolute; no uri: the key)."""
    uri = record.get("uri") or ""
    if not uri:
        return record["key"]
    if "://" in uri or not image_root:
        return uri
    path = Path(uri)
    try:
        return path.relative_to(Path(image_root)).as_posix()
    except ValueError:
        return path.as_posix()


def _category_id(categories: dict[str, str], name: str) -> str:
    """The id of `name` in a category table, else the next free integer id."""
    for key, value in categories.items():
        if value == name:
            return key
    numbers = [int(k) for k in categories if k.isdigit()]
    return str(max(numbers, default=0) + 1)


def _image_entry(file: str, group: list[ScoreRecord], anomaly: _AnomalyIds) -> dict:
    crops = [r for r in group if "detection" in (r.get("source") or {})]
    if crops:
        return _cropped_image(file, crops, anomaly)
    return _whole_image(file, group[0], anomaly)


def _whole_image(file: str, record: ScoreRecord, anomaly: _AnomalyIds) -> dict:
    source = record.get("source") or {}
    entry: dict = {"file": file}
    status = record.get("status")
    source_detections = source.get("detections")
    if status == "failed" or (status == "skipped" and source_detections is None):
        entry["failure"] = record.get("reason") or status
        entry["detections"] = None
        return entry
    detections = [_detection(d) for d in source_detections or []]
    if status == "ok" and record.get("detectors") is not None:
        score = float(record["ensemble"])
        for detection in detections:
            _classify(detection, anomaly, score)
        detections.append(_image_level(anomaly, score))
        entry["envad"] = _scores(record)
    if source.get("filePublic") is False:
        entry.setdefault("envad", {})["file_public"] = False
    entry["detections"] = detections
    return entry


def _cropped_image(file: str, crops: list[ScoreRecord], anomaly: _AnomalyIds) -> dict:
    """One image entry from its crops' records: each scored crop classifies its own
    detection; the image-level detection carries the highest crop score."""
    detections = [_detection(d) for d in (crops[0].get("source") or {}).get("detections") or []]
    reports = []
    scored = []
    for record in crops:
        index = int(record["source"]["detection"])
        if record.get("status") == "ok" and record.get("detectors") is not None:
            score = float(record["ensemble"])
            if 0 <= index < len(detections):
                _classify(detections[index], anomaly, score)
            scored.append(record)
            reports.append({"detection": index, **_scores(record)})
        else:
            reports.append({"detection": index, "failure": record.get("reason")
                            or record.get("status")})
    entry: dict = {"file": file, "detections": detections}
    if scored:
        top = max(scored, key=lambda r: float(r["ensemble"]))
        detections.append(_image_level(anomaly, float(top["ensemble"])))
        entry["envad"] = {**_scores(top), "id": "", "crops": reports,
                          "is_anomaly": any(bool(r.get("is_anomaly")) for r in scored)}
    else:
        entry["envad"] = {"crops": reports}
    return entry


def _scores(record: ScoreRecord) -> dict:
    scores = {
        "id": record.get("id", ""),
        "env": record.get("env", ""),
        "ensemble": record.get("ensemble"),
        "is_anomaly": record.get("is_anomaly"),
        "threshold": record.get("threshold"),
        "detectors": record.get("detectors"),
        "bundle_id": record.get("bundle_id", ""),
    }
    if "event" in record:
        scores["event"] = {"id": record["event"], "size": record.get("event_size"),
                           "ensemble": record.get("event_ensemble"),
                           "is_anomaly": record.get("event_is_anomaly")}
    return scores


def _classify(detection: dict, anomaly: _AnomalyIds, score: float) -> None:
    detection["classifications"] = [*(detection.get("classifications") or []),
                                    [anomaly.classification, round(score, 4)]]


def _image_level(anomaly: _AnomalyIds, score: float) -> dict:
    return {"category": anomaly.detection, "conf": round(score, 4),
            "bbox": list(WHOLE_IMAGE_BOX),
            "classifications": [[anomaly.classification, round(score, 4)]]}


def _detection(detection: dict) -> dict:
    """A carried-over detection with a float `conf` (the format requires one)."""
    copy = dict(detection)
    if isinstance(copy.get("conf"), int):
        copy["conf"] = float(copy["conf"])
    return copy
