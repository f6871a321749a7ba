"""Per-image score outputs of a backfill: JSON lines, CSV, MegaDetector batch JSON, or
Camtrap DP observations (envad.client.writers_camtrap).

Every writer takes the same score records (plain dicts, see `ScoreRecord` fields below)
and writes atomically (temporary file + rename), so a reader never sees half a file.

Record fields: key, id, env, label, split, uri, timestamp (ISO 8601 or None), status
("ok", "failed", "skipped"), code, reason, ensemble, is_anomaly, threshold, detectors
({name: {"raw": float, "calibrated": float}}), model_id, bundle_id, space (the bundle's
space step), adaptation (how it placed the camera: fit, camera, global), source (the
source's extra values, e.g. {"is_anomaly": true}, MegaDetector "detections", Camtrap DP
"deploymentID", "mediaID" and "filePublic").

MegaDetector format 1.4: `info`, `detection_categories`, `classification_categories` and
`images`; `file` is the image's path relative to the source's image root (`info`
"image_root"), with `/` separators, so it resolves for every source kind; an image that
could not be processed has a `failure` string and `detections: null`; videos (skipped by
the sources) are left out, as the format lists a video with its frames. The anomaly score
reaches MegaDetector tools (Timelapse, AddaxAI) as a classification category
"envad anomaly": every detection carried over from a MegaDetector source gets the
classification `[id, ensemble]`, and every scored image gets one image-level detection of
the detection category "envad anomaly" (box = the whole image, `conf` = the ensemble
score) classified the same way, so the tools can filter images on the score whether or
not a detector found an animal. envad's detail is in extension fields that MegaDetector
tools ignore: `images[].envad` = {"id", "env", "ensemble", "is_anomaly", "threshold",
"detectors": {name: {"raw", "calibrated"}}, "file_public" (only when false)} and
`info.envad` = {"model_id", "bundle_id", "detectors", "score_semantics",
"classification_category", "detection_category"}.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from envad.errors import InvalidInput

ScoreRecord = dict
BASE_COLUMNS = (
    "key", "id", "env", "label", "split", "uri", "timestamp", "status", "code", "reason",
    "ensemble", "is_anomaly", "threshold", "model_id", "bundle_id", "space", "adaptation",
)
MEGADETECTOR_FORMAT_VERSION = "1.4"
DEFAULT_DETECTION_CATEGORIES = {"1": "animal", "2": "person", "3": "vehicle"}
SCORE_SEMANTICS = (
    "higher = more anomalous; 'raw' is the detector's own score, 'calibrated' its "
    "percentile among the detector bundle's fit-set scores in [0, 1]; 'ensemble' is the "
    "mean calibrated score and 'is_anomaly' is ensemble >= threshold"
)

Writer = Callable[[Path, Callable[[], Iterable[ScoreRecord]], dict], int]
WRITERS: dict[str, Writer] = {}
SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".json": "megadetector"}


def register_writer(name: str) -> Callable[[Writer], Writer]:
    def add(fn: Writer) -> Writer:
        if name in WRITERS:
            raise ValueError(f"duplicate writer {name!r}")
        WRITERS[name] = fn
        return fn

    return add


def format_for(path: str | Path, fmt: str = "auto") -> str:
    """The writer name for `path`: explicit `fmt`, else from the suffix."""
    if fmt != "auto":
        if fmt not in WRITERS:
            raise InvalidInput(f"unknown scores format {fmt!r}; known: {sorted(WRITERS)}")
        return fmt
    suffix = Path(path).suffix.lower()
    if suffix not in SUFFIXES:
        raise InvalidInput(
            f"cannot tell the scores format of {path}: use a .jsonl, .csv or .json "
            f"(MegaDetector) name, or pass --scores-format {sorted(WRITERS)}"
        )
    return SUFFIXES[suffix]


def write_scores(
    path: str | Path,
    records: Callable[[], Iterable[ScoreRecord]],
    fmt: str = "auto",
    info: dict | None = None,
) -> int:
    """Write score records to `path` atomically; returns the number of records.

    `records` is called once per pass (CSV needs two: columns first), so it should
    re-read its source rather than return a one-shot iterator.
    """
    path = Path(path)
    writer = WRITERS[format_for(path, fmt)]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:
        n = writer(tmp, records, info or {})
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return n


@register_writer("jsonl")
def write_jsonl(path: Path, records: Callable[[], Iterable[ScoreRecord]], info: dict) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for record in records():
            f.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")
            n += 1
    return n


@register_writer("csv")
def write_csv(path: Path, records: Callable[[], Iterable[ScoreRecord]], info: dict) -> int:
    """One row per image: base columns, then raw_<detector> and cal_<detector> per
    detector, then source_<name> for each scalar source value."""
    detectors: dict[str, None] = {}
    source_keys: dict[str, None] = {}
    for record in records():
        detectors.update(dict.fromkeys(record.get("detectors") or {}))
        for k, v in (record.get("source") or {}).items():
            if v is None or isinstance(v, (str, int, float, bool)):
                source_keys[k] = None
    columns = (
        list(BASE_COLUMNS)
        + [f"raw_{d}" for d in detectors]
        + [f"cal_{d}" for d in detectors]
        + [f"source_{k}" for k in source_keys]
    )
    n = 0
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        for record in records():
            row = {c: _csv_value(record.get(c)) for c in BASE_COLUMNS}
            for name, score in (record.get("detectors") or {}).items():
                row[f"raw_{name}"] = score["raw"]
                row[f"cal_{name}"] = score["calibrated"]
            for k in source_keys:
                row[f"source_{k}"] = _csv_value((record.get("source") or {}).get(k))
            writer.writerow(row)
            n += 1
    return n


def _csv_value(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


@register_writer("megadetector")
def write_megadetector(
    path: Path, records: Callable[[], Iterable[ScoreRecord]], info: dict
) -> int:
    """MegaDetector batch-output JSON (format 1.4) with the anomaly score as a
    classification category and envad extension fields (see the module docstring)."""
    detection_categories = {str(k): str(v) for k, v in (
        info.get("detection_categories") or DEFAULT_DETECTION_CATEGORIES).items()}
    classification_categories = {str(k): str(v) for k, v in (
        info.get("classification_categories") or {}).items()}
    anomaly = _MegaDetectorIds(
        detection=_category_id(detection_categories, ANOMALY_CATEGORY),
        classification=_category_id(classification_categories, ANOMALY_CATEGORY),
    )
    detection_categories[anomaly.detection] = ANOMALY_CATEGORY
    classification_categories[anomaly.classification] = ANOMALY_CATEGORY
    image_root = info.get("image_root")
    images = []
    detectors: dict[str, None] = {}
    model_ids: dict[str, None] = {}
    bundle_ids: dict[str, None] = {}
    for record in records():
        if Path(record.get("uri") or record["key"]).suffix.lower() in VIDEO_SUFFIXES:
            continue  # never read (not an image); MegaDetector lists videos with frames
        images.append(_megadetector_image(record, image_root, anomaly))
        detectors.update(dict.fromkeys(record.get("detectors") or {}))
        if record.get("model_id"):
            model_ids[record["model_id"]] = None
        if record.get("bundle_id"):
            bundle_ids[record["bundle_id"]] = None
    source_info = dict(info.get("megadetector_info") or {})
    document = {
        "info": {
            **source_info,
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


ANOMALY_CATEGORY = "envad anomaly"
VIDEO_SUFFIXES = frozenset({".mp4", ".avi", ".mov", ".mkv", ".wmv", ".m4v", ".mpg", ".mpeg",
                            ".asf", ".mts", ".webm"})
WHOLE_IMAGE_BOX = [0.0, 0.0, 1.0, 1.0]


@dataclass(frozen=True)
class _MegaDetectorIds:
    """The category ids the anomaly score is written under."""

    detection: str
    classification: str


def _category_id(categories: dict[str, str], name: str) -> str:
    """The id of `name` in a category table, else the next free integer id."""
    for key, value in categories.items():
        if value == name:
            return key
    numbers = [int(k) for k in categories if k.isdigit()]
    return str(max(numbers, default=0) + 1)


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


def _megadetector_image(record: ScoreRecord, image_root, anomaly: _MegaDetectorIds) -> dict:
    source = record.get("source") or {}
    entry: dict = {"file": image_file(record, image_root)}
    status = record.get("status")
    source_detections = source.get("detections")
    if status == "failed" or (status == "skipped" and source_detections is None):
        entry["failure"] = record.get("reason") or status
        entry["detections"] = None
        return entry
    detections = [_detection(d) for d in source_detections or []]
    if status == "ok" and record.get("detectors") is not None:
        score = float(record["ensemble"])
        classification = [anomaly.classification, round(score, 4)]
        for detection in detections:
            detection["classifications"] = [*(detection.get("classifications") or []),
                                            classification]
        detections.append({"category": anomaly.detection, "conf": round(score, 4),
                           "bbox": list(WHOLE_IMAGE_BOX),
                           "classifications": [classification]})
        entry["envad"] = {
            "id": record.get("id", ""),
            "env": record.get("env", ""),
            "ensemble": record.get("ensemble"),
            "is_anomaly": record.get("is_anomaly"),
            "threshold": record.get("threshold"),
            "detectors": record.get("detectors"),
        }
    if source.get("filePublic") is False:
        entry.setdefault("envad", {})["file_public"] = False
    entry["detections"] = detections
    return entry


def _detection(detection: dict) -> dict:
    """A carried-over detection with a float `conf` (the format requires one)."""
    copy = dict(detection)
    if isinstance(copy.get("conf"), int):
        copy["conf"] = float(copy["conf"])
    return copy


from envad.client import writers_camtrap  # noqa: E402,F401  (registers "camtrap-dp")
